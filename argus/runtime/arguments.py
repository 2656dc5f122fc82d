"""Call arguments against a kernel's signature, for every call path: GPU arrays (torch, cupy, DLPack /
__cuda_array_interface__) and NumPy arrays for the interpreter.

One set of rules and messages: dtype, rank, the sizes of arguments that share a dimension name, device
and layout (C-contiguous), scalars by declared type, then the kernel's `assume`s over dims. Every error is
an ArgumentError located at the argument's declaration, naming the argument and the type it expects.

NumPy arrays are the interpreter's storage: floats narrower than f32 (bf16, f16, fp8) live in float32
arrays (the interpreter rounds what it loads to the declared type), f16 may also be float16, every other
type is its own NumPy dtype. Another dtype is refused unless the caller asks for `convert=True`.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.interp.numerics import round_to, storage_dtype
from argus.ir import nodes as ir
from argus.ir.transform import walk
from argus.runtime.arrays import (
    ArgumentError,
    ArrayInfo,
    ShapeBindings,
    bind_shape,
    check_array,
    declared_type,
    module_root,
)


def bind_arguments(kernel: ir.Kernel, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional and keyword arguments by declared name (tensors first, then scalars)."""
    names = [t.name for t in kernel.tensors] + [s.name for s in kernel.scalars]
    if len(args) > len(names):
        raise ArgumentError(f"kernel {kernel.name} takes {len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)}", kernel.span)
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise ArgumentError(f"kernel {kernel.name} has no argument '{k}' (it takes {', '.join(names)})",
                                kernel.span)
        if k in bound:
            raise ArgumentError(f"argument {k} given twice", kernel.span)
        bound[k] = v
    missing = [t.name for t in kernel.tensors if t.name not in bound]
    if missing:
        raise ArgumentError(f"kernel {kernel.name}: missing array argument(s) {', '.join(missing)}", kernel.span)
    for s in kernel.scalars:
        if s.name not in bound:
            if s.default is None:
                raise ArgumentError(f"kernel {kernel.name}: missing scalar argument {s.name}", s.span)
            bound[s.name] = s.default
    return bound


def check_scalar(s: ir.ScalarDecl, v: Any) -> None:
    """A Python or NumPy number of the declared kind (bools are not numbers here, except for bool)."""
    if s.dtype.is_float:
        ok = isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
    elif s.dtype.kind == "bool":
        ok = isinstance(v, (bool, np.bool_))
    else:
        ok = isinstance(v, numbers.Integral)
    if not ok:
        raise ArgumentError(f"argument {s.name}: expected a {s.dtype} scalar, got {v!r}", s.span)


def _check_dims(kernel: ir.Kernel, dims: ShapeBindings) -> None:
    for d, n in dims.items():
        if n < 1:
            src = dims.origin.get(d, "?")
            t = next((t for t in kernel.tensors if t.name == src), None)
            raise ArgumentError(f"dimension {d} is {n} (from argument {src}); every dimension must be at least 1",
                                t.span if t else kernel.span)


def launch_facts(kernel: ir.Kernel, bound: dict[str, Any]) -> dict[str, Any]:
    """What a `specialize` condition reads from a GPU launch before the kernel is chosen: the dims (each
    array checked for dtype, rank and shared sizes, not layout) and, per tensor argument, whether it is a
    transposed view (argus.specialize.layout_key)."""
    from argus.specialize import layout_key

    dims = ShapeBindings()
    facts: dict[str, Any] = {}
    for t in kernel.tensors:
        info = check_array(bound[t.name], name=t.name, dtype=t.dtype.name, shape=t.dims, dims=dims,
                           contiguous=False, span=t.span)
        facts[layout_key(t.name)] = info.is_transposed
    return {**dict(dims), **facts}


def validate(kernel: ir.Kernel, bound: dict[str, Any], device: int | None = None
             ) -> tuple[dict[str, ArrayInfo], dict[str, int], int]:
    """Check each GPU array against its declaration; returns (infos, dims, device)."""
    dims = ShapeBindings()
    infos: dict[str, ArrayInfo] = {}
    for t in kernel.tensors:
        info = check_array(bound[t.name], name=t.name, dtype=t.dtype.name, shape=t.dims, dims=dims,
                           contiguous=True, device=device, span=t.span)
        if device is None:
            device = info.device
        infos[t.name] = info
    for s in kernel.scalars:
        check_scalar(s, bound[s.name])
    _check_dims(kernel, dims)
    check_preconditions(kernel, dict(dims), {s.name: bound[s.name] for s in kernel.scalars})
    return infos, dict(dims), device if device is not None else 0


def check_preconditions(kernel: ir.Kernel, dims: dict[str, int], scalars: dict[str, Any]) -> None:
    """Every `assume(cond)` of the kernel over dims and scalars must hold (the verifier relied on it)."""
    from argus.interp.machine import BlockMachine
    from argus.ir.printer import expr as show

    m = BlockMachine(kernel, {}, dims, scalars, (0, 0, 0), (1, 1, 1))
    known = set(dims) | set(scalars)
    for st in walk(kernel.body):
        if isinstance(st, ir.Assume) and (st.over is not None or any(
                isinstance(x, (ir.Load, ir.Special)) or isinstance(x, ir.Var) and x.name not in known
                for x in walk(st.cond))):
            continue  # a contract over tensor contents (routing metadata): checked by the interpreter only
        if isinstance(st, ir.Assume) and not m.scalar(st.cond):
            values = ", ".join(f"{d}={v}" for d, v in dims.items())
            raise ArgumentError(f"precondition assume({show(st.cond)}) does not hold for {values}", st.span)


