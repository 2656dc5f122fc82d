"""The verifier's front door: explore the lowered IR symbolically, run every check, replay violations."""

from __future__ import annotations

import dataclasses
import time

import z3

from argus.analysis import checks
from argus.analysis.checks.common import Analysis
from argus.analysis.executor import explore
from argus.analysis.findings import CHECKS, UNKNOWN, VERIFIED, VIOLATED, CheckResult, Finding, Report
from argus.analysis.footprint import ReferenceContract, add_store_obligations
from argus.analysis.numeric import numeric_tier
from argus.analysis.periodicity import loop_shapes
from argus.analysis.reference_terms import Arr, NotAnalysable, reference_arrays
from argus.analysis.replay import replay
from argus.analysis.symbolic import Unsupported
from argus.ir import nodes as ir
from argus.ir.transform import walk

# the checks of what is stored (its data flow against the reference, NaN): the ones a mask's values reach
DATA_CODES = ("store-coordinates", "accumulation-coverage", "reference-footprint")


def reference_contracts(kernel: ir.Kernel, contexts) -> dict:
    """Per output: the reference's data flow as the stores' contract, or the reason there is none (the
    axis-name contract then applies). No reference block: no explicit contracts."""
    if kernel.reference is None or not contexts:
        return {}
    try:
        env, rt = reference_arrays(kernel, contexts[0])
    except NotAnalysable as exc:
        where = f" ({exc.span.path}:{exc.span.line})" if getattr(exc, "span", None) else ""
        return {o: f"the reference block is not analysed: {exc}{where}" for o in kernel.outputs}
    for c in contexts[1:]:  # the reference's terms serve every path: so do the facts about them
        c.segments.update(contexts[0].segments)
    out: dict = {}
    for o in kernel.outputs:
        arr = env.get(o)
        if not isinstance(arr, Arr):
            out[o] = f"the reference does not compute '{o}' as an array"
        elif len(arr.shape) != len(kernel.tensor(o).dims):
            out[o] = f"the reference computes '{o}' with rank {len(arr.shape)}, not {len(kernel.tensor(o).dims)}"
        else:
            out[o] = ReferenceContract(kernel, o, arr, rt)
    return out


# Checks that read only the kernel, never the explored paths: they run even when exploration failed.
TRACE_FREE = ("swizzle-bijective",)


