"""The code generator's one error: a construct it cannot emit yet, reported at its `.arg` span."""

from __future__ import annotations

from argus.dsl.diagnostics import ArgusError, Span, error


def unsupported(what: str, span: Span | None, *notes: str) -> ArgusError:
    return error("codegen", f"the CUDA code generator does not support {what} yet", span, *notes)
