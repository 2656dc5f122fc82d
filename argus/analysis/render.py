"""Human-readable verifier reports (the JSON form is Report.to_json, documented in README.md)."""

from __future__ import annotations

from argus.analysis.findings import VERIFIED, VIOLATED, Finding, Report
from argus.dsl.diagnostics import Diagnostic, render


def _cx_lines(f: Finding) -> list[str]:
    cx = f.counterexample
    if cx is None:
        return []
    head = []
    if cx.dims:
        head.append(" ".join(f"{k}={v}" for k, v in cx.dims.items()))
    if cx.scalars:
        head.append(" ".join(f"{k}={v}" for k, v in cx.scalars.items()))
    if cx.block is not None:
        head.append(f"block {tuple(cx.block)}")
    if cx.thread is not None:
        head.append(f"thread {cx.thread} (warp {cx.thread // 32}, lane {cx.thread % 32})")
    if cx.steps:
        head.append("step " + " ".join(f"{k}={v}" for k, v in cx.steps.items()))
    if cx.values:
        head.append(" ".join(f"{k}={v}" for k, v in cx.values.items()))
    lines = ["counterexample: " + " | ".join(head)] if head else []
    for label, fields in cx.sides.items():
        shown = ", ".join(f"{k}={v}" for k, v in fields.items() if k != "tensor")
        lines.append(f"  {label}: {shown}")
    lines.extend(f"  {n}" for n in cx.notes)
    return lines


def render_finding(f: Finding) -> str:
    notes = []
    if f.invariant:
        notes.append(f"invariant: {f.invariant}")
    notes.extend(_cx_lines(f))
    if f.replay is not None:
        notes.append(("replay: " if f.replay.confirmed else "replay: NOT confirmed: ") + f.replay.summary)
    sev = "error" if f.status == VIOLATED else "warning"
    msg = f.message if f.status == VIOLATED else f"{f.message} (unknown)"
    return render(Diagnostic(sev, f.check, msg, f.span, tuple(notes)))


def render_report(r: Report, timings: bool = False) -> str:
    out = []
    # one unknown reason shared by many checks (symbolic execution stopped) is printed once, with its checks
    shared: dict[tuple, list[Finding]] = {}
    for f in r.findings:
        if f.status != VIOLATED and f.counterexample is None:
            shared.setdefault((f.message, f.span), []).append(f)
    done: set[tuple] = set()
    for f in r.findings:
        key = (f.message, f.span)
        group = shared.get(key, [])
        if len(group) > 2:
            if key not in done:
                done.add(key)
                codes = ", ".join(g.check for g in group)
                out.append(render(Diagnostic("warning", "unknown", f"{f.message} (unknown: {len(group)} checks)",
                                             f.span, (f"checks: {codes}",))))
            continue
        out.append(render_finding(f))
    counts: dict[str, int] = {}
    for c in r.results:
        counts[c.status] = counts.get(c.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    tested = ""
    if r.tested is not None and r.tested.shapes:
        tested = f"; {'tested' if r.tested.ok else 'FAILED its test'} at {len(r.tested.shapes)} shapes"
    out.append(f"{r.path}: kernel '{r.kernel}': {r.status} ({len(r.results)} checks: {summary}{tested})")
    if r.tested is not None and (timings or not r.tested.ok or not r.tested.shapes):
        out.extend(r.tested.render())
    if timings or r.status != VERIFIED:
        for n in r.notes:
            out.append(f"  note: {n}")
    if timings:
        for c in r.results:
            out.append(f"  {c.check:24s} {c.status:9s} {c.seconds * 1000:8.1f} ms")
    return "\n".join(out)
