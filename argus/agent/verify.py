"""The verifier hook: a candidate's IR in, `verified | violated | unknown` with findings out.

`verify(kernel_ir)` calls `argus.analysis.verify(kernel_ir)` when the static verifier provides it
(imported lazily, so the tuner works before it lands and picks it up the moment it does). Until then —
or when it is switched off — the check is the front end plus the interpreter at small shapes: compile
errors are violations with their diagnostics, a wrong or faulting run is a violation with the run's
counterexample, and a clean run is `unknown` (tested, not proved: never reported as verified). Each
outcome records its `source` so the run record says which checker spoke.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from argus.dsl.diagnostics import ArgusError, Diagnostic
from argus.ir import nodes as ir

STATUSES = ("verified", "violated", "unknown")


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    counterexample: str = ""
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "counterexample": self.counterexample,
                "line": self.line}

    def describe(self) -> str:
        loc = f"line {self.line}: " if self.line else ""
        cx = f"\n    counterexample: {self.counterexample}" if self.counterexample else ""
        return f"{loc}[{self.code}] {self.message}{cx}"


@dataclass(frozen=True)
class VerifyOutcome:
    status: str  # "verified" | "violated" | "unknown"
    findings: tuple[Finding, ...] = ()
    source: str = "frontend"  # "argus.analysis" | "frontend" | "frontend+interp"
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verify status must be one of {STATUSES}, not {self.status!r}")

    @property
    def violated(self) -> bool:
        return self.status == "violated"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "source": self.source, "seconds": round(self.seconds, 4),
                "findings": [f.to_json() for f in self.findings], "notes": list(self.notes)}

    def details(self) -> str:
        """The findings (and notes) without the status line: what a planner needs to repair."""
        lines = [f.describe() for f in self.findings] + [f"note: {n}" for n in self.notes]
        return "\n".join(lines) or self.status

    def describe(self) -> str:
        head = f"{self.status} ({self.source})"
        return "\n".join([head] + [f"  {f.describe()}" for f in self.findings] + [f"  note: {n}" for n in self.notes])


def findings_from_diagnostics(diags: list[Diagnostic], details: dict | None = None) -> tuple[Finding, ...]:
    out = []
    for d in diags:
        if d.severity != "error":
            continue
        cx = "; ".join(d.notes)
        if details:
            cx = (cx + "; " if cx else "") + ", ".join(f"{k}={v}" for k, v in details.items())
        out.append(Finding(d.code, d.message, cx, d.span.line if d.span else None))
    return tuple(out)


def _text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        return ", ".join(f"{k}={v}" for k, v in x.items())
    for attr in ("describe", "render", "to_json"):
        fn = getattr(x, attr, None)
        if callable(fn):
            return _text(fn()) if attr == "to_json" else str(fn())
    try:
        return json.dumps(x, default=str)
    except (TypeError, ValueError):
        return str(x)


def adapt(result: Any, source: str = "argus.analysis") -> VerifyOutcome:
    """Normalise whatever the static verifier returns into a VerifyOutcome (duck-typed on purpose:
    objects or dicts with `status` and `findings`/`diagnostics`, each with code/message/counterexample)."""
    if isinstance(result, VerifyOutcome):
        return result
    get = (lambda k, d=None: result.get(k, d)) if isinstance(result, dict) else \
        (lambda k, d=None: getattr(result, k, d))
    status = get("status")
    if status not in STATUSES:
        ok = get("ok")
        status = "verified" if ok is True else "violated" if ok is False else "unknown"
    items = get("findings") or get("diagnostics") or get("violations") or []
    findings = []
    for f in items:
        fg = (lambda k, d=None, f=f: f.get(k, d)) if isinstance(f, dict) else \
            (lambda k, d=None, f=f: getattr(f, k, d))
        if status == "violated" and fg("status") not in (None, "violated"):
            continue  # a check that merely could not decide, next to one that found a violation
        span = fg("span")
        line = fg("line") or (getattr(span, "line", None) if span is not None and not isinstance(span, dict)
                              else (span or {}).get("line") if isinstance(span, dict) else None)
        cx = _text(fg("counterexample") or fg("notes"))
        rp = fg("replay")
        if rp is not None:
            cx = (cx + "; " if cx else "") + "replay: " + _text(getattr(rp, "summary", None) or rp)
        findings.append(Finding(str(fg("code") or fg("check") or "violation"), str(fg("message", "")), cx, line))
    return VerifyOutcome(status, tuple(findings), source)


def analysis_verifier():
    """`argus.analysis.verify` when the static verifier provides it, else None."""
    try:
        import argus.analysis as analysis
        fn = getattr(analysis, "verify", None)
        if fn is None:
            from importlib import import_module
            fn = getattr(import_module("argus.analysis.verify"), "verify", None)
    except (ImportError, AttributeError):
        return None
    return fn if callable(fn) else None


def verify(kernel_ir: ir.Kernel) -> VerifyOutcome:
    """The hook: static verification of a lowered kernel; `unknown` when no verifier is installed."""
    fn = analysis_verifier()
    t0 = time.perf_counter()
    if fn is None:
        return VerifyOutcome("unknown", (), "frontend", 0.0, ("argus.analysis.verify is not available",))
    try:
        out = adapt(fn(kernel_ir))
    except ArgusError as e:
        out = VerifyOutcome("violated", findings_from_diagnostics(e.diagnostics), "argus.analysis")
    except Exception as e:  # an analyzer crash must not stop the tuner: say unknown, with why
        out = VerifyOutcome("unknown", (), "argus.analysis", 0.0, (f"verifier error: {type(e).__name__}: {e}",))
    return VerifyOutcome(out.status, out.findings, out.source, time.perf_counter() - t0, out.notes)
