"""End-of-run outputs: the best kernel as a standalone .arg file, a markdown report, and the plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from argus.agent.kb import KnowledgeBase
from argus.agent.png import plot_rewards
from argus.agent.program import Candidate, diff
from argus.escape import fence, markdown, markdown_cell
from argus.files import write_output


def _fmt_dims(d: dict[str, int]) -> str:
    return "x".join(str(v) for v in d.values())


def _change(s: dict[str, Any]) -> str:
    p = s.get("proposal") or {}
    if p.get("source"):
        return "new program"
    edits = p.get("edits") or []
    parts = []
    for e in edits:
        if e["op"] == "set_param":
            parts.append(f"{e['name']}={e['value']}")
        elif e["op"] == "rewrite":
            args = ", ".join(f"{k}={v}" for k, v in (e.get("args") or {}).items())
            parts.append(f"{e['name']}({args})")
        else:
            parts.append("replace_text")
    return (p.get("action") or "") + (f" [{'; '.join(parts)}]" if parts else "")


def _proved(s: dict[str, Any]) -> bool:
    return (s.get("verify") or {}).get("status") == "verified"


def _reason(s: dict[str, Any]) -> str:
    ev = s.get("evaluation") or {}
    if s.get("status") == "ok":
        return ""
    if ev.get("message"):
        return ev["message"]
    at = s.get("attempts") or []
    return at[-1]["message"].splitlines()[0] if at else ""


def write_outputs(out: Path, header: dict[str, Any], steps: list[dict[str, Any]], best: dict[str, Any],
                  start: Candidate, kb: KnowledgeBase) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    est = bool(header.get("estimate"))
    e = " (est.)" if est else ""
    cand = Candidate.from_json(best["candidate"])
    tf = "/".join(f"{x:.0f}" for x in best.get("tflops") or [])
    targets = ", ".join(_fmt_dims(t) for t in header["targets"])
    kernel = header.get("kernel", "kernel")
    best_path = out / f"{kernel}_tuned.arg"
    src = cand.materialise().lstrip("\n")  # one kernel of a file of several keeps its line numbers
    banner = (f"# Tuned by `argus tune` (planner {header['planner']}, seed {header['seed']}): step {best['step']} of "
              f"{len(steps) - 1}, {math.exp(best['reward']):.2f}x the starting kernel{e}\n"
              f"# at {targets}: {tf} TFLOP/s{e}. Run record: record.jsonl in this folder.\n")
    if not _proved(best):
        banner += "# Unproved: the verifier's verdict on this kernel is unknown (tested, not proved).\n"
    write_output(best_path, (banner + src).encode(), force=True)  # never through a planted link

    rewards = [s.get("reward") for s in steps]
    bests = [s["best_reward"] for s in steps]
    plot = out / "reward.png"
    plot_rewards(plot, rewards, bests, f"argus tune {kernel}: reward per step" + (" (estimates)" if est else ""))

    lines = [f"# argus tune: {markdown_cell(kernel)} ({markdown_cell(header['file'])})", ""]
    if est:
        lines += ["> **CPU mode: every time, TFLOP/s figure and speedup below is an estimate** from the analytic "
                  "cost model (argus/agent/costmodel.py); correctness was checked in the interpreter at small shapes, "
                  "unseen irregular ones and unseen ones up to the targets' scale, and at every timed shape by "
                  "sampled blocks against float64 samples of the reference.", ""]
    lib = best.get("library_ratio")
    n_ok = sum(1 for s in steps[1:] if s["status"] == "ok")
    n_gate = sum(1 for s in steps[1:] if s["status"] in ("violated", "invalid", "compile-error", "duplicate"))
    n_ref = sum(1 for s in steps[1:] if s["status"] in ("wrong", "timeout", "fault", "rejected", "error"))
    lines += [
        f"- evaluator: {markdown(str(header['evaluator']))}; verifier: {markdown(str(header['verifier']))}; "
        f"planner: {markdown(str(header['planner']))}"
        + (f" (model {markdown(str(header['model']))})" if header.get("model") else "") + f", seed {header['seed']}, "
        f"budget {header['budget']}; knowledge base {header['kb_version']}",
        f"- target shapes: {targets}; planner-visible check shapes: "
        f"{', '.join(_fmt_dims(t) for t in header['checks'])} (+ hidden irregular shapes per evaluation)",
        f"- start: {markdown(start.label())} — {'/'.join(f'{x:.0f}' for x in steps[0].get('tflops') or [])} "
        f"TFLOP/s{e}",
        f"- best: step {best['step']}, **{math.exp(best['reward']):.2f}x** the start{e}, {tf} TFLOP/s{e}"
        + (f", {lib:.2f}x the library baseline{e}" if lib else "")
        + ("" if _proved(best) else "; **unproved**: the verifier's verdict is unknown (tested, not proved)"),
        f"- steps: {len(steps) - 1} proposals; {n_ok} evaluated ok, {n_gate} stopped before evaluation "
        f"(verifier, compiler or an unusable edit), {n_ref} failed the referee",
        "", "![reward per step](reward.png)", "", "## Key steps (each new best)", "",
        "| step | change | TFLOP/s | speedup | vs library |", "| ---: | --- | ---: | ---: | ---: |"]
    prev = -math.inf
    for s in steps:
        if s.get("reward") is not None and s["reward"] > prev:
            prev = s["reward"]
            lr = s.get("library_ratio")
            lines.append(f"| {s['step']} | {markdown_cell(_change(s) or 'start', 120)} | "
                         f"{'/'.join(f'{x:.0f}' for x in s.get('tflops') or [])} | {math.exp(s['reward']):.2f}x | "
                         f"{f'{lr:.2f}x' if lr else '-'} |")
    lines += ["", "## Trajectory", "", "| step | parent | change | verifier | status | reward | best | note |",
              "| ---: | --- | --- | --- | --- | ---: | ---: | --- |"]
    keys = {s.get("key"): s["step"] for s in steps}
    for s in steps:
        v = s.get("verify") or {}
        r = s.get("reward")
        note = markdown_cell(_reason(s), 110)
        parent = keys.get(s.get("parent"), "")
        verdict = markdown_cell(f"{v.get('status', '-')} ({v.get('source', '-')})")
        lines.append(f"| {s['step']} | {parent} | {markdown_cell(_change(s) or 'start', 120)} | {verdict} | "
                     f"{markdown_cell(s['status'])} | {'-' if r is None else f'{r:+.3f}'} | "
                     f"{s['best_reward']:+.3f} | {note} |")
    lines += ["", "## Best kernel against the start", "", fence(diff(start, cand, context=2), "diff"), "",
              "## Diagnosis of the best kernel", ""]
    for d in best.get("diagnosis") or []:
        tech = f" → {', '.join(d['techniques'])}" if d.get("techniques") else ""
        lines.append(markdown(f"- [{d['signal']}] {d['text']}{tech}"))
    used = sorted({s["proposal"].get("technique") for s in steps[1:] if s["proposal"].get("technique")})
    if used:
        lines += ["", "## Techniques tried", ""]
        for tid in used:
            try:
                t = kb.get(tid)
            except KeyError:
                continue
            tried = [s for s in steps[1:] if s["proposal"].get("technique") == tid]
            ok = [s for s in tried if s.get("reward") is not None]
            lines.append(f"- **{markdown(t.title)}** ({markdown(tid)}): {len(tried)} tries, {len(ok)} evaluated"
                         + (f", best reward {max(s['reward'] for s in ok):+.3f}" if ok else ""))
    report = out / "report.md"
    write_output(report, ("\n".join(lines) + "\n").encode(), force=True)
    return {"best": best_path, "report": report, "plot": plot}
