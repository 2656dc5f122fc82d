"""Argus: a tile-level GPU kernel language whose compiler proves data-flow invariants.

    k = argus.load("examples/gemm.arg", BM=64)      # or @argus.kernel on a def in a .py file
    k.lower(M=256, N=256, K=128)                   # front end + lowering -> the IR (raises ArgusError)
    k.verify(M=256, N=256, K=128)                  # the Z3 verifier's report, as `argus check` gives it
    k(A, B, C)                                     # NumPy: the interpreter, in place; torch/cupy: the GPU
    argus.torch.op(k)                              # a torch.library operator (needs torch)
"""

from __future__ import annotations

__all__ = ["ArgusError", "Kernel", "kernel", "load"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy: `argus check` must not pay for NumPy and the interpreter at start-up, and torch stays optional.
    if name in ("Kernel", "kernel", "load"):
        from argus import api
        return getattr(api, name)
    if name == "ArgusError":
        from argus.dsl.diagnostics import ArgusError
        return ArgusError
    if name == "torch":
        import importlib

        return importlib.import_module("argus.torch")
    raise AttributeError(f"module 'argus' has no attribute {name!r}")
