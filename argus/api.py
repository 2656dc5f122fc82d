"""The Python API: `argus.load(path, **params)`, `@argus.kernel`, and what a `Kernel` does.

    k = argus.load("examples/gemm.arg", BM=64)   # or @argus.kernel on a def in a .py file
    ir = k.lower(M=256, N=256, K=128)           # front end + lowering (raises ArgusError, located)
    v = k.verify(M=256, N=256, K=128)           # the Z3 verifier: v.status, v.findings, v.to_json()
    k(A, B, C)                                  # NumPy arrays: the interpreter, in place;
                                                # torch / cupy CUDA arrays: compiled and launched, with
                                                # the params of the `specialize` the shapes select
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from argus.dsl import ast
from argus.dsl.embed import function_text
from argus.dsl.parser import parse
from argus.ir import nodes as ir
from argus.ir.build import build_kernel, select_kernel
from argus.layers import Layer

if TYPE_CHECKING:
    from argus.codegen.compile import Built
    from argus.runtime.launch import GpuKernel
    from argus.verification import Verification


class Kernel:
    """A parsed kernel with bound compile-time parameters (`params`); dims are bound per call."""

    def __init__(self, node: ast.Kernel, params: dict[str, object], text: str | None = None):
        self.node = node
        self.params = dict(params)
        self.text = text  # its Argus source text (for `argus tune`), when known

    @property
    def name(self) -> str:
        return self.node.name

    def __repr__(self) -> str:
        s = self.node.span
        params = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"<argus.Kernel {self.name} at {s.path}:{s.line}{params}>"

    def with_params(self, **params) -> Kernel:
        return Kernel(self.node, {**self.params, **params}, self.text)

    def lower(self, **dims) -> ir.Kernel:
        """Front end and lowering: parse-time checks, semantic checks, lowering to the IR and the pass
        pipeline (pipelines expanded, layouts assigned), with `dims` (and params) bound. Returns the IR;
        proves nothing (that is `verify`). Raises ArgusError, whose str() is the located diagnostic."""
        return build_kernel(self.node, {**self.params, **dims})

    def check(self, **dims) -> ir.Kernel:
        """Deprecated name of `lower` (it lowers; it does not run the verifier: use `verify`)."""
        warnings.warn("Kernel.check() lowers the kernel and proves nothing: call lower() for the IR or "
                      "verify() for the verifier's report", DeprecationWarning, stacklevel=2)
        return self.lower(**dims)

    def verify(self, *, replay: bool = True, test: bool = True, **dims) -> Verification:
        """Prove the kernel's invariants and hazard checks with Z3 (argus.analysis.verify), as `argus check`
        does, with `dims` fixed (unfixed dims range over 1..65536). Returns a Verification: `status`
        ("verified" | "violated" | "unknown"), `results` (per check: status and seconds), `findings`
        (with counterexamples and their interpreter replay, unless `replay=False`), `report` (the
        argus.analysis Report, whose `tested` holds the numeric tier unless `test=False`), and `to_json()`
        -- the record `argus check --format json` prints."""
        from argus.verification import verify_kernel

        return verify_kernel(self.node, {**self.params, **dims}, file=self.node.span.path, replay=replay, test=test)

    def interpret(self, *, convert: bool = False, **arrays: Any) -> None:
        """Run in the NumPy interpreter over `arrays` (outputs written in place); dims come from shapes.

        Arrays must have the interpreter's dtype (float32 for bf16/f16/f32 and fp8, float16 also for f16,
        else the declared type) and be C-contiguous; `convert=True` runs on converted copies instead
        (rounded to the declared type) and copies the outputs back."""
        from argus.interp.machine import execute
        from argus.runtime.arguments import bind_arguments, validate_host

        k = self._lowered()
        call = validate_host(k, bind_arguments(k, (), arrays), convert)
        execute(k, call.arrays, call.dims, call.scalars)
        call.finish()

    def __call__(self, *args: Any, convert: bool = False, stream: Any = None, **kwargs: Any) -> None:
        """NumPy arrays run in the interpreter (`convert` as in `interpret`); CUDA arrays (torch, cupy,
        DLPack) run on the GPU, on `stream` (default: the arrays' framework's current stream)."""
        names = [a.name for a in self.node.args]
        bound = dict(zip(names, args), **kwargs)
        if any(isinstance(v, np.ndarray) for v in bound.values()):
            return self.interpret(convert=convert, **bound)
        if convert:
            raise TypeError("convert=True applies to NumPy arrays (the interpreter); GPU arrays are never converted")
        target, device = self._target(args, kwargs)
        if isinstance(target, Layer):  # routed to an executable layer of the file
            return target(*args, stream=stream, **kwargs)
        return target.gpu(device)(*args, stream=stream, **kwargs)

    def _target(self, args: tuple, kwargs: dict) -> tuple[Kernel | Layer, int]:
        """What a GPU launch on these arrays runs: the specialization or route their dims and layouts pick
        (a route may take a transposed view); this kernel's own checks (layout, assumes) apply to the rest,
        before any compile."""
        from argus.runtime.arguments import fast_bind, layout_key

        k = self._lowered()
        fast = fast_bind(k, args, kwargs)
        key = layout_key(k, fast) if fast is not None else None
        targets = self.__dict__.setdefault("_targets", {})  # layout -> target: the checks passed once for it
        if key is not None and key in targets:
            return targets[key]
        found = self._target_checked(k, args, kwargs)
        if key is not None:
            if len(targets) >= 64:
                targets.pop(next(iter(targets)))
            targets[key] = found
        return found

    def _target_checked(self, k: ir.Kernel, args: tuple, kwargs: dict) -> tuple[Kernel | Layer, int]:
        from argus.runtime.arguments import bind_arguments, launch_facts, validate
        from argus.runtime.arrays import ArgumentError

        bound = bind_arguments(k, args, kwargs)
        try:
            facts = launch_facts(k, bound)
        except ArgumentError:  # not a launch any route takes: this kernel's own checks say why
            validate(k, bound)
            raise
        target = self.specialized(facts)
        if isinstance(target, Layer):
            return target, -1
        _, _, device = validate(k, bound)
        return target, device

    def prepare(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        """A reusable launch on CUDA arrays (argus.runtime.launch.Launch, or a routed layer's sequence of
        launches): what `k(*args)` runs, prepared once (arguments checked, tensor maps built)."""
        target, device = self._target(args, kwargs)
        if isinstance(target, Layer):
            return target.prepare(*args, stream=stream, **kwargs)
        return target.gpu(device).prepare(*args, stream=stream, **kwargs)

    def specialized(self, dims: dict[str, int]) -> Kernel | Layer:
        """This kernel with the params of the `specialize` statement the dims select (argus/specialize.py),
        or itself when none applies; each specialized kernel is built once."""
        from argus.specialize import pick, route

        sp = pick(self.node, self.params, dims)
        if sp is None:
            return self
        key = (sp.kernel, *sorted(sp.params.items()))
        cache = self.__dict__.setdefault("_specialized", {})
        if key not in cache:
            if sp.kernel is None:
                cache[key] = self.with_params(**sp.params)
            else:  # routed to another kernel or a layer of the same file (same arguments and reference, checked)
                from argus.layers import plan_layer
                from argus.sources import load_source

                sf = load_source(self.node.span.path)
                kernels = [k.node for k in sf.kernels]
                target = route(self.node, sp, kernels, sf.layers)
                if isinstance(target, ast.Layer):
                    cache[key] = Layer(plan_layer(target, kernels), sp.params, self.text)
                else:
                    cache[key] = Kernel(target, sp.params, self.text)
        return cache[key]

    def _lowered(self) -> ir.Kernel:
        """The IR with only the params bound (dims come from each call's arrays), lowered once."""
        if "_ir" not in self.__dict__:
            self.__dict__["_ir"] = self.lower()
        return self.__dict__["_ir"]

    # ---- GPU (torch / cupy / DLPack arrays) ----
    def build(self, arch: str | None = None, want: str = "cubin") -> Built:
        """CUDA C++ generated from the IR and compiled with NVRTC (disk-cached): argus.codegen.compile.Built."""
        from argus.codegen.compile import build, target_arch

        key = (target_arch(arch), want)
        cache = self.__dict__.setdefault("_built", {})
        if key not in cache:
            cache[key] = build(self._lowered(), arch=key[0], want=want)
        return cache[key]

    def gpu(self, device: int = 0) -> GpuKernel:
        """The kernel loaded on CUDA device `device` (compiled for its architecture on first use);
        call it with arrays to launch, or use `.prepare(...)` for a reusable launch."""
        from argus.codegen.nvrtc import detect_arch
        from argus.runtime.launch import GpuKernel

        loaded = self.__dict__.setdefault("_gpu", {})
        if device not in loaded:
            loaded[device] = GpuKernel(self.build(detect_arch(device)), device)
        return loaded[device]


def load(path: str | Path, kernel_name: str | None = None, **params) -> Kernel | Layer:
    """The kernel `kernel_name` (default: the first) of an Argus file (.arg) or of a Python file (.py,
    imported) holding @argus.kernel definitions, with `params` bound on top of the file's own; a name of
    an executable layer (argus/layers.py) gives that layer."""
    from argus.layers import plan_layer
    from argus.sources import load_source

    sf = load_source(path)
    layer = next((g for g in sf.layers if g.name == kernel_name), None)
    if layer is not None:
        plan = plan_layer(layer, [k.node for k in sf.kernels])
        if plan.executable:
            return Layer(plan, params, sf.kernels[0].text if sf.kernels else None)
    src = sf.select(kernel_name)
    return Kernel(src.node, src.defines(params), src.text)


def kernel(fn=None, **params):
    """Decorator: `@argus.kernel` or `@argus.kernel(BM=64)` on a def whose body is Argus source."""
    def wrap(f):
        text, path = function_text(f)
        return Kernel(select_kernel(parse(text, path, register=False), f.__name__), params, text)
    return wrap(fn) if fn is not None else wrap
