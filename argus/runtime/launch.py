"""A built Argus kernel on a GPU: argument validation, padding, tensor maps, grid, launch.

`GpuKernel(built)(A, B, C)` checks every argument against the kernel's declaration (dtype, shape with
the symbolic dims bound consistently, C-contiguity, device), evaluates the launch grid from the dims,
builds the CUtensorMaps that bulk copies need, sets the dynamic shared-memory size and launches on the
arrays' current stream. `prepare` does all of that once and returns a `Launch` that only enqueues,
for timing loops.

Inputs read 16 bytes at a time (cp.async, TMA) need a row pitch that is a multiple of 16 bytes. When a
tensor's is not (e.g. K = 2949 bf16 elements), `prepare` copies it into a buffer whose rows are padded
to 16 bytes and passes that with its pitch; the kernel still sees the logical dims, so the padding is
never read. The copy is part of the launch (and of its timing). An output written by TMA stores
(GeneratedKernel.bulk_outputs) with such rows is written into a padded buffer and copied back after
the launch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from argus.codegen.compile import Built
from argus.codegen.spec import GeneratedKernel
from argus.interp.machine import grid_size
from argus.ir import nodes as ir
from argus.runtime import driver as drv
from argus.runtime.arguments import (  # noqa: F401 (bind_arguments, check_preconditions re-exported)
    bind_arguments,
    check_preconditions,
    fast_bind,
    layout_key,
    validate,
)
from argus.runtime.arrays import ITEMSIZE, ArgumentError, ArrayInfo, array_info, module_root


def _framework_view(name: str, obj: Any) -> Any:
    """`obj` as a torch tensor or cupy array (a bare DLPack producer is viewed through whichever is
    installed), so that a padded copy can be made on its device."""
    if module_root(obj) in ("torch", "cupy"):
        return obj
    for mod in ("torch", "cupy"):
        try:
            lib = __import__(mod)
            view = lib.from_dlpack(obj)
        except Exception:  # noqa: BLE001 - not installed, or it cannot view this dtype: try the next
            continue
        if mod == "cupy" or view.is_cuda:
            return view
    raise ArgumentError(f"argument {name}: its rows are not 16-byte aligned, and copying it to a 16-byte pitch "
                        "needs torch or cupy to view it; pass one with 16-byte aligned rows")


def _padded_copy(name: str, obj: Any, info: ArrayInfo) -> Any:
    """A copy of `obj` whose last axis is padded to 16 bytes (same framework, same stream)."""
    per = 16 // info.itemsize
    cols = info.shape[-1]
    padded = -(-cols // per) * per
    shape = (*info.shape[:-1], padded)
    root = module_root(obj)
    if root == "torch":
        import torch

        out = torch.empty(shape, dtype=obj.dtype, device=obj.device)
        out[..., :cols].copy_(obj)
        return out
    if root == "cupy":
        import cupy

        out = cupy.empty(shape, dtype=obj.dtype)
        out[..., :cols] = obj
        return out
    raise ArgumentError(f"argument {name}: its rows are {cols * info.itemsize} bytes, and copying it to "
                        "a 16-byte pitch needs a torch or cupy array; pass one with 16-byte aligned rows")


def _copier(padded: Any, orig: Any, cols: int, into_padded: bool) -> Callable[[], None]:
    """A copy between `orig` and the first `cols` columns of its padded buffer, either way."""
    if module_root(orig) == "torch":
        if into_padded:
            return lambda: padded[..., :cols].copy_(orig)
        return lambda: orig.copy_(padded[..., :cols])
    if into_padded:
        return lambda: padded[..., :cols].__setitem__(Ellipsis, orig)
    return lambda: orig.__setitem__(Ellipsis, padded[..., :cols])


def _needs_padding(info: ArrayInfo) -> bool:
    pitch = info.strides[-2] * info.itemsize if len(info.shape) >= 2 else 0
    return info.ptr % 16 != 0 or pitch % 16 != 0


@dataclass
class Launch:
    """One prepared launch: `launch()` enqueues it (pads first, when an input needed padding)."""

    kernel: drv.Kernel
    grid: tuple[int, int, int]
    block: int
    smem: int
    args: list[Any]
    names: list[str]
    stream: int
    pre: list[Callable[[], None]] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)  # arrays and tensor maps the arguments point into
    post: list[Callable[[], None]] = field(default_factory=list)  # padded outputs copied back
    tmap_args: list[tuple] = field(default_factory=list)  # make_tensor_map's arguments per tensor map

    packed: Any = field(default=None, repr=False)  # the arguments packed by the first launch

    def __call__(self) -> None:
        for p in self.pre:
            p()
        if self.packed is None:  # the first launch checks block size and shared memory, and packs
            self.kernel.launch(self.grid, self.block, self.args, smem=self.smem, stream=self.stream,
                               arg_names=self.names)
            self.packed = (drv._dim3(self.grid, "grid"), drv._dim3(self.block, "block"),
                           drv._pack_args(self.kernel, self.args, self.names))
        else:
            grid, block, packed = self.packed
            self.kernel.enqueue(grid, block, self.smem, self.stream, packed)
        for p in self.post:
            p()


class GpuKernel:
    """A Built kernel loaded on one device."""

    def __init__(self, built: Built, device: int = 0) -> None:
        self.built = built
        self.device = device
        self.module = drv.load_module(built.result, device=device)
        self.fn = self.module.kernel(built.generated.name)
        self._plans: dict[tuple, _Plan] = {}  # layout key -> a checked launch (see __call__)

    @property
    def generated(self) -> GeneratedKernel:
        return self.built.generated

    @property
    def ir(self) -> ir.Kernel:
        return self.built.kernel

    def prepare(self, *args: Any, stream: Any = None, **kwargs: Any) -> Launch:
        k, gen = self.ir, self.generated
        bound = bind_arguments(k, args, kwargs)
        infos, dims, device = validate(k, bound, self.device)
        arrays = {t.name: bound[t.name] for t in k.tensors}
        pre: list[Callable[[], None]] = []
        post: list[Callable[[], None]] = []
        keep: list[Any] = list(arrays.values())
        for name in gen.aligned_inputs + tuple(n for n in gen.bulk_outputs if n not in gen.aligned_inputs):
            info = infos[name]
            if not _needs_padding(info):
                continue
            written = name in gen.bulk_outputs
            if name in k.outputs and not written:
                raise ArgumentError(f"argument {name}: the kernel reads it 16 bytes at a time and writes it, so "
                                    "its rows must be 16-byte aligned (and its base address too)")
            orig = _framework_view(name, arrays[name])
            padded = _padded_copy(name, orig, info)
            arrays[name] = padded
            # the padded pitch and pointer, but the logical shape: TMA boxes and masks stop at the real edge
            infos[name] = dataclasses.replace(array_info(padded, name=name), shape=info.shape)
            keep.append(padded)
            # filled from the array before each launch (an output too: elements the kernel does not write
            # keep their values); an output written by TMA stores is copied back after it
            pre.append(_copier(padded, orig, info.shape[-1], into_padded=True))
            if written:
                post.append(_copier(padded, orig, info.shape[-1], into_padded=False))
        tmaps, tmap_args = [], []
        for spec in gen.tensor_maps:
            info = infos[spec.tensor]
            item = ITEMSIZE[info.dtype]
            rank = len(info.shape)
            box = spec.box(rank)  # the axes other than the tile's two are indexed
            margs = (info.ptr, info.dtype, info.shape, [st * item for st in info.strides], box, spec.swizzle)
            tm = drv.make_tensor_map(*margs)
            tmaps.append(tm)
            tmap_args.append(margs)
            keep.append(tm)
        values: list[Any] = []
        for p in gen.params:
            if p.kind == "tensor":
                values.append(infos[p.arg].ptr)
            elif p.kind == "stride":
                values.append(infos[p.arg].strides[p.axis])
            elif p.kind == "dim":
                values.append(dims[p.arg])
            elif p.kind == "scalar":
                s = next(x for x in k.scalars if x.name == p.arg)
                values.append(float(bound[p.arg]) if s.dtype.is_float else int(bound[p.arg]))
            else:
                values.append(tmaps[p.tmap])
        scalars = {s.name: bound[s.name] for s in k.scalars}
        grid = grid_size(k, dims, scalars)
        launch_stream = drv._stream_handle(stream, list(arrays.values()), device)
        return Launch(self.fn, grid, gen.threads, gen.smem_bytes, values, [p.name for p in gen.params],
                      launch_stream, pre, keep, post, tmap_args)

    def __call__(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        """Launch on these arrays. A call whose arguments have the layout of an earlier call (dtypes,
        shapes, strides, devices, scalar values) reuses that call's checked plan and only swaps in the new
        pointers (and re-encodes tensor maps that moved) instead of a full `prepare` (argument checks,
        assumes, grid, packing)."""
        bound = fast_bind(self.ir, args, kwargs)
        key = layout_key(self.ir, bound) if bound is not None else None
        plan = self._plans.get(key) if key is not None else None
        if plan is not None and plan.launch(bound, stream):
            return
        launch = self.prepare(*args, stream=stream, **kwargs)
        launch()
        if key is not None and not launch.pre and not launch.post:
            if len(self._plans) >= _PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = _Plan.of(self, launch)


# ---- repeated calls ----

_PLANS = 16  # layouts remembered per kernel (oldest dropped first)


def _address(a: Any) -> int:
    return int(a.data_ptr()) if module_root(a) == "torch" else int(a.data.ptr)


@dataclass(frozen=True)
class _Plan:
    """A launch checked once for one layout of the arguments; `launch` fills in this call's addresses.

    Holds no user array (the addresses are the call's): a tensor map is re-encoded when its tensor's
    address differs from the one it was built for."""

    gk: GpuKernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    values: tuple[Any, ...]  # the first call's parameter values; tensor and tensor-map slots are replaced
    names: tuple[str, ...]
    tensors: tuple[tuple[int, str], ...]  # (parameter index, argument name) of each pointer parameter
    tmaps: tuple[tuple[int, str, tuple], ...]  # (parameter index, argument name, make_tensor_map args)
    aligned: tuple[str, ...]  # arguments read or written 16 bytes at a time: their address must be aligned
    built_for: dict[int, tuple[int, Any]]  # parameter index -> (address, tensor map) last encoded

    @staticmethod
    def of(gk: GpuKernel, launch: Launch) -> _Plan:
        gen = gk.generated
        tensors, tmaps = [], []
        built_for: dict[int, tuple[int, Any]] = {}
        for i, p in enumerate(gen.params):
            if p.kind == "tensor":
                tensors.append((i, p.arg))
            elif p.kind not in ("stride", "dim", "scalar"):  # a tensor map
                margs = launch.tmap_args[p.tmap]
                tmaps.append((i, gen.tensor_maps[p.tmap].tensor, margs))
                built_for[i] = (margs[0], launch.args[i])
        aligned = tuple(dict.fromkeys(gen.aligned_inputs + gen.bulk_outputs))
        return _Plan(gk, drv._dim3(launch.grid, "grid"), drv._dim3(launch.block, "block"), launch.smem,
                     tuple(launch.args), tuple(launch.names), tuple(tensors), tuple(tmaps), aligned, built_for)

    def launch(self, bound: dict[str, Any], stream: Any) -> bool:
        """Enqueue on these arrays; False when one needs what `prepare` does (an unaligned address)."""
        addr = {n: _address(bound[n]) for n in {n for _, n in self.tensors} | {n for _, n, _ in self.tmaps}}
        if any(addr[n] % 16 for n in self.aligned if n in addr):
            return False
        values = list(self.values)
        for i, n in self.tensors:
            values[i] = addr[n]
        for i, n, margs in self.tmaps:
            old_addr, tm = self.built_for[i]
            if old_addr != addr[n]:
                tm = drv.make_tensor_map(addr[n], *margs[1:])
                self.built_for[i] = (addr[n], tm)
            values[i] = tm
        fn = self.gk.fn
        handle = drv._stream_handle(stream, list(bound.values()), self.gk.device)
        fn.enqueue(self.grid, self.block, self.smem, handle, drv._pack_args(fn, values, self.names))
        return True
