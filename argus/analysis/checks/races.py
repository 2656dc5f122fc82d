"""Shared-memory races and stage overwrites.

Two accesses to the same shared element conflict when at least one writes, they come from different
threads (mma operand reads count as many threads), and nothing orders them: within one agent (the
block, or one warp-specialised role) a barrier between them; across agents an mbarrier release/acquire
chain (vector clocks). An async copy writes at any time between its issue and the wait that lands it,
so a copy issued while the stage may still be read is an `async-overwrite`, and a read after the wait
but without a barrier (another thread's copy) is a `race`.
"""

from __future__ import annotations

import z3

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, NO_ANSWER, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import counterexample, small_model, value
from argus.analysis.symbolic import as_int, solver
from argus.analysis.trace import Access
from argus.ir.threads import MULTI, Holders

CODES = ["race", "async-overwrite"]


def _ordered(a: Access, b: Access) -> tuple[bool, str]:
    """Is a (earlier) ordered before b? Returns (ordered, code if not)."""
    a_async = a.kind == "write" and a.record is not None and a.record.mode != "sync"
    b_async = b.kind == "write" and b.record is not None and b.record.mode != "sync"
    if a.agent != b.agent:
        if b.vc.get(a.agent, 0) > a.vc.get(a.agent, 0):
            return True, ""
        if a.agent.startswith("tma") and b.kind == "read":
            return True, ""  # a TMA write read without its wait: reported as async-read-before-wait
        return False, "async-overwrite" if b_async and a.kind == "read" else "race"
    if a.kind == "read" and b.kind == "write":
        return b.epoch > a.epoch, "async-overwrite" if b_async else "race"
    if a.kind == "write" and b.kind == "read":
        if a_async:
            land_epoch = a.record.land_epoch if a.record.land_epoch is not None else a.epoch
            if a.record.land_pos is not None and b.pos < a.record.land_pos:
                return True, ""  # in flight at the read: the async-read-before-wait check owns it
            return b.epoch > land_epoch, "race"
        return b.epoch > a.epoch, "race"
    # write / write
    a_epoch = a.record.land_epoch if a_async and a.record.land_epoch is not None else a.epoch
    return b.epoch > a_epoch, "race"


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status = {c: VERIFIED for c in CODES}
    findings: dict[str, list[Finding]] = {c: [] for c in CODES}
    seen: set = set()
    for trace, ctx in zip(a.traces, a.contexts):
        acc = sorted(trace.accesses, key=lambda x: x.pos)
        for i, x in enumerate(acc):
            for y in acc[i + 1:]:
                if x.view.base != y.view.base or (x.kind == "read" and y.kind == "read") or x.exempt or y.exempt:
                    continue
                if x.thread is MULTI and y.thread is MULTI and x.kind == y.kind == "write":
                    pass
                ordered, code = _ordered(x, y)
                if ordered or not x.view.may_overlap(y.view):
                    continue
                key = (code, x.span, y.span)
                if key in seen:
                    continue
                res = _query(trace, ctx, x, y)
                if res is None:
                    continue
                st, model, ex, ey = res
                seen.add(key)
                if st == UNKNOWN:
                    if status[code] == VERIFIED:
                        status[code] = UNKNOWN
                    findings[code].append(Finding(code, UNKNOWN, f"{CHECKS[code]}: {NO_ANSWER}", y.span,
                                                  invariant=CHECKS[code]))
                    continue
                findings[code].append(_finding(code, x, y, model, ctx, ex, ey))
                status[code] = VIOLATED
    return {c: (status[c], findings[c]) for c in CODES}


def _thread_term(acc: Access, idx, conds: list, tag: str):
    """The thread making access `acc` to element idx (a z3 term, constrained in `conds`), or None for
    many threads (an mma operand)."""
    if acc.thread is MULTI:
        return None
    if isinstance(acc.thread, Holders):
        t, s = z3.Int(f"thread_{tag}"), z3.Int(f"slot_{tag}")
        conds.extend(acc.thread.constraints(tuple(as_int(i) for i in idx), t, s))
        return t
    return as_int(acc.thread(idx))


def _query(trace, ctx, x: Access, y: Access):
    ex = tuple(z3.Int(f"ra{n}") for n in range(len(x.view.shape)))
    ey = tuple(z3.Int(f"rb{n}") for n in range(len(y.view.shape)))
    cx, cy = x.view.coords(ex), y.view.coords(ey)
    conds = [as_int(p) == as_int(q) for p, q in zip(cx, cy)]
    conds += [c for e, n in zip(ex, x.view.shape) for c in (e >= 0, e < n)]
    conds += [c for e, n in zip(ey, y.view.shape) for c in (e >= 0, e < n)]
    tx, ty = _thread_term(x, ex, conds, "a"), _thread_term(y, ey, conds, "b")
    if tx is not None and ty is not None and x.agent == y.agent:
        conds.append(tx != ty)
    formula = z3.And(*conds)
    s = solver(8000)
    s.add(*trace.constraints, formula)
    r = s.check()
    if r == z3.unsat:
        return None
    if r == z3.unknown:
        return UNKNOWN, None, ex, ey
    m = small_model(trace, formula, ctx) or s.model()
    return VIOLATED, m, ex, ey


def _finding(code, x: Access, y: Access, m, ctx, ex, ey) -> Finding:
    from argus.analysis.trace import Obligation

    ob = Obligation(code, y.span, "", z3.BoolVal(True), [], {}, dict(y.step))
    cx = counterexample(m, ctx, ob)
    elem = tuple(value(m, c) for c in x.view.coords(ex))
    tx = None if x.thread is MULTI else value(m, z3.Int("thread_a")) if isinstance(x.thread, Holders) \
        else value(m, x.thread(ex))
    ty = None if y.thread is MULTI else value(m, z3.Int("thread_b")) if isinstance(y.thread, Holders) \
        else value(m, y.thread(ey))
    cx.thread = ty if ty is not None else tx
    cx.values = {"element": f"{x.view.base}[{', '.join(map(str, elem))}]"}
    who = {None: "several threads (mma operand)"}
    first = who.get(tx, f"thread {tx}") if x.kind == "read" or x.record is None or x.record.mode != "bulk" \
        else "the TMA engine"
    second = who.get(ty, f"thread {ty}") if y.kind == "read" or y.record is None or y.record.mode != "bulk" \
        else "the TMA engine"
    loc = f"{x.span.path}:{x.span.line}:{x.span.col}" if x.span else "?"
    cx.notes = [f"first:  {x.kind} by {first} at {loc} (step {_steps(x.step)})",
                f"second: {y.kind} by {second} here (step {_steps(y.step)}), with no barrier or mbarrier "
                "ordering them"]
    cx.sides = {}
    msg = {"race": f"shared-memory race on '{x.view.base}': {x.kind} then {y.kind} by different threads "
                   "with no barrier between",
           "async-overwrite": f"async copy into '{y.view.base}' issued while the stage may still be read "
                              "(no barrier since the read)"}[code]
    return Finding(code, VIOLATED, msg, y.span, cx, invariant=CHECKS[code])


def _steps(step: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in step.items()) or "-"
