"""mbarrier protocols: a path on which every role waits for a phase that never completes."""

from __future__ import annotations

import z3

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, VERIFIED, VIOLATED, Counterexample, Finding
from argus.analysis.solve import small_model, value

CODES = ["deadlock"]


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    for trace, ctx in zip(a.traces, a.contexts):
        if trace.deadlock is not None:
            m = small_model(trace, z3.BoolVal(True), ctx)
            dims = {d: value(m, v) for d, v in ctx.dims.items()} if m is not None else {}
            cx = Counterexample(dims=dims, notes=["every role is blocked in an mbarrier wait"])
            f = Finding("deadlock", VIOLATED, "the mbarrier protocol deadlocks", trace.deadlock, cx,
                        invariant=CHECKS["deadlock"])
            return {"deadlock": (VIOLATED, [f])}
    return {"deadlock": (VERIFIED, [])}
