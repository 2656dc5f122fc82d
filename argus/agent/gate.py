"""The gate a candidate passes before it is evaluated: build, interface, verifier, small-shape replay.

1. Build: parse, check and lower (with the candidate's params). Errors are violations carrying the
   compiler's diagnostics.
2. Interface: the candidate must keep the starting kernel's arguments, outputs and `reference:`
   block — a planner cannot win by changing what "correct" means — and may not read a tensor the
   starting kernel only writes (its contents are whatever an earlier run left there: a kernel that
   reads its own stale output can skip work whenever it is run twice, as a benchmark does).
3. Verifier: `argus.analysis.verify` when installed (in a child process with a time and memory limit).
4. Interpreter at the planner-visible small shapes, in a child process with a time and memory limit
   like the referee's: a wrong or faulting run is a violation with the run's counterexample (the
   referee later tests unseen shapes as well); a run past a limit is a violation saying so.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache

from argus.agent.isolate import run_isolated, start_isolated
from argus.agent.program import Candidate
from argus.agent.verify import Finding, VerifyOutcome, adapt, analysis_verifier, findings_from_diagnostics
from argus.dsl.diagnostics import ArgusError
from argus.ir import nodes as ir
from argus.ir.build import build_source
from argus.limits import DEFAULT_MEMORY


@dataclass(frozen=True)
class Interface:
    tensors: tuple[tuple[str, str, tuple], ...]
    scalars: tuple[str, ...]
    outputs: tuple[str, ...]
    reference: str
    reads: tuple[str, ...] = ()  # tensors the kernel reads

    def differences(self, other: Interface) -> list[str]:
        out = []
        if self.tensors != other.tensors or self.scalars != other.scalars:
            out.append("the kernel's arguments changed")
        if self.outputs != other.outputs:
            out.append(f"the outputs changed ({', '.join(self.outputs)} -> {', '.join(other.outputs)})")
        if self.reference != other.reference:
            out.append("the reference: block changed")
        stale = [t for t in other.reads if t in self.outputs and t not in self.reads]
        if stale:
            out.append(f"the kernel reads {', '.join(stale)}, which the starting kernel only writes: its contents "
                       "are what an earlier run left there, and a result may not depend on them")
        return out


def reference_text(source: str) -> str:
    m = re.search(r"^reference:[ \t]*\n((?:[ \t]+.*\n?|[ \t]*\n)*)", source, re.M)
    return "\n".join(ln.strip() for ln in (m.group(1) if m else "").splitlines() if ln.strip())


def interface_of(k: ir.Kernel, source: str) -> Interface:
    return Interface(tuple((t.name, str(t.dtype), tuple(t.dims)) for t in k.tensors),
                     tuple(s.name for s in k.scalars), tuple(k.outputs), reference_text(source), tuple(k.inputs))


@lru_cache(maxsize=256)
def build_cached(source: str, params: tuple[tuple[str, object], ...], kernel: str | None) -> ir.Kernel:
    """Parse + check + lower once per program: the IR is immutable, and a forked referee child inherits
    this cache, so the candidate is not re-parsed there."""
    return build_source(source, dict(params), kernel, path="<candidate>")


def build(c: Candidate) -> ir.Kernel:
    return build_cached(c.source, c.params, c.kernel)


def _analysis_child(source: str, defines: dict, kernel: str | None):
    from argus.interp.budget import MAX_VERIFY_STEPS, loop_steps

    fn = analysis_verifier()
    k = build_cached(source, tuple(sorted(defines.items())), kernel)
    steps, where = loop_steps(k, {})
    if steps > MAX_VERIFY_STEPS:  # the symbolic executor would walk every step: not attempted
        line = f" at line {where.line}" if where else ""
        return {"status": "unknown", "findings": [{"code": "not-attempted", "status": "unknown",
                "message": f"the loop{line} has a fixed trip count of {steps} steps; the verifier walks such "
                f"loops step by step (at most {MAX_VERIFY_STEPS})"}]}
    return adapt(fn(k)).to_json()


def _interp_counterexample(source: str, params: tuple, kernel: str | None, shapes: list[dict[str, int]],
                           seed: int, inputs=None) -> tuple[Finding, ...]:
    """Runs in the gate's child: the candidate in the interpreter at the planner-visible shapes, on
    inputs from the run's provider (argus.agent.problem)."""
    import numpy as np

    from argus.agent.problem import DenseInputs
    from argus.interp.machine import InterpError
    from argus.interp.run import run_interp

    inputs = inputs or DenseInputs()
    k = build_cached(source, params, kernel)
    for i, shape in enumerate(shapes):
        label = " ".join(f"{d}={v}" for d, v in shape.items())
        try:
            dims, arrays = inputs.arrays(k, shape, np.random.default_rng([seed, i]))
            res = run_interp(k, dims, seed=seed, arrays=arrays)
        except InterpError as e:
            return findings_from_diagnostics(e.diagnostics, {"dims": label, **e.details})
        except ArgusError as e:
            return findings_from_diagnostics(e.diagnostics, {"dims": label})
        for c in res.checks:
            if not c.ok:
                cx = f"{label}: {c.describe()}"
                if c.nonfinite:
                    cx += f"; {c.nonfinite} element(s) left unwritten (poison NaN)"
                return (Finding("wrong-result", f"output {c.name} differs from the reference", cx),)
    return ()


