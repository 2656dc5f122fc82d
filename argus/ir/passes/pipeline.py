"""Expand `for k in pipeline(n, stages=S)` into an explicit cp.async schedule.

The body is written for one step k: producer (index math + copy_async for step k), then
wait_async(bufs), then consumer (compute on step k). With S >= 2 stages the schedule is

    prologue:  for p in 0..S-2 (unrolled):  if p < n: producer(p);  commit
    steady:    for k in 0..n-S:   wait_group(S-2); barrier; producer(k+S-1); commit; consumer(k)
    epilogue:  for k in max(n-S+1, 0)..n-1:  wait_group(S-2); barrier; commit; consumer(k)

Commit groups stay one per step (empty in the epilogue), so `wait_group(S-2)` at step k always means
"the copies of step k have landed". The barrier after the wait makes every thread's copies visible and
guarantees that all threads finished consumer(k-1) -- the last reader of the stage (k+S-1) % S that
producer(k+S-1) overwrites. With S = 1 there is nothing to overlap: producer(k); commit; wait_group(0);
barrier; consumer(k); barrier.

The producer's locals are renamed (s -> s__pf) so that they do not clobber the consumer's, which are
recomputed for step k. The verifier checks this schedule, not the source form.
"""

from __future__ import annotations

import dataclasses

from argus.dsl.types import BOOL, I32, ScalarT
from argus.ir import nodes as ir
from argus.ir.transform import expand_stmts, fold_constants, rename_locals, substitute

_I32 = ScalarT(I32, False)
_C = ScalarT(I32, True)


def _c(v: int, span) -> ir.Const:
    return ir.Const(_C, span, v)


def _add(a: ir.Expr, b: ir.Expr, span) -> ir.Expr:
    if isinstance(b, ir.Const) and b.value == 0:
        return a
    if isinstance(a, ir.Const) and isinstance(b, ir.Const):
        return _c(a.value + b.value, span)
    return ir.Bin(_I32, span, "+", a, b)


def _expand(p: ir.PipelineFor) -> tuple[ir.Stmt, ...]:
    sp, S, k, n = p.span, p.stages, p.var, p.count
    lets = tuple(s for s in p.producer if isinstance(s, ir.Let))
    renames = {s.name: f"{s.name}__pf" for s in lets}
    kv = ir.Var(_I32, sp, k)

    def producer_at(step: ir.Expr) -> tuple[ir.Stmt, ...]:
        return fold_constants(substitute(rename_locals(p.producer, renames), {k: step}))

    consumer = lets + p.consumer  # the consumer recomputes the step's indices (e.g. s = k % S)
    wspan = p.wait_span or sp
    if S == 1:
        body = producer_at(kv) + (ir.Commit(wspan), ir.WaitGroup(wspan, 0), ir.Barrier(wspan)) + consumer \
            + (ir.Barrier(sp),)
        return (ir.For(sp, k, _c(0, sp), n, _c(1, sp), body, "serial"),)
    out: list[ir.Stmt] = []
    for j in range(S - 1):  # prologue
        guard = ir.Cmp(ScalarT(BOOL, False), sp, "<", _c(j, sp), n)
        out.append(ir.If(sp, guard, producer_at(_c(j, sp)), ()))
        out.append(ir.Commit(wspan))
    steady_stop = ir.Bin(_I32, sp, "-", n, _c(S - 1, sp))
    steady = (ir.WaitGroup(wspan, S - 2), ir.Barrier(wspan)) + producer_at(_add(kv, _c(S - 1, sp), sp)) \
        + (ir.Commit(wspan),) + consumer
    out.append(ir.For(sp, k, _c(0, sp), steady_stop, _c(1, sp), steady, "serial"))
    epi_start = ir.Math(_I32, sp, "max", (steady_stop, _c(0, sp)))
    epilogue = (ir.WaitGroup(wspan, S - 2), ir.Barrier(wspan), ir.Commit(wspan)) + consumer
    out.append(ir.For(sp, k, epi_start, n, _c(1, sp), epilogue, "serial"))
    return tuple(out)


def expand_pipelines(kernel: ir.Kernel) -> ir.Kernel:
    body = expand_stmts(kernel.body, lambda s: _expand(s) if isinstance(s, ir.PipelineFor) else None)
    return dataclasses.replace(kernel, body=body)