# ---- repeated GPU calls: what makes two calls' checks the same ----

def fast_bind(k: ir.Kernel, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """bind_arguments, or None when the call is malformed (the full, checked path then reports why)."""
    try:
        return bind_arguments(k, args, kwargs)
    except ArgumentError:
        return None


def _array_layout(a: Any) -> tuple | None:
    """(framework, dtype, shape, strides, device) of a torch tensor or cupy array: everything `prepare`
    checks and derives from an array except its address. None for other objects (no fast path)."""
    root = module_root(a)
    if root == "torch" and hasattr(a, "data_ptr"):
        return ("torch", a.dtype, tuple(a.shape), a.stride(), a.device.type, a.device.index)
    if root == "cupy" and hasattr(a, "data") and hasattr(a, "device"):
        return ("cupy", a.dtype.str, a.shape, a.strides, a.device.id)
    return None


def layout_key(k: ir.Kernel, bound: dict[str, Any]) -> tuple | None:
    parts: list[Any] = []
    for t in k.tensors:
        lay = _array_layout(bound[t.name])
        if lay is None:
            return None
        parts.append(lay)
    for s in k.scalars:
        v = bound[s.name]
        if type(v) not in (int, float, bool):
            return None
        parts.append((type(v), v))
    return tuple(parts)


# ---- NumPy arrays (the interpreter) ----

def host_dtypes(t: ir.TensorDecl) -> tuple[np.dtype, ...]:
    """The NumPy dtypes the interpreter accepts for a tensor argument (the first is its storage)."""
    store = storage_dtype(t.dtype)
    return (store, np.dtype(np.float16)) if t.dtype.name == "f16" else (store,)


def host_expectation(t: ir.TensorDecl) -> str:
    names = " or ".join(d.name for d in host_dtypes(t))
    held = f" holding {t.dtype} values" if t.dtype.is_float and t.dtype.bits < 32 else ""
    return f"{declared_type(t.dtype.name, t.dims)} (a C-contiguous NumPy {names} array{held})"


@dataclass(frozen=True)
class HostCall:
    """A validated interpreter call: the arrays to run on, dims, scalars, and the (user array, converted
    array) pairs to copy back after the run (only with convert=True)."""

    arrays: dict[str, np.ndarray]
    dims: dict[str, int]
    scalars: dict[str, Any]
    write_back: tuple[tuple[np.ndarray, np.ndarray], ...] = ()

    def finish(self) -> None:
        for user, ran in self.write_back:
            np.copyto(user, ran, casting="unsafe")


def validate_host(kernel: ir.Kernel, bound: dict[str, Any], convert: bool = False) -> HostCall:
    """Check NumPy arrays for the interpreter. With `convert`, an array of another dtype (or layout) runs
    as a converted copy, rounded to the declared type; outputs are copied back into the caller's array."""
    dims = ShapeBindings()
    arrays: dict[str, np.ndarray] = {}
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for t in kernel.tensors:
        a = bound[t.name]
        expect = host_expectation(t)
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"argument {t.name}: expected {expect}, got {type(a).__module__}."
                                f"{type(a).__qualname__}", t.span,
                                "a kernel called with NumPy arrays runs in the interpreter: pass NumPy arrays "
                                "for every tensor argument (or CUDA arrays for every one, to run on the GPU)")
        got = f"{a.dtype.name}[{', '.join(map(str, a.shape))}]"

        def fail(why: str = "", *notes: str, _e: str = expect, _g: str = got, _t: ir.TensorDecl = t) -> ArgumentError:
            return ArgumentError(f"argument {_t.name}: expected {_e}, got {_g}{why}", _t.span, *notes)

        bind_shape(t.name, a.shape, t.dims, dims, fail)
        ok_dtype = a.dtype in host_dtypes(t)
        ok_layout = a.flags.c_contiguous and (a.flags.writeable or t.name not in kernel.outputs)
        if ok_dtype and ok_layout:
            arrays[t.name] = a
            continue
        if not convert:
            if not ok_dtype:
                raise fail("", "pass convert=True to run on a copy converted (and rounded) to "
                           f"{t.dtype}, with outputs copied back")
            raise fail(" (not C-contiguous)" if not a.flags.c_contiguous else " (read-only, but the kernel writes it)",
                       "pass np.ascontiguousarray(...) or convert=True")
        if t.name in kernel.outputs and not a.flags.writeable:
            raise fail(" (read-only, but the kernel writes it)")
        ran = np.ascontiguousarray(round_to(np.asarray(a), t.dtype), dtype=host_dtypes(t)[0])
        arrays[t.name] = ran
        if t.name in kernel.outputs:
            back.append((a, ran))
    scalars = {}
    for s in kernel.scalars:
        check_scalar(s, bound[s.name])
        scalars[s.name] = bound[s.name]
    _check_dims(kernel, dims)
    return HostCall(arrays, dict(dims), scalars, tuple(back))