def verify(kernel: ir.Kernel, defines: dict[str, object] | None = None, *, do_replay: bool = True,
           test: bool = True) -> Report:
    """Prove every check on the lowered kernel; replay violations in the interpreter; with `test`, also
    run the numeric tier (argus.analysis.numeric: the interpreter against the reference at two small
    shapes: tested, not proved)."""
    defines = dict(defines or {})
    t0 = time.perf_counter()
    blocked: tuple[str, object] | None = None  # (reason, span): the paths do not cover every execution
    test_contexts: list | None = None  # where exploration stopped early: the context its assumes built
    try:
        traces, contexts, notes = explore(kernel, defines)
    except (Unsupported, z3.Z3Exception) as exc:
        span = getattr(exc, "span", None)
        where = f" at {span.path}:{span.line}" if span else ""
        traces, contexts, notes = [], [], [f"symbolic execution stopped{where}: {exc}"]
        blocked = (f"not checked: unsupported construct: {exc}", span)
        partial = getattr(exc, "context", None)
        test_contexts = [partial] if partial is not None else []
    explore_s = time.perf_counter() - t0
    if blocked is None and any(n.startswith("more than") for n in notes):
        blocked = (f"not proved: {next(n for n in notes if n.startswith('more than'))}", kernel.span)
    contracts = reference_contracts(kernel, contexts)
    for tr, ctx in zip(traces, contexts):
        add_store_obligations(kernel, tr, ctx, contracts)
    a = Analysis(kernel, defines, traces, contexts, notes)
    shapes = loop_shapes(kernel)
    loops = {n.span: n for n in walk(kernel.body) if isinstance(n, ir.For)}
    for tr in traces:
        for span in tr.truncated:
            loop = loops.get(span)
            sh = shapes.get(id(loop)) if loop is not None else None
            if sh is None or span in a.uncertified or span in a.data_uncertified:
                continue
            if not sh.ok:
                a.uncertified.append(span)
                a.notes.append(f"{span.path}:{span.line}: trip counts above {sh.cap} not covered: {sh.why}")
            elif not sh.data_ok:
                a.data_uncertified.append(span)
                a.notes.append(f"{span.path}:{span.line}: trip counts above {sh.cap} not covered for the stored "
                               f"data: {sh.data_why}")
    by_code: dict[str, CheckResult] = {}
    rank = {VERIFIED: 0, UNKNOWN: 1, VIOLATED: 2}
    for mod in checks.ALL:
        t = time.perf_counter()
        out = mod.run(a)
        dt = (time.perf_counter() - t) / max(1, len(out))
        for code, res in out.items():
            # a module that times its checks separately says so; else its time is shared equally
            got = CheckResult(code, res[0], res[2] if len(res) > 2 else dt, list(res[1]))
            prev = by_code.get(code)
            if prev is None:
                by_code[code] = got
            else:  # two modules prove parts of one check: the worse verdict, every finding
                prev.status = max(prev.status, got.status, key=rank.get)
                prev.findings.extend(got.findings)
                prev.seconds += got.seconds
    results: list[CheckResult] = []
    for code in CHECKS:
        r = by_code.get(code) or CheckResult(code, VERIFIED, 0.0, [])
        status, findings = r.status, r.findings
        # a site in scope the executor could not turn into an obligation: unknown, never verified
        seen = set()
        for u in (u for tr in traces for u in tr.unknowns if u.check == code):
            if (u.span, u.reason) not in seen:
                seen.add((u.span, u.reason))
                findings.append(Finding(code, UNKNOWN, f"not proved: {u.reason}", u.span, invariant=CHECKS[code]))
                status = UNKNOWN if status == VERIFIED else status
        if code not in TRACE_FREE:
            # a verdict about the explored paths only holds if they cover every execution
            if blocked is not None and status == VERIFIED:
                status = UNKNOWN
                findings.append(Finding(code, UNKNOWN, blocked[0], blocked[1], invariant=CHECKS[code]))
            elif (a.uncertified or (a.data_uncertified and code in DATA_CODES)) and status == VERIFIED:
                status = UNKNOWN
                for span in a.uncertified or a.data_uncertified:
                    why = next((n.split(": ", 1)[1] for n in a.notes if n.startswith(f"{span.path}:{span.line}:")),
                               "trip counts above the explored ones are not covered")
                    findings.append(Finding(code, UNKNOWN, f"not proved: {why}", span, invariant=CHECKS[code]))
        results.append(CheckResult(code, status, r.seconds, findings))
    if do_replay:
        for r in results:
            for f in r.findings:
                if f.status == VIOLATED:
                    f.replay = replay(kernel, defines, f, contexts=contexts)
                    # a claim may need particular data to show (a row whose elements are all negative):
                    # a few more random inputs before it is dropped to unknown
                    for seed in range(1, 4 if f.claim else 1):
                        if f.replay.confirmed:
                            break
                        again = replay(kernel, defines, dataclasses.replace(f, replay=None), seed=seed,
                                       contexts=contexts)
                        if again.confirmed:
                            f.replay = again
    settle_claims(results)
    notes = a.notes + ([f"{len(traces)} path(s) explored"] if blocked is None or traces else [])
    tested = None
    if test:
        t = time.perf_counter()
        tested = numeric_tier(kernel, defines, contexts if test_contexts is None else test_contexts)
        notes.append(f"numeric tier: {time.perf_counter() - t:.2f} s")
    return Report(kernel.name, kernel.path, results, notes + [f"symbolic execution: {explore_s:.2f} s"], tested)


def settle_claims(results: list[CheckResult]) -> None:
    """A claim (a model of an approximate query) stands only when the interpreter reproduced it; otherwise
    nothing is proved either way and the finding, and its check if nothing else is violated, is unknown."""
    for r in results:
        for f in r.findings:
            if f.claim and f.status == VIOLATED and not (f.replay and f.replay.confirmed):
                f.status = UNKNOWN
                f.message = (f"not proved: {f.message}? (a model of an approximate query that the interpreter "
                             "did not reproduce)")
        if r.status == VIOLATED and not any(f.status == VIOLATED for f in r.findings):
            r.status = UNKNOWN
