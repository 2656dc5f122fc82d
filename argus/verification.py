"""`Kernel.verify()` and `argus check`: one path from a kernel's AST to the verifier's verdict.

Both go through `verify_kernel`, so the API's typed result and the command's JSON are the same data:
`Verification.to_json()` is what `argus check --format json` prints for that kernel. Both get the same
bounds too: dims must be integers in [1, 2**31 - 1], a loop whose trip count the fixed dims make longer
than the verifier walks step by step (MAX_VERIFY_STEPS) is not attempted, and symbolic terms too deep
for Python's stack give unknown -- each an "unknown" verdict with a note, never a hang or a crash.
(`argus check` also runs all of it in a child process under --time-limit / --memory-limit.)
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

from argus.analysis import Report
from argus.analysis import verify as analysis_verify
from argus.analysis.findings import CHECKS, UNKNOWN, VIOLATED, CheckResult, Finding
from argus.dsl import ast
from argus.dsl.diagnostics import ArgusError
from argus.interp.budget import MAX_VERIFY_STEPS, check_dims, loop_steps
from argus.ir import nodes as ir
from argus.ir.build import build_kernel
from argus.records import check_record


@dataclass(frozen=True)
class Verification:
    """The verifier's `Report` on one kernel (argus.analysis.findings: verdict per check, findings with
    counterexamples and replays, timings), with the file as named and the seconds from source to verdict.

    `status` is "verified", "violated" or "unknown" (never verified when anything is unknown).
    """

    report: Report
    file: str
    seconds: float
    ir: ir.Kernel | None = field(default=None, compare=False, repr=False)  # the lowered program verified

    @property
    def kernel(self) -> str:
        return self.report.kernel

    @property
    def status(self) -> str:
        return self.report.status

    @property
    def results(self) -> list[CheckResult]:
        return self.report.results

    @property
    def findings(self) -> list[Finding]:
        return self.report.findings

    @property
    def notes(self) -> list[str]:
        return self.report.notes

    def to_json(self) -> dict:
        """Exactly the record `argus check --format json` prints for this kernel (docs/json.md)."""
        return check_record(self.report, self.file, self.seconds)

    def render(self, timings: bool = False) -> str:
        """The human report `argus check` prints (findings with source lines, then the summary)."""
        from argus.analysis.render import render_report

        return render_report(self.report, timings)

    def __str__(self) -> str:
        return self.render()


def verify_kernel(node: ast.Kernel, defines: dict[str, object] | None = None, *, file: str | None = None,
                  replay: bool = True, test: bool = True) -> Verification:
    """Lower `node` with `defines` (params and dims), then prove every check with argus.analysis.verify;
    violations are replayed in the interpreter unless `replay` is False. Front-end errors, dims that are
    not integers in [1, 2**31 - 1] and constructs the code generator refuses raise ArgusError; work the
    verifier cannot take on (see `not_attempted`, or a RecursionError in it) is an "unknown" verdict whose
    note says why."""
    defines = dict(defines or {})
    path = file if file is not None else node.span.path
    t0 = time.perf_counter()
    k = build_kernel(node, defines)
    check_dims(k, defines)
    refusal = build_refusal(k)
    note = not_attempted(k, defines)
    report = None
    if note is None:
        try:
            report = analysis_verify(k, defines, do_replay=replay, test=test)
        except (RecursionError, ctypes.ArgumentError) as exc:
            # deep symbolic terms (long fixed loops, a long chain of selects): unknown, not a crash; z3's
            # C bindings report a RecursionError met while converting an argument as an ArgumentError
            if isinstance(exc, ctypes.ArgumentError) and "RecursionError" not in str(exc):
                raise
            note = ("not completed: the verifier's symbolic terms grew too deep (RecursionError); try smaller "
                    "fixed dims or leave them symbolic")
    if refusal is not None:
        # a program the code generator refuses is never accepted; a violation the verifier found says more
        # about it (a counterexample, a replay) than the refusal, so that is what `check` reports then
        if report is None or report.status != VIOLATED:
            raise refusal
        d = refusal.diagnostics[0]
        report.notes.append(f"does not build either: {d.message} (line {d.span.line})" if d.span
                            else f"does not build either: {d.message}")
    if report is None:
        report = unknown_report(k, path, note or "not attempted")
    return Verification(report, path, time.perf_counter() - t0, k)


def buildable(k: ir.Kernel) -> None:
    """A program `check` accepts also builds: emit its CUDA (no compile; milliseconds) and let a construct
    the code generator refuses stop `check` at its line, with the generator's reason."""
    from argus.codegen.emit import generate

    generate(k)


def build_refusal(k: ir.Kernel) -> ArgusError | None:
    try:
        buildable(k)
    except ArgusError as exc:
        return exc
    return None


def not_attempted(k: ir.Kernel, defines: dict[str, object]) -> str | None:
    """Why the verifier is not run on `k` at `defines`, or None: a loop whose trip count the fixed dims
    and params make longer than MAX_VERIFY_STEPS (the verifier walks such a loop step by step)."""
    fixed_dims = {d: int(v) for d, v in defines.items() if d in k.dims}
    steps, where = loop_steps(k, fixed_dims)
    if steps <= MAX_VERIFY_STEPS:
        return None
    fixed = ", ".join(f"{d}={defines[d]}" for d in k.dims if d in defines)
    line = f" at line {where.line}" if where else ""
    if fixed:
        return (f"not attempted: the loop{line} runs {steps} steps at {fixed}, and the verifier walks a loop whose "
                f"trip count -D fixes step by step (at most {MAX_VERIFY_STEPS}); leave the dims symbolic (no -D "
                "for them) and it covers every size up to 65536 at once")
    return (f"not attempted: the loop{line} has a fixed trip count of {steps} steps, and the verifier walks "
            f"such a loop step by step (at most {MAX_VERIFY_STEPS})")


def unknown_report(k: ir.Kernel, path: str, note: str) -> Report:
    """A verdict of unknown on every check (none was run), with `note` saying why."""
    return Report(k.name, path, [CheckResult(code, UNKNOWN, 0.0) for code in CHECKS], [note])
