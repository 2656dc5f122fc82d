"""Discharges the obligations the symbolic executor collected (tags, stores, async reads, shared bounds)."""

from __future__ import annotations

import time

from argus.analysis.checks.common import Analysis, owner_of_accumulator
from argus.analysis.findings import CHECKS, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import check_batch, counterexample, small_model
from argus.ir.threads import copy_thread

CODES = ["mma-contraction", "mma-accumulator", "store-coordinates", "accumulation-coverage", "reference-footprint",
         "tag-assertion", "uninitialized-read", "async-read-before-wait", "oob-shared"]


def run(a: Analysis) -> dict[str, tuple]:
    """Per code: (status, findings, seconds)."""
    out: dict[str, tuple[str, list[Finding]]] = {}
    # Longer paths first: a counterexample a few steps into a loop shows its effect on the output
    # (a wrong rescale is invisible with a single kv block), which is what replay needs.
    order = sorted(zip(a.traces, a.contexts), key=lambda tc: -len(tc[0].records))
    # other checks' codes may carry obligations too (a ring's protocol: deadlock, async-overwrite)
    extra = sorted({o.check for tr in a.traces for o in tr.obligations} - set(CODES))
    for code in CODES + extra:
        t0 = time.perf_counter()
        status, findings, seen = VERIFIED, [], set()
        for trace, ctx in order:
            obs = [o for o in trace.obligations if o.check == code]
            # one query per static site keeps the models small and the findings one per site
            by_site: dict = {}
            for o in obs:
                by_site.setdefault(o.span, []).append(o)
            for site, group in by_site.items():
                if (code, site) in seen:
                    continue
                st, ob, _m = check_batch(trace, group, ctx)
                if st == VIOLATED:
                    m = small_model(trace, _conj(ob), ctx)
                    if ob.refine is not None and (m is None or ob.refine(m) is not None):
                        m = _m  # the small model only satisfies the over-approximation: keep the confirmed one
                    cx = counterexample(m, ctx, ob) if m is not None else None
                    if cx is not None:
                        cx.thread = _thread(a, code, ob, cx)
                    seen.add((code, site))
                    findings.append(Finding(code, VIOLATED, ob.message, ob.span, cx, invariant=CHECKS[code]))
                    status = VIOLATED
                elif st == UNKNOWN and status == VERIFIED:
                    status = UNKNOWN
                    findings.append(Finding(code, UNKNOWN, f"{CHECKS[code]}: the solver timed out", site,
                                            invariant=CHECKS[code]))
        out[code] = (status, findings, time.perf_counter() - t0)
    return out


def _conj(ob):
    import z3
    return z3.And(*ob.domain, ob.bad)


def _thread(a: Analysis, code: str, ob, cx) -> int | None:
    vals = cx.values
    if code in ("mma-contraction", "mma-accumulator", "uninitialized-read"):
        layout = None
        for tr in a.traces:
            for e, *_ in tr.mmas:
                if e.span == ob.span:
                    layout = e.layout
        return owner_of_accumulator(layout, vals.get("row i"), vals.get("col j", 0))
    if code in ("store-coordinates", "async-read-before-wait"):
        idx = tuple(v for k, v in sorted(vals.items()) if k.startswith("element["))
        view = ob.extra.get("view")
        shape = view.shape if view is not None else None
        if shape and len(idx) == len(shape):
            return int(copy_thread(idx, shape, view.dtype.bytes, a.kernel.threads))
        return 0 if idx else None
    return None
