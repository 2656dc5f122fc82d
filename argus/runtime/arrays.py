"""What the runtime needs to know about a user's array: device pointer, dtype, shape, strides, device.

Accepts torch tensors, cupy arrays, and anything exporting ``__cuda_array_interface__`` or DLPack.
torch and cupy are never imported here unless the caller already handed us one of their objects
(``import argus`` must stay cheap and must work without either installed).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from argus.dsl.diagnostics import ArgusError, Diagnostic, Span


class ArgumentError(ArgusError, ValueError):
    """A kernel argument does not match what the kernel expects.

    An ArgusError (code ``argument``): with ``span`` (the argument's declaration in the kernel's source)
    ``str(err)`` prints that place like any other diagnostic. Also a ValueError, for callers that catch that.
    """

    def __init__(self, message: str, span: Span | None = None, *notes: str) -> None:
        super().__init__(Diagnostic("error", "argument", message, span, tuple(notes)))


# Framework dtype names (torch without its "torch." prefix, numpy/cupy/ml_dtypes) -> argus names.
_DTYPE_NAMES: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "f16",
    "half": "f16",
    "float32": "f32",
    "float": "f32",
    "float64": "f64",
    "double": "f64",
    "int8": "i8",
    "int16": "i16",
    "short": "i16",
    "int32": "i32",
    "int": "i32",
    "int64": "i64",
    "long": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}

ITEMSIZE: dict[str, int] = {
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
    "u8": 1, "u16": 2, "u32": 4, "u64": 8, "bool": 1, "f8e4m3": 1, "f8e5m2": 1,
}  # fmt: skip

# DLPack (type code, bits) -> argus name. Codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DLPACK_DTYPES: dict[tuple[int, int], str] = {
    (0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64",
    (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64",
    (2, 16): "f16", (2, 32): "f32", (2, 64): "f64", (4, 16): "bf16", (6, 8): "bool",
}  # fmt: skip
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


def dtype_name(dtype: Any) -> str:
    """argus name (``bf16``, ``f32`` ...) of a torch/numpy/cupy dtype or of a dtype name."""
    if isinstance(dtype, str) and dtype in ITEMSIZE:
        return dtype
    text = str(dtype).removeprefix("torch.")
    try:
        return _DTYPE_NAMES[text]
    except KeyError:
        raise ArgumentError(f"unsupported dtype {dtype!r}") from None


@dataclass(frozen=True)
class ArrayInfo:
    ptr: int
    dtype: str  # argus name
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device: int  # CUDA ordinal; -1 for host memory (only with allow_host=True)
    kind: str  # "torch", "cupy", "cuda_array_interface" or "dlpack"

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def strides_bytes(self) -> tuple[int, ...]:
        return tuple(s * self.itemsize for s in self.strides)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous (row-major, dense); size-1 dims may carry any stride."""
        expect = 1
        for dim, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if dim != 1 and stride != expect:
                return False
            expect *= dim
        return True

    @property
    def is_transposed(self) -> bool:
        """A transposed view of a C-contiguous array (its last two axes swapped, as torch's w.t()), and not
        itself C-contiguous."""
        if len(self.shape) < 2 or self.is_contiguous:
            return False
        sh = self.shape[:-2] + (self.shape[-1], self.shape[-2])
        st = self.strides[:-2] + (self.strides[-1], self.strides[-2])
        return ArrayInfo(self.ptr, self.dtype, sh, st, self.device, self.kind).is_contiguous

    @property
    def device_name(self) -> str:
        return f"cuda:{self.device}" if self.device >= 0 else "cpu"

    def describe(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        layout = "" if self.is_contiguous else f" non-contiguous (strides {list(self.strides)})"
        return f"{self.dtype}[{dims}]{layout} on {self.device_name}"


def module_root(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def _label(name: str | None) -> str:
    return f"argument {name}" if name is not None else "argument"


def _torch_info(t: Any, name: str | None, allow_host: bool) -> ArrayInfo:
    dev = t.device
    if dev.type != "cuda" and not allow_host:
        raise ArgumentError(f"{_label(name)}: expected a CUDA tensor, got a tensor on {dev}")
    return ArrayInfo(
        ptr=int(t.data_ptr()),
        dtype=dtype_name(t.dtype),
        shape=tuple(int(d) for d in t.shape),
        strides=tuple(int(s) for s in t.stride()),
        device=int(dev.index if dev.index is not None else 0) if dev.type == "cuda" else -1,
        kind="torch",
    )


def _cupy_info(a: Any) -> ArrayInfo:
    item = int(a.itemsize)
    return ArrayInfo(
        ptr=int(a.data.ptr),
        dtype=dtype_name(a.dtype),
        shape=tuple(int(d) for d in a.shape),
        strides=tuple(int(s) // item for s in a.strides),
        device=int(a.device.id),
        kind="cupy",
    )


def _pointer_device(ptr: int) -> int:
    """CUDA ordinal owning ``ptr`` (asked from the driver; 0 when it cannot tell)."""
    try:
        from cuda.bindings import driver

        err, ordinal = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        if err == driver.CUresult.CUDA_SUCCESS:
            return int(ordinal)
    except Exception:
        pass
    return 0


def _cai_info(obj: Any, name: str | None) -> ArrayInfo:
    import numpy as np

    cai = obj.__cuda_array_interface__
    ptr = int(cai["data"][0])
    shape = tuple(int(d) for d in cai["shape"])
    # A .dtype attribute names types the typestr cannot (bfloat16 shows up as an opaque "<V2").
    dt = getattr(obj, "dtype", None)
    try:
        dtype = dtype_name(dt) if dt is not None else dtype_name(np.dtype(cai["typestr"]).name)
    except (ArgumentError, TypeError):
        dtype = dtype_name(np.dtype(cai["typestr"]).name)
    item = ITEMSIZE[dtype]
    if cai.get("strides") is None:
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        strides.reverse()
    else:
        strides = [int(s) // item for s in cai["strides"]]
    return ArrayInfo(ptr, dtype, shape, tuple(strides), _pointer_device(ptr) if ptr else 0, "cuda_array_interface")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _dlpack_info(obj: Any, name: str | None, allow_host: bool) -> ArrayInfo:
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type not in (_DL_CUDA, _DL_CUDA_MANAGED) and not (allow_host and dev_type in (_DL_CPU, _DL_CUDA_HOST)):
        raise ArgumentError(f"{_label(name)}: expected an array on a CUDA device, got DLPack device type {dev_type}")
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    # A legacy (unversioned) capsule, left unconsumed: its destructor frees the export, while
    # the memory itself stays owned by ``obj``.
    addr = get(capsule, b"dltensor")
    t = _DLTensor.from_address(addr)  # DLManagedTensor starts with its DLTensor
    key = (int(t.dtype.code), int(t.dtype.bits))
    if key not in _DLPACK_DTYPES or t.dtype.lanes != 1:
        raise ArgumentError(f"{_label(name)}: unsupported DLPack dtype code={key[0]} bits={key[1]}")
    dtype = _DLPACK_DTYPES[key]
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    if t.strides:
        strides = tuple(int(t.strides[i]) for i in range(ndim))
    else:
        acc, rev = 1, []
        for d in reversed(shape):
            rev.append(acc)
            acc *= d
        strides = tuple(reversed(rev))
    ptr = int(t.data or 0) + int(t.byte_offset)
    device = int(dev_id) if dev_type in (_DL_CUDA, _DL_CUDA_MANAGED) else -1
    del capsule
    return ArrayInfo(ptr, dtype, shape, strides, device, "dlpack")


def is_array(obj: Any) -> bool:
    """Whether ``obj`` looks like an array this module can read (on any device)."""
    root = module_root(obj)
    return (
        (root == "torch" and hasattr(obj, "data_ptr"))
        or hasattr(obj, "__cuda_array_interface__")
        or hasattr(obj, "__dlpack__")
    )


def array_info(obj: Any, *, name: str | None = None, allow_host: bool = False) -> ArrayInfo:
    """Pointer, dtype, shape, strides and device of ``obj``; :class:`ArgumentError` if it is no
    CUDA array (host arrays pass only with ``allow_host``, e.g. to inspect them in tests)."""
    root = module_root(obj)
    if root == "torch" and hasattr(obj, "data_ptr"):
        return _torch_info(obj, name, allow_host)
    if root == "cupy" and hasattr(obj, "data") and hasattr(obj, "device"):
        return _cupy_info(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_info(obj, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_info(obj, name, allow_host)
    raise ArgumentError(
        f"{_label(name)}: expected a CUDA array (torch tensor, cupy array, or an object with "
        f"__cuda_array_interface__ / __dlpack__), got {type(obj).__module__}.{type(obj).__qualname__}"
    )


class ShapeBindings(dict[str, int]):
    """Symbolic dim -> size, remembering which argument fixed each one (for error messages)."""

    def __init__(self, items: Mapping[str, int] | None = None) -> None:
        super().__init__(items or {})
        self.origin: dict[str, str] = {}


def check_array(
    obj: Any,
    *,
    name: str,
    dtype: str | None = None,
    shape: Sequence[int | str | None] | None = None,
    dims: MutableMapping[str, int] | None = None,
    contiguous: bool = True,
    device: int | None = None,
    span: Span | None = None,
) -> ArrayInfo:
    """Check ``obj`` against a declared parameter such as ``B: bf16[K, N]`` and return its info.

    ``shape`` entries are sizes, symbol names (bound through ``dims``, shared across the arguments of
    one call, so ``K`` must agree between A and B) or None (any size). ``span`` locates the declaration
    in error messages.
    """
    expect = declared_type(dtype, shape) + (" contiguous" if contiguous else "")
    if device is not None:
        expect += f" on cuda:{device}"
    try:
        info = array_info(obj, name=name)
    except ArgumentError as e:
        raise ArgumentError(f"argument {name}: expected {expect}, got {_brief(obj)} ({e.message})", span) from None

    def fail(why: str = "", *notes: str) -> ArgumentError:
        return ArgumentError(f"argument {name}: expected {expect}, got {info.describe()}{why}", span, *notes)

    if dtype is not None and info.dtype != dtype_name(dtype):
        raise fail()
    if shape is not None:
        bind_shape(name, info.shape, shape, dims, fail)
    if contiguous and not info.is_contiguous:
        raise fail("", "the kernel indexes its tensors row-major and dense: pass a contiguous copy "
                   "(torch: .contiguous(), cupy: cupy.ascontiguousarray)")
    if device is not None and info.device != device:
        raise fail(f" (the kernel is loaded on cuda:{device})")
    return info


def declared_type(dtype: str | None, shape: Sequence[int | str | None] | None) -> str:
    """How a declaration reads in messages: ``bf16[M, K]``."""
    want_dims = ", ".join("?" if d is None else str(d) for d in shape) if shape is not None else "..."
    return f"{dtype or '?'}[{want_dims}]"


def bind_shape(name: str, got: Sequence[int], shape: Sequence[int | str | None],
               dims: MutableMapping[str, int] | None, fail: Any) -> None:
    """Match an array's shape against a declared one, binding symbolic dims in ``dims`` (shared by the
    arguments of one call); ``fail(why)`` builds the error to raise."""
    if len(shape) != len(got):
        raise fail(f" ({len(got)} dims instead of {len(shape)})")
    origin = getattr(dims, "origin", None)
    for axis, (want, n) in enumerate(zip(shape, got, strict=True)):
        if want is None:
            continue
        if isinstance(want, int):
            if n != want:
                raise fail(f" (dim {axis} must be {want})")
            continue
        if dims is None:
            continue
        if want in dims and dims[want] != n:
            src = f" from argument {origin[want]}" if origin and want in origin else ""
            raise fail(f" ({want} is {dims[want]}{src})")
        if want not in dims:
            dims[want] = n
            if origin is not None:
                origin[want] = name


def _brief(obj: Any) -> str:
    try:
        return array_info(obj, allow_host=True).describe()
    except Exception:
        return f"{type(obj).__module__}.{type(obj).__qualname__}"


def current_stream(args: Iterable[Any], device: int = 0) -> int:
    """The stream a launch on these arguments should use: torch's or cupy's current stream when the
    arguments come from that framework (so ordering with the caller's own work holds), else the
    legacy default stream (0)."""
    roots = {module_root(a) for a in args}
    if "torch" in roots and "torch" in sys.modules:
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(device).cuda_stream)
    if "cupy" in roots and "cupy" in sys.modules:
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return 0
