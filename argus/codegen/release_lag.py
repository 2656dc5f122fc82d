"""Deferred stage release in the consumer of a warp-specialised ring (generated code; the IR is unchanged).

The IR's consumer step is `wait(full[s]); acc = mma(a_s[s], b_s[s], acc, instr="wgmma") ...;
arrive(empty[s])`. Emitted literally, the release waits for the step's wgmma groups (wait_group 0),
so the tensor cores idle from the last wgmma of step q until step q+1 is issued. Emitted instead: step
q issues its wgmmas (into the accumulators still in flight from step q-1: wgmmas of one shape chain on
their accumulator registers in order, PTX ISA "wgmma.fence"), then waits until only its own groups are
in flight (wait_group n, n = the step's mma statements) and releases step q-1's stage; the last
step's stage is released after the loop. One step's wgmmas are always in flight while the next is
issued (what CUTLASS calls K_PIPE_MMAS = 1).

Why this is the verified program: a release only moves later, and every step's wgmma reads of its
stage are complete before that stage's release (wait_group n leaves only the later step's groups in
flight), so nothing the producer writes can overtake a read: the safety checks carry over. Progress:
the verifier proves the ring protocol (argus/analysis/ring.py: the consumer's step q waits on
full[q % S] and releases empty[q % S]; the producer's step q waits on empty[q % S] for the release of
step q - S). The producer's step q+1 then waits for the release of step q+1-S, which for S >= 2 is
step q-1 or earlier: released (after step q's wgmmas are issued) before the consumer waits at step
q+1. So the lag applies only to a ring plan of at least two stages (argus/ir/rings.py) whose consumer
step is exactly the shape above; anything else keeps the literal release, as does a consumer role
written with `release="immediate"`. That choice is the kernel's: holding a stage one step longer
takes one stage from the producer's prefetch, which a memory-bound shape can feel (H200 2026-12-02:
16x8192x8192 0.79 -> 0.74 of cuBLAS deferred, while 128x4096x4096 went 0.94 -> 0.98).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.rings import kernel_ring_plan, role_nest

LAG_ENV = "ARGUS_RELEASE_LAG"  # "off": release each stage right after its step's wgmmas (A/B benchmarks)


@dataclass(frozen=True)
class Lag:
    """A consumer step loop whose release is deferred by one step."""

    arrive: ir.Arrive  # the step's final arrive(empty[...])
    mmas: frozenset[int]  # ids of the step's wgmma lets (each one commit group)
    last_mma: int  # id of the step's last wgmma let: the previous release follows it
    groups: int  # commit groups a step issues


def lagged_steps(kernel: ir.Kernel, enabled: bool | None = None) -> dict[int, Lag]:
    """Consumer step loops (by id) whose stage release can be deferred by one step (enabled None:
    unless $ARGUS_RELEASE_LAG is "off")."""
    if enabled is None:
        enabled = os.environ.get(LAG_ENV, "on") != "off"
    if not enabled:
        return {}
    plan = kernel_ring_plan(kernel)
    if plan is None or plan.problems or plan.lag or plan.stages < 2 or plan.consumer.release != "deferred":
        return {}
    step = role_nest(plan.consumer)[3]
    lag = _step_shape(step.body, plan.full, plan.empty)
    return {id(step): lag} if lag is not None else {}


def _step_shape(body: tuple[ir.Stmt, ...], full: str, empty: str) -> Lag | None:
    """The step body must be: scalar lets / assert_tags / assumes, one wait on `full`, in-place wgmma
    lets on shared operands, and last the arrive on `empty`; nothing else (a tile computation, a store,
    a branch) may sit between a release and the wgmmas it now overlaps."""
    if not body or not isinstance(body[-1], ir.Arrive) or body[-1].barrier.name != empty:
        return None
    waited, mmas = False, []
    for s in body[:-1]:
        if isinstance(s, (ir.AssertTag, ir.Assume)):
            continue
        if isinstance(s, ir.WaitBarrier) and s.barrier.name == full and not waited and not mmas:
            waited = True
        elif isinstance(s, ir.Let) and not isinstance(s.value.type, TileT):
            continue
        elif waited and isinstance(s, ir.Let) and _in_place_wgmma(s):
            mmas.append(s)
        else:
            return None
    if not mmas:
        return None
    return Lag(body[-1], frozenset(id(m) for m in mmas), id(mmas[-1]), len(mmas))


def _in_place_wgmma(s: ir.Let) -> bool:
    v = s.value
    return (isinstance(v, ir.Mma) and v.instr == "wgmma" and isinstance(v.acc, ir.Var) and v.acc.name == s.name
            and all(isinstance(x, ir.Ref) and x.space == "shared" for x in (v.a, v.b)))
