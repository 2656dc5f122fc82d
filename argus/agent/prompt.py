"""The Anthropic planner's prompt: the kernel, what was tried and what it earned, why things failed,
the profile diagnosis, contrastive pairs, and the relevant knowledge-base entries. Also the parser
for its reply, which must be data: a JSON edit object or a whole Argus program — never code to run."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from argus.agent.planners.base import Attempt, Node, PlannerContext, Proposal
from argus.agent.program import EDIT_SCHEMA, EditError, diff, parse_edits
from argus.agent.rewrites import DESCRIPTIONS

SYSTEM = """You are an expert CUDA/Hopper performance engineer tuning one kernel written in Argus, a tile-level \
GPU kernel language (Python-like; blocks operate on tiles; `param` values are compile-time choices; \
`mma(..., instr="wgmma"|"mma.sync")`, `pipeline(n, stages=S)`, `shared(dtype[...], swizzle=0|32|64|128)`, \
`copy_async`/`copy_bulk` with mbarriers, `with role("producer"|"consumer", warpgroups=N, registers=R)` for warp \
specialisation (a consumer's `release="deferred"|"immediate"`: hand a ring stage back after the next step's wgmmas \
are issued, the default, or once its own complete), `persistent(n)` tile loops). Every candidate you propose is \
parsed, statically verified, checked \
against the reference at small and unseen irregular shapes, and timed; your reward is the log speedup over the \
starting kernel.

Reply with a short rationale and then EXACTLY ONE fenced block, either
1. a structured edit, applied to the best kernel (or to the kernel of "parent_step"):
```json
{"parent_step": 3, "edits": [{"op": "set_param", "name": "BN", "value": 256}], "reasoning": "..."}
```
   ops: set_param {name, value}; replace_text {old (must occur exactly once), new}; rewrite {name, args} with \
