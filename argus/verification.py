"""`Kernel.verify()` and `argus check`: one path from a kernel's AST to the verifier's verdict.

Both go through `verify_kernel`, so the API's typed result and the command's JSON are the same data:
`Verification.to_json()` is what `argus check --format json` prints for that kernel.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from argus.analysis import Report
from argus.analysis import verify as analysis_verify
from argus.analysis.findings import CheckResult, Finding
from argus.dsl import ast
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
                  replay: bool = True) -> Verification:
    """Lower `node` with `defines` (params and dims), then prove every check with argus.analysis.verify;
    violations are replayed in the interpreter unless `replay` is False. Front-end errors raise ArgusError."""
    defines = dict(defines or {})
    t0 = time.perf_counter()
    k = build_kernel(node, defines)
    report = analysis_verify(k, defines) if replay else analysis_verify(k, defines, do_replay=False)
    return Verification(report, file if file is not None else node.span.path, time.perf_counter() - t0, k)