def interp_check(c: Candidate, shapes: list[dict[str, int]], seed: int, timeout_s: float,
                 memory_bytes: int | None, inputs=None) -> tuple[Finding, ...]:
    """`_interp_counterexample` in a child process with a time and memory limit."""
    return interp_findings(run_isolated(_interp_counterexample, c.source, c.params, c.kernel, shapes, seed, inputs,
                                        timeout_s=timeout_s, memory_bytes=memory_bytes))


def interp_findings(r) -> tuple[Finding, ...]:
    """What an interpreter child's result says: its findings, or a limit / error finding."""
    if r.status == "ok":
        return r.value
    what = {"timeout": "did not finish within its time limit", "memory": r.describe(),
            "fault": r.describe()}.get(r.status, r.error.splitlines()[0] if r.error else "failed")
    return (Finding("limit" if r.status in ("timeout", "memory") else "interp-error",
                    f"the interpreter run at the check shapes {what}",
                    "make the program smaller or cheaper at those shapes"),)


def check(c: Candidate, start: Interface | None, shapes: list[dict[str, int]], *, seed: int = 0,
          verifier: str = "auto", analysis_timeout_s: float = 30.0, interp_timeout_s: float = 120.0,
          memory_bytes: int | None = DEFAULT_MEMORY, inputs=None) -> tuple[VerifyOutcome, ir.Kernel | None]:
    """Gate one candidate. verifier: "auto" (the static verifier when installed, then the interpreter),
    "analysis" (require it), "interp" (front end + interpreter only)."""
    t0 = time.perf_counter()
    try:
        k = build(c)
    except ArgusError as e:
        return VerifyOutcome("violated", findings_from_diagnostics(e.diagnostics), "frontend",
                             time.perf_counter() - t0), None
    if start is not None:
        diffs = start.differences(interface_of(k, c.source))
        if diffs:
            return VerifyOutcome("violated", tuple(Finding("interface", d) for d in diffs), "frontend",
                                 time.perf_counter() - t0), k
    source = "frontend+interp"
    status, findings, notes = "unknown", (), ()
    # the interpreter's child runs beside the verifier's (each is its own process): a step costs the
    # slower of the two, not their sum; a violated verdict still wins over whatever the interpreter says
    interp = start_isolated(_interp_counterexample, c.source, c.params, c.kernel, shapes, seed, inputs,
                            timeout_s=interp_timeout_s, memory_bytes=memory_bytes)
    try:
        if verifier in ("auto", "analysis") and analysis_verifier() is not None:
            r = run_isolated(_analysis_child, c.source, c.defines, c.kernel, timeout_s=analysis_timeout_s,
                             memory_bytes=memory_bytes)
            if r.status == "ok":
                out = adapt(r.value)
                # adapt() on a to_json() dict keeps status and findings; only violated findings matter here.
                status = out.status
                findings = tuple(f for f in out.findings if status != "verified")
                if status == "unknown":
                    notes = tuple(f"{f.code}: {f.message}" for f in out.findings[:3])
                    findings = ()
            else:
                notes = (f"static verifier: {r.describe().splitlines()[0]}",)
            source = "argus.analysis+interp"
            if status == "violated":
                return VerifyOutcome("violated", findings, "argus.analysis", time.perf_counter() - t0, notes), k
        elif verifier == "analysis":
            return VerifyOutcome("unknown", (), "frontend", time.perf_counter() - t0,
                                 ("argus.analysis.verify is not installed",)), k
        bad = interp_findings(interp.wait())
    finally:
        interp.cancel()  # an early verdict leaves the interpreter's child unwanted
    if bad:
        return VerifyOutcome("violated", bad, "interp", time.perf_counter() - t0, notes), k
    label = "; ".join(" ".join(f"{d}={v}" for d, v in s.items()) for s in shapes)
    notes = notes + (f"interpreter matched the reference at {label}",)
    return VerifyOutcome(status, findings, source, time.perf_counter() - t0, notes), k