these rewrites (each derived from the program at hand):
__REWRITES__
2. or a complete Argus program (same kernel signature and the same reference: block):
```argus
kernel ...
```
Never reply with Python or shell code; it would not be run. Keep the arguments, outputs and reference: block \
unchanged — a changed interface is rejected."""


def system_prompt() -> str:
    rw = "\n".join(f"   - {n}: {d}" for n, d in sorted(DESCRIPTIONS.items()))
    return SYSTEM.replace("__REWRITES__", rw)


def _tf(n: Node) -> str:
    return "/".join(f"{x:.0f}" for x in n.tflops) if n.tflops else "-"


def _change(n: Node) -> str:
    if n.action == "start":
        return "start"
    if n.edits:
        parts = []
        for e in n.edits:
            if e.get("op") == "set_param":
                parts.append(f"{e['name']}={e['value']}")
            elif e.get("op") == "rewrite":
                parts.append(f"{e['name']}({', '.join(f'{k}={v}' for k, v in (e.get('args') or {}).items())})")
            else:
                parts.append("replace_text")
        return "; ".join(parts)
    return n.action or "new program"


def _program_change(ctx: PlannerContext, n: Node) -> str:
    """A whole-program step, summarised by its param changes (or the number of lines it changed)."""
    parent = ctx.node(n.parent)
    if parent is None or parent.candidate is None or n.candidate is None:
        return "new program"
    d = diff(parent.candidate, n.candidate, context=0).splitlines()
    params = [ln.replace(": ", " ", 1) for ln in d if ": " in ln and " -> " in ln and not ln.startswith(("+", "-"))]
    lines = sum(1 for ln in d if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return "program: " + ("; ".join(params) if params else f"{lines} lines changed")


def trajectory_table(ctx: PlannerContext, limit: int = 30) -> str:
    steps = {n.key: n.step for n in ctx.history if n.key}
    rows = ["| step | parent | change | status | reward | TFLOP/s |", "| ---: | ---: | --- | --- | ---: | ---: |"]
    hist = list(ctx.history)
    if len(hist) > limit:
        hist = hist[:1] + hist[-(limit - 1):]
    for n in hist:
        r = "-" if n.reward is None else f"{n.reward:+.3f}"
        change = _program_change(ctx, n) if n.action == "llm:program" else _change(n)
        rows.append(f"| {n.step} | {steps.get(n.parent, '')} | {change[:70]} | {n.status} | {r} | {_tf(n)} |")
    return "\n".join(rows)


def contrastive_pairs(ctx: PlannerContext, max_pairs: int = 2) -> list[str]:
    ok = [n for n in ctx.history if n.ok and n.candidate is not None]
    if len(ok) < 2:
        return []
    out = []
    fast = max(ok, key=lambda n: n.reward)
    slow = min(ok, key=lambda n: n.reward)
    pairs = [(fast, slow)]
    parent = ctx.node(fast.parent) if fast.parent else None
    if parent is not None and parent.ok and parent.key != slow.key:
        pairs.append((fast, parent))
    worse = [n for n in ok if n.parent and ctx.node(n.parent) and ctx.node(n.parent).ok
             and n.reward < ctx.node(n.parent).reward - 0.05]
    if worse:
        w = min(worse, key=lambda n: n.reward - ctx.node(n.parent).reward)
        pairs.append((ctx.node(w.parent), w))
    seen = set()
    for a, b in pairs:
        if (a.step, b.step) in seen or a.step == b.step:
            continue
        seen.add((a.step, b.step))
        d = diff(b.candidate, a.candidate, context=1)
        if len(d) > 1500:
            d = d[:1500] + "\n... (diff truncated)"
        out.append(f"FAST step {a.step} (reward {a.reward:+.3f}, {_tf(a)} TFLOP/s) vs SLOW step {b.step} "
                   f"(reward {b.reward:+.3f}, {_tf(b)} TFLOP/s); how FAST differs from SLOW:\n```diff\n{d}\n```")
        if len(out) >= max_pairs + 1:
            break
    return out


def earlier_runs(ctx: PlannerContext) -> list[str]:
    """The store's strongest pairs: a change, the times before and after it, and how the programs differ."""
    out = []
    for e in ctx.lessons:
        before, after = e.get("parent_time_s") or [], e.get("time_s") or []
        if not before or not after:
            continue
        fast, slow = ("after", "before") if e["effect"] > 0 else ("before", "after")
        b = e.get("before") or {}
        kern = ", ".join(f"{k} {b[k]}" for k in ("instr", "tile", "stages", "warp_specialised") if k in b)
        times = " / ".join(f"{x * 1e6:.1f}" for x in before) + " us -> " + " / ".join(f"{x * 1e6:.1f}" for x in after)
        est = " (CPU estimates)" if e.get("estimate") else ""
        verdict = {"verified": "proved", "unknown": "unproved"}.get(e.get("verify") or "", e.get("verify") or "")
        change = e.get("action") or ", ".join(_change_text(x) for x in e.get("edits") or []) or "a new program"
        text = (f"FASTER is {fast}, SLOWER is {slow}: `{change}` on kernel {e.get('kernel')} ({kern}): {times}{est}, "
                f"{math.exp(e['effect']):.2f}x, {verdict}")
        if e.get("diff"):
            text += f"\n```diff\n{e['diff']}\n```"
        out.append(text)
    return out


def _change_text(e: dict[str, Any]) -> str:
    if e.get("op") == "set_param":
        return f"{e.get('name')}={e.get('value')}"
    if e.get("op") == "rewrite":
        return f"{e.get('name')}({', '.join(f'{k}={v}' for k, v in (e.get('args') or {}).items())})"
    return "replace_text"


def failures(ctx: PlannerContext, limit: int = 3) -> list[str]:
    out = []
    for n in reversed(ctx.history):
        if n.ok or n.step == 0:
            continue
        msg = n.message.strip()
        if len(msg) > 700:
            msg = msg[:700] + " ..."
        out.append(f"step {n.step} ({_change(n)[:60]}): {n.status}\n{msg}")
        if len(out) >= limit:
            break
    return out


def relevant_kb(ctx: PlannerContext, node: Node, limit: int = 6) -> list[str]:
    ids: list[str] = []
    for d in node.diagnosis:
        for t in d.get("techniques", ()):
            if t not in ids:
                ids.append(t)
    for t in ctx.kb.techniques:  # always offer the big levers for this kind of kernel
        if ctx.kind in t.applies_to and t.id not in ids and t.id in ("wgmma", "warp-specialization", "tile-shape"):
            ids.append(t.id)
    out = []
    for tid in ids[:limit]:
        try:
            out.append(ctx.kb.get(tid).render())
        except KeyError:
            continue
    return out


