"""Out-of-bounds global accesses: an unmasked tile access must stay inside its tensor."""

from __future__ import annotations

import z3

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import check_batch, counterexample, presolve, small_model
from argus.analysis.symbolic import as_int
from argus.analysis.trace import Obligation
from argus.ir.threads import copy_thread

CODES = ["oob-global"]


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status, findings, seen = VERIFIED, [], set()
    jobs = []  # (trace, ctx, obligation, view, idx, coords, tensor)
    for trace, ctx in zip(a.traces, a.contexts):
        for n, (view, masked, kind, span, step, _threads) in enumerate(trace.global_accesses):
            # masking clips the sliced axes only: an axis indexed by a scalar must hold its index, masked
            # or not (the interpreter faults there, as the language defines it)
            checked = [e is None or not masked for e in view.extents]
            if not any(checked):
                continue
            t = a.kernel.tensor(view.base)
            idx = tuple(z3.Int(f"g{n}_{d}") for d in range(len(view.shape)))
            coords = view.coords(idx)
            dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in t.dims]
            out = z3.Or(*[z3.Or(as_int(c) < 0, as_int(c) >= d) for c, d, on in zip(coords, dims, checked) if on])
            if view.keep is not None:  # store(..., where=m): masked-off elements are not accessed
                out = z3.And(view.keep(idx), out)
            dom = [c for i, m in zip(idx, view.shape) for c in (i >= 0, i < m)]
            what = "unmasked " if not masked else "indexed axis of a masked "
            msg = lambda what=what, kind=kind, view=view: (  # noqa: E731 - built only if reported
                f"{what}{kind} of {view.describe()} reaches outside tensor '{view.base}'")
            ob = Obligation("oob-global", span, msg, out, dom, {f"element[{d}]": i for d, i in enumerate(idx)}, step)
            jobs.append((trace, ctx, ob, view, idx, coords, t))
    # the accesses of every path solved side by side where there are cores for it (solve.presolve)
    pre = presolve([(trace, [ob], ctx) for trace, ctx, ob, *_ in jobs])
    for (trace, ctx, ob, view, idx, coords, t), got in zip(jobs, pre):
        span = ob.span
        if span in seen:
            continue
        st = got[0] if got is not None and got[0] != VIOLATED else check_batch(trace, [ob], ctx)[0]
        if st == VIOLATED:
            bad = z3.And(*ob.domain, ob.bad)
            m = small_model(trace, bad, ctx, contract=True) or small_model(trace, bad, ctx) \
                or check_batch(trace, [ob], ctx)[2]
            if m is None:  # the solver found the violation but no model again within its budget
                findings.append(Finding("oob-global", UNKNOWN, f"{ob.message} (no counterexample within the "
                                        "solver's budget)", span, invariant=CHECKS["oob-global"]))
                status = UNKNOWN if status == VERIFIED else status
                seen.add(span)
                continue
            cx = counterexample(m, ctx, ob)
            el = tuple(cx.values[f"element[{d}]"] for d in range(len(idx)))
            cx.thread = int(copy_thread(el, view.shape, view.dtype.bytes, a.kernel.threads)) if view.shape \
                else None
            where = ", ".join(str(m.eval(as_int(c), model_completion=True)) for c in coords)
            shape = ", ".join(str(cx.dims.get(d, d)) for d in t.dims)
            cx.notes = [f"touches {view.base}[{where}] of a {t.dtype}[{shape}] tensor"]
            findings.append(Finding("oob-global", VIOLATED, ob.message, span, cx, invariant=CHECKS["oob-global"]))
            status = VIOLATED
            seen.add(span)
        elif st == UNKNOWN and status == VERIFIED:
            status = UNKNOWN
    return {"oob-global": (status, findings)}
