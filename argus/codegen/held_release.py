"""A ring consumer that holds two stages in the source (generated code; the IR is unchanged).

FlashAttention-3's intra-warpgroup order, as the kernel writes it (argus/ir/rings.py, `RingPlan.lag` = 1):
step j waits for stage j, issues QKᵀ of block j, then P·V of block j-1 (reading stage j-1, a register A
operand) and releases stage j-1, then runs block j's softmax. Emitted literally, the release waits for
every wgmma (wait_group 0), so the softmax never runs under the P·V. Emitted instead, in the step
loop of such a consumer:

- a wgmma whose A operand is in registers is left in flight like one on shared operands (mma.py waits
  at once elsewhere: a register A kept live across what follows made the plain FlashAttention spill);
- the first step is emitted apart (`peel`) when an `if` of the step tests the step index against the
  first one (`if j > 0:`), so the later steps issue the P·V unconditionally: a wgmma under a branch
  merges its accumulator's value at the join, and ptxas then serialises every wgmma of the kernel
  (C7514, NVRTC 13.0);
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


def _first_only(cond: ir.Expr, var: str, start: int, step: int) -> bool | None:
    """True when `cond` is false at the loop's first index and true at every later one (a comparison
    of the loop variable with a constant); None when it is not such a test."""
    if not isinstance(cond, ir.Cmp):
        return None
    a, b, op = cond.a, cond.b, cond.op
    if isinstance(b, ir.Var) and isinstance(a, ir.Const):
        a, b, op = b, a, {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "!=": "!=", "==": "=="}.get(op, op)
    if not (isinstance(a, ir.Var) and a.name == var and isinstance(b, ir.Const) and type(b.value) is int):
        return None
    c = b.value
    tests = {">": lambda j: j > c, ">=": lambda j: j >= c, "!=": lambda j: j != c}
    if op not in tests:
        return None
    t = tests[op]
    # monotone in j for > and >=; != holds for every j past its constant
    later = t(start + step) and (op != "!=" or c <= start)
    return True if not t(start) and later else None


def peel(loop: ir.For) -> tuple[tuple[ir.Stmt, ...], tuple[ir.Stmt, ...], int] | None:
    """(the first step's body, the later steps' body, the second index) when some top-level `if` of the
    body is false at the first step and true after it (both bodies with those `if`s resolved)."""
    if not (isinstance(loop.start, ir.Const) and type(loop.start.value) is int and isinstance(loop.step, ir.Const)
            and type(loop.step.value) is int and loop.step.value > 0):
        return None
    start, step = loop.start.value, loop.step.value
    first: list[ir.Stmt] = []
    later: list[ir.Stmt] = []
    found = False
    for s in loop.body:
        if isinstance(s, ir.If) and _first_only(s.cond, loop.var, start, step):
            found = True
            first.extend(s.orelse)
            later.extend(s.then)
        else:
            first.append(s)
            later.append(s)
    return (tuple(first), tuple(later), start + step) if found else None


def blocks_release(s: ir.Stmt) -> bool:
    """Statements a recorded release may not move past: they synchronise or start a loop."""
    return isinstance(s, (ir.WaitBarrier, ir.Arrive, ir.ExpectTx, ir.Barrier, ir.For, ir.Turn))