def build_prompt(ctx: PlannerContext) -> str:
    best = ctx.best
    est = " (estimates from the analytic cost model: no GPU in this run)" if ctx.estimate else ""
    targets = ", ".join("x".join(str(v) for v in s.values()) for s in ctx.target_shapes)
    visible = ", ".join("x".join(str(v) for v in s.values()) for s in ctx.visible_shapes)
    parts = [
        f"Step {ctx.step} of {ctx.budget}. Target shapes ({', '.join(ctx.target_shapes[0])}): {targets}. "
        f"Correctness is checked at {visible} and at unseen irregular shapes.",
        f"Best so far: step {best.step}, reward {best.reward:+.3f} = {math.exp(best.reward or 0):.2f}x the start, "
        f"{_tf(best)} TFLOP/s{est}." + (f" Library baseline: {ctx.library}." if ctx.library else ""),
        "## Best kernel (params folded in)", f"```argus\n{best.candidate.materialise()}```",
        "## Profile diagnosis of the best kernel",
        "\n".join(f"- [{d['signal']}] {d['text']}"
                  + (f" -> {', '.join(d['techniques'])}" if d.get("techniques") else "")
                  for d in best.diagnosis) or "- (none)",
        "## Trajectory (change -> reward)", trajectory_table(ctx),
    ]
    pairs = contrastive_pairs(ctx)
    if pairs:
        parts += ["## Contrastive pairs", "\n\n".join(pairs)]
    lessons = earlier_runs(ctx)
    if lessons:
        parts += ["## Contrastive pairs from earlier runs (the tune store, similar kernels)", "\n\n".join(lessons)]
    fails = failures(ctx)
    if fails:
        parts += ["## Recent failures (verifier counterexamples, compiler and referee messages)", "\n\n".join(fails)]
    kb = relevant_kb(ctx, best)
    if kb:
        parts += [f"## Knowledge base ({ctx.kb.name}, version {ctx.kb.version}): relevant techniques", "\n\n".join(kb)]
    parts.append("Propose the single change most likely to raise the reward. Do not repeat a change from the table.")
    return "\n\n".join(parts)


def repair_prompt(attempt: Attempt) -> str:
    return (f"That proposal was rejected ({attempt.problem}):\n{attempt.message.strip()[:2000]}\n\n"
            "Fix it and reply again in the same format (one ```json``` edit block or one ```argus``` program).")


class ReplyError(ValueError):
    pass


_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


MAX_REPLY_CHARS = 200_000  # the largest example program is ~20 KB


def parse_reply(text: str, ctx: PlannerContext) -> Proposal:
    """A Proposal from the model's reply, or ReplyError saying what is wrong with it."""
    if len(text) > MAX_REPLY_CHARS:
        raise ReplyError(f"the reply is {len(text)} characters; send one edit or one program of at most "
                         f"{MAX_REPLY_CHARS}")
    blocks = _BLOCK.findall(text)
    outside = _BLOCK.sub("", text).strip()
    programs = [b for lang, b in blocks if lang.lower() in ("argus", "arg")]
    jsons = [b for lang, b in blocks if lang.lower() in ("json", "")]
    if len(programs) + len(jsons) > 1:
        raise ReplyError("the reply holds more than one block; send exactly one")
    if programs:
        src = programs[0]
        if not re.search(r"^(kernel|def)\s+\w+\s*\(", src, re.M):
            raise ReplyError("the ```argus``` block is not a kernel program (no `kernel name(...):` header)")
        return Proposal(source=src if src.endswith("\n") else src + "\n", reasoning=outside[:1500],
                        action="llm:program", raw=text)
    body = jsons[0] if jsons else text.strip()
    try:
        obj: Any = json.loads(body)
    except json.JSONDecodeError as e:
        raise ReplyError(f"no ```json``` edit block or ```argus``` program found ({e.msg} at line {e.lineno})") from e
    except (ValueError, RecursionError) as e:  # a 5001-digit integer, nesting deeper than the parser allows
        raise ReplyError(f"the ```json``` block cannot be read: {str(e)[:200]}") from None
    parent = None
    reasoning = outside[:1500]
    if isinstance(obj, dict):
        if "parent_step" in obj and obj["parent_step"] is not None:
            ps = obj["parent_step"]
            node = next((n for n in ctx.history if n.step == ps and n.ok), None)
            if node is None:
                raise ReplyError(f"parent_step {ps} is not an evaluated step")
            parent = node.key
        reasoning = str(obj.get("reasoning") or reasoning)[:1500]
    try:
        edits = parse_edits(obj)
    except EditError as e:
        raise ReplyError(f"bad edit: {e}. Schema: {json.dumps(EDIT_SCHEMA)}") from e
    return Proposal(edits=edits, reasoning=reasoning, action="llm:" + " + ".join(e.describe() for e in edits)[:60],
                    technique="", parent=parent, raw=text)
