"""Discharges the obligations the symbolic executor collected (tags, stores, async reads, shared bounds)."""

from __future__ import annotations

import time

import z3

from argus.analysis import terms as T
from argus.analysis.checks.common import Analysis, owner_of_accumulator
from argus.analysis.findings import CHECKS, NO_ANSWER, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import check_batch, contract_breaks, counterexample, presolve, shrunk_model, small_model
from argus.ir.threads import copy_thread

CODES = ["mma-contraction", "mma-accumulator", "store-coordinates", "accumulation-coverage", "reference-footprint",
         "tag-assertion", "uninitialized-read", "async-read-before-wait", "oob-shared", "division-by-zero"]


def run(a: Analysis) -> dict[str, tuple]:
    """Per code: (status, findings, seconds)."""
    out: dict[str, tuple[str, list[Finding]]] = {}
    # Longer paths first: a counterexample a few steps into a loop shows its effect on the output
    # (a wrong rescale is invisible with a single kv block), which is what replay needs.
    order = sorted(zip(a.traces, a.contexts), key=lambda tc: -len(tc[0].records))
    # other checks' codes may carry obligations too (a ring's protocol: deadlock, async-overwrite)
    extra = sorted({o.check for tr in a.traces for o in tr.obligations} - set(CODES))
    # one query per static site keeps the models small and the findings one per site
    jobs = []  # (code, trace, ctx, site, group) in the order the findings are reported
    for code in CODES + extra:
        for trace, ctx in order:
            by_site: dict = {}
            for o in trace.obligations:
                if o.check == code:
                    by_site.setdefault(o.span, []).append(o)
            jobs.extend((code, trace, ctx, site, group) for site, group in by_site.items())
    verdicts = presolve([(trace, group, ctx) for _c, trace, ctx, _s, group in jobs])
    seconds: dict[str, float] = {}
    for code in CODES + extra:
        out[code] = (VERIFIED, [])
    seen = set()
    for (code, trace, ctx, site, group), pre in zip(jobs, verdicts):
        t0 = time.perf_counter()
        status, findings = out[code]
        if (code, site) in seen:
            continue
        if pre is not None and pre[0] != VIOLATED:
            st, ob, _m = pre[0], None, None
            seconds[code] = seconds.get(code, 0.0) + pre[1]
        else:  # a violation (or no presolved verdict): solve here, for the model the finding needs
            st, ob, _m = check_batch(trace, group, ctx)
        if st == VIOLATED:
            m = None
            if ob.extra.get("claim"):
                # a claim stands only if replay reproduces it: prefer a witness with every dim at least 2
                # (at N = 1 a row's centred value is 0 and an extra tail term changes nothing)
                m = small_model(trace, z3.And(_conj(ob), *[d >= 2 for d in ctx.dims.values()]), ctx)
                if m is not None:
                    m = shrunk_model(trace, z3.And(_conj(ob), *[d >= 2 for d in ctx.dims.values()]), ctx, m,
                                     lambda dims: _too_large(a.kernel, dims))
            m = m or small_model(trace, _conj(ob), ctx)
            if m is not None and _m is not None and contract_breaks(m, ctx):
                m = _m  # the small model ignores the contract's instances: keep the one that keeps them
            if ob.refine is not None and (m is None or ob.refine(m) is not None):
                m = _m  # the small model only satisfies the over-approximation: keep the confirmed one
            cx = counterexample(m, ctx, ob) if m is not None else None
            if cx is not None:
                cx.thread = _thread(a, code, ob, cx)
            seen.add((code, site))
            # an obligation over a structural over-approximation is a claim: replay must reproduce it
            findings.append(Finding(code, VIOLATED, ob.message, ob.span, cx, invariant=CHECKS[code],
                                    claim=bool(ob.extra.get("claim")) or _over_contract(ob, ctx)))
            status = VIOLATED
        elif st == UNKNOWN and status == VERIFIED:
            status = UNKNOWN
            findings.append(Finding(code, UNKNOWN, f"{CHECKS[code]}: {NO_ANSWER}", site,
                                    invariant=CHECKS[code]))
        out[code] = (status, findings)
        seconds[code] = seconds.get(code, 0.0) + time.perf_counter() - t0
    return {code: (st, f, seconds.get(code, 0.0)) for code, (st, f) in out.items()}


def _too_large(kernel, dims: dict) -> bool:
    """As replay's limit (argus.analysis.replay.MAX_ELEMENTS): larger dims are replayed at other ones."""
    import math

    sizes = [math.prod(dims.get(d, 1) if isinstance(d, str) else d for d in t.dims) for t in kernel.tensors]
    return sum(sizes) > REPLAY_ELEMENTS


REPLAY_ELEMENTS = 1 << 22


def _over_contract(ob, ctx) -> bool:
    """A model of a query that reads tensor contents a quantified assume constrains satisfies that contract
    only where it was instantiated (contract_facts, contract_breaks: up to a scan of the model's indices,
    never as a quantifier): the finding is a claim, violated only where the interpreter reproduces it on
    contents built from the whole contract, unknown otherwise."""
    if not ctx.quantified:
        return False
    from argus.ir import nodes as ir
    from argus.ir.transform import walk

    names = {n.ref.base for lam, _over, _env in ctx.quantified for n in walk(lam.body) if isinstance(n, ir.Load)}
    return bool(names and T.applied_names(_conj(ob), names))


def _conj(ob):
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
