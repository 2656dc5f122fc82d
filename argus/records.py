"""The JSON records `argus check / build / run / tune --format json` print (tune: its record.jsonl lines).

docs/json.md documents every key; tests/test_records.py checks that what the commands emit has exactly
the documented keys. SCHEMA_VERSION is in every record: it changes when a key is removed, renamed or
changes meaning (a new key does not change it), so a consumer can refuse a version it does not know.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SCHEMA_VERSION = 1


def record(**fields: Any) -> dict[str, Any]:
    """A top-level record: `schema_version` first, then the fields in order."""
    return {"schema_version": SCHEMA_VERSION, **fields}


def check_record(report: Any, file: str, seconds: float) -> dict[str, Any]:
    """One verified kernel (argus.analysis Report): the verifier's JSON plus the file as the user named
    it, the front end's diagnostics (none: it got this far) and the seconds from source to verdict."""
    j = report.to_json()
    j.update({"file": file, "diagnostics": [], "seconds": round(seconds, 4)})
    return record(**j)


def lowered_record(file: str, kernel: str, seconds: float) -> dict[str, Any]:
    """`argus check --no-verify`: the front end and lowering passed."""
    return record(file=file, kernel=kernel, status="ok", diagnostics=[], seconds=round(seconds, 4))


def layer_record(file: str, layer: str, outputs: Iterable[str], seconds: float) -> dict[str, Any]:
    return record(file=file, layer=layer, status="ok", outputs=list(outputs), diagnostics=[],
                  seconds=round(seconds, 4))


def file_record(file: str, status: str, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """A file of several kernels (and layers): one record per item, in file order."""
    return record(file=file, status=status, kernels=kernels)


def error_record(file: str, diagnostics: Iterable[Any], status: str = "error") -> dict[str, Any]:
    """Any command whose input has errors (diagnostics: argus.dsl.diagnostics.Diagnostic); also a command
    stopped by its time or memory limit (status "unknown" for `argus check`, which then has no verdict)."""
    return record(file=file, status=status, diagnostics=[d.to_json() for d in diagnostics])


def output_record(c: Any) -> dict[str, Any]:
    """One output's comparison with the reference (argus.interp.run.OutputCheck)."""
    return {"name": c.name, "ok": c.ok, "rel_error": c.rel_error, "max_abs_error": c.max_abs_error,
            "tolerance": c.tolerance, "wrong_elements": c.bad, "nonfinite": c.nonfinite,
            "first_wrong": None if c.first_bad is None else
            {"index": list(c.first_bad[0]), "value": c.first_bad[1], "reference": c.first_bad[2]}}


def run_record(file: str, kernel: str, target: str, ok: bool, dims: dict[str, int], seconds: float | None,
               checks: Iterable[Any], arch: str | None = None, timing: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """`argus run`: where it ran (interp / gpu), at which dims, each output's comparison; with --bench a
    `timing` object (else null)."""
    return record(file=file, kernel=kernel, target=target, arch=arch, dims=dict(dims), ok=ok,
                  seconds=None if seconds is None else round(seconds, 4),
                  outputs=[output_record(c) for c in checks], timing=timing)
