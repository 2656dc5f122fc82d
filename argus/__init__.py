"""Argus: a tile-level GPU kernel language whose compiler proves data-flow invariants.

    k = argus.load("examples/gemm.arg", BM=64)      # or @argus.kernel on an inline definition
    k.check()                                      # parse + semantic checks (raises ArgusError)
    k.interpret(A=a, B=b, C=c)                     # run in the NumPy interpreter, in place
"""

from __future__ import annotations

__all__ = ["ArgusError", "Kernel", "kernel", "load"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy: `argus check` must not pay for NumPy and the interpreter at start-up.
    if name in ("Kernel", "kernel", "load"):
        from argus import api
        return getattr(api, name)
    if name == "ArgusError":
        from argus.dsl.diagnostics import ArgusError
        return ArgusError
    raise AttributeError(f"module 'argus' has no attribute {name!r}")
