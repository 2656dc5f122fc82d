"""A ring consumer that holds two stages in the source (generated code; the IR is unchanged).

FlashAttention-3's intra-warpgroup order, as the kernel writes it (argus/ir/rings.py, `RingPlan.lag` = 1):
step j waits for stage j, issues QKᵀ of block j, then P·V of block j-1 (reading stage j-1, a register A
operand) and releases stage j-1, then runs block j's softmax. Emitted literally, the release waits for
every wgmma (wait_group 0), so the softmax never runs under the P·V. Emitted instead, in the step
loop of such a consumer:

- a wgmma whose A operand is in registers is left in flight like one on shared operands (mma.py waits
  at once elsewhere: a register A kept live across what follows made the plain FlashAttention spill);
- the release is recorded (the barrier's address and a flag) and performed once every wgmma group
  issued before it is done: at the first wait that covers them (the rescale of the accumulator, after
  the softmax), before any other mbarrier operation, barrier or loop, and at the latest at the end of
  the step. A flag guards it, so a release recorded in a branch is made once, on the path that took it.

Why this is the verified program: the release moves later within the same step and only after
every wgmma issued before it has completed, so no read of the stage is outstanding when the producer
may refill it (the hazard checks carry over); between the two points the step waits on no mbarrier,
so the producer's progress is what the ring protocol proves (argus/analysis/ring.py), delayed by
part of one step. Off with the other wgmma deferrals (ARGUS_WGMMA_WAIT=eager).
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.ir import nodes as ir
from argus.ir.rings import kernel_ring_plan, role_nest


@dataclass(frozen=True)
class Hold:
    step: int  # id of the consumer's step loop
    empty: str  # the barrier its releases arrive on


@dataclass
class Held:
    var: str  # local holding the barrier address; `{var}_on` says a release is recorded
    arrive: ir.Arrive  # the release as written
    names: frozenset[str]  # wgmma accumulators in flight when it was recorded
    ifs: tuple[int, ...]  # the branches it was recorded in


def hold_of(kernel: ir.Kernel, enabled: bool) -> Hold | None:
    """The consumer step loop of a two-stage-holding ring, when wgmma waits are deferred."""
    plan = kernel_ring_plan(kernel) if enabled else None
    if plan is None or not plan.lag or plan.problems:
        return None
    return Hold(id(role_nest(plan.consumer)[3]), plan.empty)


def blocks_release(s: ir.Stmt) -> bool:
    """Statements a recorded release may not move past: they synchronise or start a loop."""
    return isinstance(s, (ir.WaitBarrier, ir.Arrive, ir.ExpectTx, ir.Barrier, ir.For))
