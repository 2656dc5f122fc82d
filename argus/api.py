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
        return self.gpu()(*args, **kwargs)

    # ---- GPU (torch / cupy / DLPack arrays) ----
    def build(self, arch: str | None = None, want: str = "cubin"):
        """CUDA C++ generated from the IR and compiled with NVRTC (disk-cached): argus.codegen.compile.Built."""
        from argus.codegen.compile import build, target_arch

        key = (target_arch(arch), want)
        cache = self.__dict__.setdefault("_built", {})
        if key not in cache:
            cache[key] = build(self.lower(), arch=key[0], want=want)
        return cache[key]

    def gpu(self, device: int = 0):
        """The kernel loaded on CUDA device `device` (compiled for its architecture on first use);
        call it with arrays to launch, or use `.prepare(...)` for a reusable launch."""
        from argus.codegen.nvrtc import detect_arch
        from argus.runtime.launch import GpuKernel

        loaded = self.__dict__.setdefault("_gpu", {})
        if device not in loaded:
            loaded[device] = GpuKernel(self.build(detect_arch(device)), device)
        return loaded[device]


def load(path: str | Path, kernel_name: str | None = None, **params) -> Kernel:
    return Kernel(select_kernel(module_from_path(path), kernel_name), params)


def kernel(fn=None, **params):
    """Decorator: `@argus.kernel` or `@argus.kernel(BM=64)` on a def whose body is Argus source."""
    def wrap(f):
        module, _ = source_of_function(f)
        return Kernel(select_kernel(module, f.__name__), params)
    return wrap(fn) if fn is not None else wrap
