"""The Python API: `argus.load(path, **params)` and `@argus.kernel`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from argus.dsl import ast
from argus.dsl.diagnostics import error
from argus.dsl.embed import module_from_path, source_of_function
from argus.ir import nodes as ir
from argus.ir.build import build_kernel, select_kernel


class Kernel:
    """A parsed kernel with bound compile-time parameters."""

    def __init__(self, node: ast.Kernel, params: dict[str, object]):
        self.node = node
        self.params = dict(params)

    @property
    def name(self) -> str:
        return self.node.name

    def with_params(self, **params) -> Kernel:
        return Kernel(self.node, {**self.params, **params})

    def lower(self, **dims) -> ir.Kernel:
        """The IR after the pass pipeline (raises ArgusError on any error)."""
        return build_kernel(self.node, {**self.params, **dims})

    def check(self) -> ir.Kernel:
        return self.lower()

    def interpret(self, **arrays: np.ndarray) -> None:
        """Run in the NumPy interpreter over `arrays` (outputs written in place); dims come from shapes."""
        from argus.interp.machine import execute

        k = self.lower()
        dims: dict[str, int] = {}
        for t in k.tensors:
            if t.name not in arrays:
                raise error("argument", f"missing array for argument '{t.name}'", k.span)
            a = arrays[t.name]
            if a.ndim != len(t.dims):
                raise error("argument", f"argument {t.name}: expected {len(t.dims)} dimensions, got {a.ndim}",
                            k.span)
            for d, n in zip(t.dims, a.shape):
                if isinstance(d, int) and d != n or isinstance(d, str) and dims.setdefault(d, n) != n:
                    raise error("argument", f"argument {t.name}: dimension {d} is {dims.get(d, d)} elsewhere but "
                                f"{n} here", k.span)
        scalars = {s.name: arrays.get(s.name, s.default) for s in k.scalars}
        execute(k, {n: arrays[n] for n in (t.name for t in k.tensors)}, dims, scalars)

    def __call__(self, *args, **kwargs):
        names = [a.name for a in self.node.args]
        bound = dict(zip(names, args), **kwargs)
        if all(isinstance(v, np.ndarray) or np.isscalar(v) for v in bound.values()):
            return self.interpret(**bound)
        raise error("unsupported", "GPU launch is not available in this version; pass NumPy arrays to run the "
                    "interpreter", self.node.span)


def load(path: str | Path, kernel_name: str | None = None, **params) -> Kernel:
    return Kernel(select_kernel(module_from_path(path), kernel_name), params)


def kernel(fn=None, **params):
    """Decorator: `@argus.kernel` or `@argus.kernel(BM=64)` on a def whose body is Argus source."""
    def wrap(f):
        module, _ = source_of_function(f)
        return Kernel(select_kernel(module, f.__name__), params)
    return wrap(fn) if fn is not None else wrap
