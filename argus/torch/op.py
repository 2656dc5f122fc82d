"""`argus.torch.op(kernel)`: an Argus kernel registered as a `torch.library` custom operator.

The operator is functional, as torch ops are: its arguments are the kernel's tensors that are not pure
outputs (in declaration order) and then its scalars (with their declared defaults); it returns the
kernel's outputs (one tensor, or a tuple in declaration order), allocated from the signature -- the
shape from the dims the inputs bind (or `dims=` given at registration), the declared dtype, the inputs'
device. A tensor the kernel both reads and writes is an argument, and its result is a written copy.

- CUDA tensors: compiled with NVRTC for the device (cached) and launched on
  `torch.cuda.current_stream()`, so it orders with the caller's work on that stream.
- CPU tensors: run in the NumPy interpreter (slow; for tests and small shapes).
- Fake tensors (torch.compile, meta): a fake implementation checks the same things and returns empty
  outputs of the right shape, dtype and device, so the operator traces without a graph break.

Arguments are checked before anything runs (dtype, rank, the sizes of arguments sharing a dim, one device),
with an ArgumentError naming the argument and its declared type. Non-contiguous inputs are made contiguous
(the op owns its layout, as torch ops do). There is no autograd formula: forward only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from argus.api import Kernel, load
from argus.dsl.diagnostics import error
from argus.ir import nodes as ir
from argus.runtime.arrays import ArgumentError, ShapeBindings, bind_shape, declared_type
from argus.runtime.bench import torch_dtype

_SCHEMA_TYPES = {"float": "float", "int": "int", "uint": "int", "bool": "bool"}


@dataclass(frozen=True)
class OpSignature:
    """How a kernel's signature maps onto an operator's."""

    inputs: tuple[ir.TensorDecl, ...]
    outputs: tuple[ir.TensorDecl, ...]
    scalars: tuple[ir.ScalarDecl, ...]
    dims: dict[str, int] = field(default_factory=dict)  # dims no input binds, fixed at registration

    def schema(self) -> str:
        args = [f"Tensor {t.name}" for t in self.inputs]
        for s in self.scalars:
            typ = _SCHEMA_TYPES[s.dtype.kind]
            default = "" if s.default is None else f"={_literal(s.default, typ)}"
            args.append(f"{typ} {s.name}{default}")
        ret = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join("Tensor" for _ in self.outputs) + ")"
        return f"({', '.join(args)}) -> {ret}"


def _literal(v: float | int | bool, typ: str) -> str:
    if typ == "bool":
        return "True" if v else "False"
    return repr(float(v)) if typ == "float" else str(int(v))


def signature_of(k: ir.Kernel, dims: dict[str, int] | None = None) -> OpSignature:
    """The operator signature of a lowered kernel; every output dim must be bound by an input or `dims`."""
    dims = dict(dims or {})
    outputs = tuple(t for t in k.tensors if t.name in k.outputs)
    inputs = tuple(t for t in k.tensors if t.name not in k.outputs or t.name in k.inputs)
    if not inputs:
        raise error("torch-op", f"kernel '{k.name}' reads no tensor: an operator takes the device from its "
                    "inputs", k.span)
    bound = {d for t in inputs for d in t.dims if isinstance(d, str)} | set(dims)
    for t in outputs:
        free = [d for d in t.dims if isinstance(d, str) and d not in bound]
        if free:
            raise error("torch-op", f"output {t.name}'s dimension {free[0]} is not the size of any input", t.span,
                        f"fix it at registration: argus.torch.op(kernel, dims={{'{free[0]}': ...}})")
    return OpSignature(inputs, outputs, k.scalars, dims)


_REGISTERED: dict[str, TorchOp] = {}


@dataclass(frozen=True, eq=False)
class TorchOp:
    """A registered operator: call it like a function (or as torch.ops.NAMESPACE.NAME)."""

    kernel: Kernel
    qualname: str
    signature: OpSignature
    ir: ir.Kernel = field(repr=False)
    _def: Any = field(repr=False, default=None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._def(*args, **kwargs)

    @property
    def schema(self) -> str:
        return self.signature.schema()

    # ---- shared by the real and the fake implementation ----
    def _split(self, args: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
        sig = self.signature
        names = [t.name for t in sig.inputs] + [s.name for s in sig.scalars]
        bound = dict(zip(names, args))
        tensors = {t.name: bound[t.name] for t in sig.inputs}
        scalars = {s.name: bound.get(s.name, s.default) for s in sig.scalars}
        return tensors, scalars

    def _check(self, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Any], torch.device]:
        """Dims bound from the inputs (SymInts under dynamic shapes), and their one device."""
        dims: dict[str, Any] = ShapeBindings(self.signature.dims)  # remembers which argument bound a dim
        first: tuple[str, torch.device] | None = None
        for t in self.signature.inputs:
            x = tensors[t.name]
            want = torch_dtype(t.dtype.name)
            expect = f"{declared_type(t.dtype.name, t.dims)} ({want})"
            got = f"{x.dtype}[{', '.join(str(n) for n in x.shape)}] on {x.device}"

            def fail(why: str = "", _t: ir.TensorDecl = t, _e: str = expect, _g: str = got) -> ArgumentError:
                return ArgumentError(f"argument {_t.name}: expected {_e}, got {_g}{why}", _t.span)

            if not isinstance(x, torch.Tensor):
                raise ArgumentError(f"argument {t.name}: expected a tensor {expect}, got {type(x).__name__}", t.span)
            if x.dtype != want:
                raise fail()
            bind_shape(t.name, tuple(x.shape), t.dims, dims, fail)
            if first is None:
                first = (t.name, x.device)
            elif x.device != first[1]:
                raise fail(f" (argument {first[0]} is on {first[1]})")
        assert first is not None  # signature_of requires an input
        return dict(dims), first[1]

    def _shape(self, t: ir.TensorDecl, dims: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(d if isinstance(d, int) else dims[d] for d in t.dims)

    def _fake(self, *args: Any) -> Any:
        tensors, _ = self._split(args)
        dims, _ = self._check(tensors)
        ref = tensors[self.signature.inputs[0].name]
        outs = [ref.new_empty(self._shape(t, dims), dtype=torch_dtype(t.dtype.name)) for t in self.signature.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, *args: Any) -> Any:
        tensors, scalars = self._split(args)
        dims, device = self._check(tensors)
        outs: dict[str, torch.Tensor] = {}
        for t in self.signature.outputs:
            if t.name in tensors:  # read and written: the result is a written copy
                outs[t.name] = tensors[t.name].clone(memory_format=torch.contiguous_format)
            else:
                outs[t.name] = torch.empty(self._shape(t, dims), dtype=torch_dtype(t.dtype.name), device=device)
        ins = {n: x.contiguous() for n, x in tensors.items() if n not in outs}
        if device.type == "cuda":
            # the params (or the routed kernel) of the `specialize` the shapes select, as argus.load(...)(...)
            try:
                k = self.kernel.specialized({d: int(v) for d, v in dims.items()})
            except KeyError:  # a condition reads a dim no input binds: the kernel as registered
                k = self.kernel
            gk = k.gpu(device.index if device.index is not None else torch.cuda.current_device())
            with torch.cuda.device(device):
                gk(**ins, **outs, **scalars, stream=torch.cuda.current_stream(device).cuda_stream)
        elif device.type == "cpu":
            _interpret(self.kernel, self.ir, ins, outs, scalars)
        else:
            raise ArgumentError(f"operator {self.qualname}: tensors on {device} (CUDA or CPU only)",
                                self.signature.inputs[0].span)
        res = [outs[t.name] for t in self.signature.outputs]
        return res[0] if len(res) == 1 else tuple(res)


def _interpret(kernel: Kernel, k: ir.Kernel, ins: dict[str, torch.Tensor], outs: dict[str, torch.Tensor],
               scalars: dict[str, Any]) -> None:
    """CPU tensors: the NumPy interpreter over their values (bf16/f16 held in float32, as it stores them)."""
    from argus.interp.numerics import poison, storage_dtype

    def host(x: torch.Tensor, t: ir.TensorDecl) -> np.ndarray:
        store = storage_dtype(t.dtype)
        return np.ascontiguousarray(x.detach().to(torch.float32 if store == np.float32 else x.dtype).numpy(),
                                    dtype=store)

    decls = {t.name: t for t in k.tensors}
    arrays = {n: host(x, decls[n]) for n, x in ins.items()}
    for n, x in outs.items():  # pure outputs poisoned (NaN / -1): an element the kernel skips shows
        t = decls[n]
        arrays[n] = host(x, t) if n in k.inputs else \
            np.full(tuple(x.shape), poison(t.dtype), storage_dtype(t.dtype))
    kernel.interpret(**arrays, **scalars)
    for n, x in outs.items():
        x.copy_(torch.from_numpy(arrays[n]).to(x.dtype))


def op(kernel: Kernel | str | Path, *, name: str | None = None, namespace: str = "argus",
       dims: dict[str, int] | None = None, kernel_name: str | None = None, **params: Any) -> TorchOp:
    """Register `kernel` (an argus.Kernel, or a path loaded with `kernel_name` and `params`) as the
    operator NAMESPACE::NAME (default argus::<kernel name>) and return it. Registering the same kernel
    under the same name again returns the existing operator; another kernel under a taken name is an error."""
    if not isinstance(kernel, Kernel):
        kernel = load(kernel, kernel_name, **params)
    elif params:
        kernel = kernel.with_params(**params)
    k = kernel.lower()
    qualname = f"{namespace}::{name or k.name}"
    sig = signature_of(k, dims)
    old = _REGISTERED.get(qualname)
    if old is not None:
        if old.ir == k and old.signature.dims == sig.dims:  # the same program (a reload of the file too)
            return old
        raise error("torch-op", f"operator {qualname} is already registered for another kernel", k.span,
                    "pass name=... to register this one under another name")
    torch_op = TorchOp(kernel, qualname, sig, k)
    definition = torch.library.custom_op(qualname, _forward(torch_op._run), mutates_args=(), schema=sig.schema())
    definition.register_fake(_forward(torch_op._fake))
    object.__setattr__(torch_op, "_def", definition)
    _REGISTERED[qualname] = torch_op
    return torch_op


def _forward(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function (torch.library keeps and may inspect what it registers, not a bound method)."""
    def impl(*args: Any) -> Any:
        return fn(*args)
    return impl
