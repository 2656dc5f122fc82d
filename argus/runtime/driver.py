"""Load cubins and launch kernels through the CUDA driver API (``cuda.bindings.driver``).

Kernels run in the device's primary context, the one torch and cupy use, so their arrays and streams
work unchanged. Arguments are packed by hand into the ``void**`` array that ``cuLaunchKernel`` takes:
device arrays and pointers as 8-byte values, scalars at the width the kernel declares (asked from the
driver with ``cuFuncGetParamInfo``), and ``CUtensorMap`` descriptors by value for
``const __grid_constant__ CUtensorMap`` parameters.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from argus.runtime.arrays import (
    ITEMSIZE,
    ArgumentError,
    array_info,
    current_stream,
    dtype_name,
    is_array,
    module_root,
)

_STATIC_SMEM_LIMIT = 48 * 1024  # dynamic smem above this needs an explicit opt-in per kernel


class CudaError(RuntimeError):
    """A CUDA driver call failed; ``name`` is the CUresult name (e.g. ``CUDA_ERROR_INVALID_VALUE``)."""

    def __init__(self, call: str, code: Any, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.name = _error_name(code)
        text = _error_string(code)
        msg = f"{call} failed: {self.name}" + (f" ({text})" if text else "")
        super().__init__(msg + (f": {detail}" if detail else ""))


class LaunchError(ArgumentError):
    """A launch configuration the kernel or device cannot run (caught before the driver sees it)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"the CUDA driver bindings are missing (pip install cuda-python): {e}") from e
    return driver


def _error_name(code: Any) -> str:
    try:
        err, name = _driver().cuGetErrorName(code)
        if name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        pass
    return getattr(code, "name", str(code))


def _error_string(code: Any) -> str:
    try:
        err, text = _driver().cuGetErrorString(code)
        if text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:
        pass
    return ""


def _check(result: Any, call: str, detail: str = "") -> Any:
    """Unwrap a ``(CUresult, *values)`` tuple from cuda.bindings, raising :class:`CudaError`."""
    driver = _driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise CudaError(call, err, detail)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


# --------------------------------------------------------------------------------------------------
# Context

_lock = threading.Lock()
_initialized = False
_primary: dict[int, Any] = {}


def _init() -> None:
    global _initialized
    if _initialized:
        return
    driver = _driver()
    try:
        result = driver.cuInit(0)
    except Exception as e:  # no libcuda: cuda.bindings raises a loader error
        raise RuntimeError(f"no CUDA driver available: {e}") from e
    _check(result, "cuInit")
    _initialized = True


def device_count() -> int:
    _init()
    return int(_check(_driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def ensure_context(device: int = 0) -> Any:
    """Make ``device``'s primary context current on this thread (retaining it once) and return it."""
    driver = _driver()
    with _lock:
        _init()
        ctx = _primary.get(device)
        if ctx is None:
            n = device_count()
            if not 0 <= device < n:
                raise LaunchError(f"no CUDA device {device}: this machine has {n}")
            dev = _check(driver.cuDeviceGet(device), "cuDeviceGet")
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _primary[device] = ctx
    current = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(ctx):
        _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def device_attribute(name: str, device: int = 0) -> int:
    """``CU_DEVICE_ATTRIBUTE_<NAME>`` of ``device``, e.g. ``device_attribute("MULTIPROCESSOR_COUNT")``."""
    driver = _driver()
    ensure_context(device)
    attr = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name.upper()}")
    dev = _check(driver.cuDeviceGet(device), "cuDeviceGet")
    return int(_check(driver.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))


def synchronize(device: int = 0) -> None:
    """Wait for all work on ``device``; asynchronous kernel faults surface here as :class:`CudaError`."""
    ensure_context(device)
    _check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")


# --------------------------------------------------------------------------------------------------
# Modules and kernels


class Module:
    """A loaded cubin (or NUL-terminated PTX, JIT-compiled by the driver)."""

    def __init__(self, image: bytes, *, device: int = 0, name: str = "<cubin>") -> None:
        driver = _driver()
        ensure_context(device)
        self.device = device
        self.name = name
        self._image = bytes(image)
        if not self._image.startswith(b"\x7fELF") and not self._image.endswith(b"\x00"):
            self._image += b"\x00"  # PTX text must be NUL-terminated for cuModuleLoadData
        self.handle = _check(driver.cuModuleLoadData(self._image), "cuModuleLoadData", f"loading {name}")
        self._kernels: dict[str, Kernel] = {}

    def kernel(self, name: str) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            driver = _driver()
            ensure_context(self.device)
            try:
                fn = _check(driver.cuModuleGetFunction(self.handle, name.encode()), "cuModuleGetFunction")
            except CudaError as e:
                raise KeyError(f"no kernel {name!r} in {self.name}{self._known_kernels()}") from e
            k = self._kernels[name] = Kernel(self, name, fn)
        return k

    __getitem__ = kernel

    def _known_kernels(self) -> str:
        try:
            from argus.codegen.resources import parse_cubin

            names = sorted(parse_cubin(self._image))
            return f" (it has: {', '.join(names)})" if names else ""
        except Exception:
            return ""

    def unload(self) -> None:
        if self.handle is not None:
            ensure_context(self.device)
            _check(_driver().cuModuleUnload(self.handle), "cuModuleUnload")
            self.handle = None
            self._kernels.clear()

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unload()


def load_module(image: Any, *, device: int = 0, name: str | None = None) -> Module:
    """Load a cubin/PTX image, or the ``binary`` of a ``codegen.nvrtc.CompileResult``."""
    if hasattr(image, "binary"):
        return Module(image.binary, device=device, name=name or getattr(image, "name", "<cubin>"))
    return Module(image, device=device, name=name or "<cubin>")


Dim3 = int | Sequence[int]


def _dim3(value: Dim3, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive sizes, got {value!r}")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


@dataclass(frozen=True)
class _Param:
    offset: int
    size: int


class Kernel:
    """One ``__global__`` function of a :class:`Module`; call :meth:`launch` to run it."""

    def __init__(self, module: Module, name: str, handle: Any) -> None:
        self.module = module
        self.name = name
        self.handle = handle
        self._params: tuple[_Param, ...] | None | bool = False  # False: not asked yet
        self._dyn_smem_set = 0
        self._max_threads: int | None = None  # fixed per function: cached, it is read on every launch

    @property
    def device(self) -> int:
        return self.module.device

    def attribute(self, name: str) -> int:
        """``CU_FUNC_ATTRIBUTE_<NAME>``, e.g. ``NUM_REGS``, ``SHARED_SIZE_BYTES``, ``LOCAL_SIZE_BYTES``."""
        driver = _driver()
        attr = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name.upper()}")
        ensure_context(self.device)
        return int(_check(driver.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({name})"))

    @property
    def num_regs(self) -> int:
        return self.attribute("NUM_REGS")

    @property
    def static_smem_bytes(self) -> int:
        return self.attribute("SHARED_SIZE_BYTES")

    @property
    def max_threads_per_block(self) -> int:
        if self._max_threads is None:
            self._max_threads = self.attribute("MAX_THREADS_PER_BLOCK")
        return self._max_threads

    def params(self) -> tuple[_Param, ...] | None:
        """(offset, size) of each parameter, or None where the driver cannot say (before CUDA 12.4)."""
        if self._params is False:
            driver = _driver()
            fn = getattr(driver, "cuFuncGetParamInfo", None)
            found: list[_Param] = []
            if fn is None:
                self._params = None
            else:
                ensure_context(self.device)
                while True:
                    try:
                        err, offset, size = fn(self.handle, len(found))
                    except Exception:
                        self._params = None
                        break
                    if err == driver.CUresult.CUDA_ERROR_INVALID_VALUE:
                        self._params = tuple(found)  # ran past the last parameter
                        break
                    if err != driver.CUresult.CUDA_SUCCESS:
                        self._params = None
                        break
                    found.append(_Param(int(offset), int(size)))
        return self._params  # type: ignore[return-value]

    def set_max_dynamic_smem(self, nbytes: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
        limit = device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", self.device)
        static = self.static_smem_bytes
        if nbytes + static > limit:
            raise LaunchError(
                f"kernel {self.name}: {nbytes} B of dynamic shared memory plus {static} B static exceeds "
                f"the {limit} B per block that cuda:{self.device} allows"
            )
        driver = _driver()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(
            driver.cuFuncSetAttribute(self.handle, attr, int(nbytes)),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            f"kernel {self.name}, {nbytes} B",
        )
        self._dyn_smem_set = int(nbytes)

    def launch(
        self,
        grid: Dim3,
        block: Dim3,
        args: Sequence[Any] = (),
        *,
        smem: int = 0,
        stream: Any = None,
        cluster: Dim3 | None = None,
        arg_names: Sequence[str] | None = None,
    ) -> None:
        """Launch on ``stream`` (default: the current torch/cupy stream of the array arguments, else 0).

        ``cluster`` launches thread-block clusters (sm_90+) through ``cuLaunchKernelEx``. Launches are
        asynchronous: a fault inside the kernel surfaces at the next synchronising call.
        """
        driver = _driver()
        ensure_context(self.device)
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        threads = b[0] * b[1] * b[2]
        max_threads = self.max_threads_per_block
        if threads > max_threads:
            raise LaunchError(
                f"kernel {self.name}: block {b} has {threads} threads, but it can run at most {max_threads} "
                "per block (launch bounds or register use)"
            )
        if smem < 0:
            raise LaunchError(f"kernel {self.name}: negative dynamic shared memory {smem}")
        if smem > _STATIC_SMEM_LIMIT and smem > self._dyn_smem_set:
            self.set_max_dynamic_smem(smem)
        packed = _pack_args(self, args, arg_names)
        handle = _stream_handle(stream, args, self.device)
        if cluster is None:
            self.enqueue(g, b, smem, handle, packed)
        else:
            c = _dim3(cluster, "cluster")
            if any(gi % ci for gi, ci in zip(g, c, strict=True)):
                raise LaunchError(f"kernel {self.name}: grid {g} is not a multiple of cluster {c}")
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = g
            config.blockDimX, config.blockDimY, config.blockDimZ = b
            config.sharedMemBytes = int(smem)
            config.hStream = driver.CUstream(handle)
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
            config.attrs = [attr]
            config.numAttrs = 1
            _check(
                driver.cuLaunchKernelEx(config, self.handle, packed.address, 0),
                "cuLaunchKernelEx",
                f"kernel {self.name}, grid {g}, block {b}, cluster {c}, {smem} B dynamic smem",
            )
        del packed  # the driver copied the parameter values during the launch call

    def enqueue(self, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int, stream: int,
                packed: _Packed) -> None:
        """cuLaunchKernel with arguments already packed and a launch `launch` has checked once (block
        size, dynamic shared memory opted in): the repeated-call path of argus.runtime.launch."""
        ensure_context(self.device)
        _check(
            _driver().cuLaunchKernel(self.handle, *grid, *block, int(smem), stream, packed.address, 0),
            "cuLaunchKernel",
            f"kernel {self.name}, grid {grid}, block {block}, {smem} B dynamic smem",
        )

    def __call__(self, *args: Any, grid: Dim3, block: Dim3, **kw: Any) -> None:
        self.launch(grid, block, args, **kw)

    def __repr__(self) -> str:
        return f"<Kernel {self.name} of {self.module.name} on cuda:{self.device}>"


def launch(kernel: Kernel, grid: Dim3, block: Dim3, args: Sequence[Any] = (), **kw: Any) -> None:
    kernel.launch(grid, block, args, **kw)


# --------------------------------------------------------------------------------------------------
# Argument packing


class _Packed:
    """The ``void*[]`` of parameter addresses, with the storage those addresses point into."""

    def __init__(self, values: list[Any]) -> None:
        self._values = values  # keeps every ctypes buffer / CUtensorMap alive
        self._array = (ctypes.c_void_p * max(1, len(values)))()
        for i, v in enumerate(values):
            self._array[i] = v.getPtr() if hasattr(v, "getPtr") else ctypes.addressof(v)
        self.address = ctypes.addressof(self._array) if values else 0


_INT_CTYPES = {1: ctypes.c_int8, 2: ctypes.c_int16, 4: ctypes.c_int32, 8: ctypes.c_int64}
_UINT_CTYPES = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def _pack_one(value: Any, size: int | None, label: str, device: int) -> Any:
    driver = _driver()
    if isinstance(value, driver.CUtensorMap):
        if size not in (None, 128):
            raise ArgumentError(f"{label}: a CUtensorMap is 128 bytes, but the kernel parameter is {size}")
        return value
    if module_root(value) == "numpy" and getattr(value, "shape", None) == () and hasattr(value, "tobytes"):
        # numpy scalar: its own width is the intended one
        raw = value.tobytes()
        if size is not None and len(raw) != size:
            raise ArgumentError(
                f"{label}: {dtype_name(value.dtype)} scalar is {len(raw)} bytes, the parameter is {size}"
            )
        return ctypes.create_string_buffer(raw, len(raw))
    if is_array(value):
        info = array_info(value, name=label.removeprefix("argument "))
        if info.device != device:
            raise ArgumentError(f"{label}: array is on {info.device_name}, the kernel runs on cuda:{device}")
        if size not in (None, 8):
            raise ArgumentError(f"{label}: the kernel parameter is {size} bytes, not a pointer (8 bytes)")
        return ctypes.c_uint64(info.ptr)
    if isinstance(value, ctypes._SimpleCData):
        if size is not None and ctypes.sizeof(value) != size:
            raise ArgumentError(
                f"{label}: {type(value).__name__} is {ctypes.sizeof(value)} bytes, the parameter is {size}"
            )
        return value
    if isinstance(value, bool):
        width = size or 1
        return _INT_CTYPES.get(width, ctypes.c_int8)(int(value))
    if isinstance(value, int):
        # Without parameter info 8 bytes are stored: the driver copies only the declared width, so on
        # little-endian hosts an int32 parameter still reads the right value.
        width = size or 8
        if width not in _INT_CTYPES:
            raise ArgumentError(f"{label}: cannot pass an int to a {width}-byte parameter")
        lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width)) - 1
        if not lo <= value <= hi:
            raise ArgumentError(f"{label}: {value} does not fit the {width}-byte kernel parameter")
        return (_INT_CTYPES if value < (1 << (8 * width - 1)) else _UINT_CTYPES)[width](value)
    if isinstance(value, float):
        if size in (None, 4):
            return ctypes.c_float(value)
        if size == 8:
            return ctypes.c_double(value)
        raise ArgumentError(f"{label}: cannot pass a float to a {size}-byte parameter")
    if isinstance(value, (bytes, bytearray)):  # raw parameter bytes (a struct passed by value)
        if size is not None and len(value) != size:
            raise ArgumentError(f"{label}: {len(value)} raw bytes for a {size}-byte parameter")
        return ctypes.create_string_buffer(bytes(value), len(value))
    raise ArgumentError(f"{label}: cannot pass a {type(value).__module__}.{type(value).__qualname__} to a kernel")


def _pack_args(kernel: Kernel, args: Sequence[Any], names: Sequence[str] | None) -> _Packed:
    params = kernel.params()
    if params is not None and len(params) != len(args):
        raise ArgumentError(f"kernel {kernel.name} takes {len(params)} parameters, got {len(args)} arguments")
    values = []
    for i, a in enumerate(args):
        label = f"argument {names[i]}" if names is not None and i < len(names) else f"argument #{i}"
        values.append(_pack_one(a, params[i].size if params is not None else None, label, kernel.device))
    return _Packed(values)


def _stream_handle(stream: Any, args: Sequence[Any], device: int) -> int:
    if stream is None:
        return current_stream(args, device)
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):  # CUDA stream protocol: (version, handle)
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)  # driver.CUstream


# --------------------------------------------------------------------------------------------------
# TMA descriptors

_TMA_DTYPES = {
    "bf16": "BFLOAT16",
    "f16": "FLOAT16",
    "f32": "FLOAT32",
    "f64": "FLOAT64",
    "i32": "INT32",
    "i64": "INT64",
    "u8": "UINT8",
    "u16": "UINT16",
    "u32": "UINT32",
    "f8e4m3": "UINT8",  # TMA moves bytes: fp8 travels as 8-bit integers
    "f8e5m2": "UINT8",
}
_SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}


def make_tensor_map_2d(ptr: Any, dtype: str, shape: Sequence[int], strides_bytes: Sequence[int],
                       box: Sequence[int], swizzle: int | str = 0, **options: Any) -> Any:
    """A ``CUtensorMap`` for TMA tiled copies of a row-major 2D tensor (``make_tensor_map`` of rank 2):
    ``shape`` = (rows, cols), ``strides_bytes`` = (row stride, element size), ``box`` = (box rows, box
    cols). Pass the result as a kernel argument for a ``const __grid_constant__ CUtensorMap`` parameter.
    """
    if len(shape) != 2 or len(strides_bytes) != 2 or len(box) != 2:
        raise ArgumentError("tensor map: make_tensor_map_2d takes 2-D shape, strides and box")
    return make_tensor_map(ptr, dtype, shape, strides_bytes, box, swizzle, **options)


def make_tensor_map(
    ptr: Any,
    dtype: str,
    shape: Sequence[int],
    strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle: int | str = 0,
    *,
    l2_promotion: int = 128,
    oob_nan: bool = False,
) -> Any:
    """A ``CUtensorMap`` over a row-major tensor of rank 1..5 (numpy order: outermost axis first).

    ``strides_bytes`` has one entry per axis, the last being the element size (the inner axis must be
    contiguous); ``box`` is the tile one copy moves (1 along axes the copy indexes). Out-of-bounds
    elements of a box read as zero (NaN with ``oob_nan``).
    """
    driver = _driver()
    if is_array(ptr):
        ptr = array_info(ptr, name="tensor map base").ptr
    ptr = int(ptr)
    dt = dtype_name(dtype)
    if dt not in _TMA_DTYPES:
        raise ArgumentError(f"tensor map: unsupported dtype {dt} (supported: {', '.join(_TMA_DTYPES)})")
    item = ITEMSIZE[dt]
    if isinstance(swizzle, str):
        s = swizzle.strip().upper().removesuffix("B")
        swizzle = 0 if s in ("NONE", "0", "") else int(s)
    if swizzle not in _SWIZZLES:
        raise ArgumentError(f"tensor map: swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}")
    shape, strides, box = [int(v) for v in shape], [int(v) for v in strides_bytes], [int(v) for v in box]
    rank = len(shape)
    problems = []
    if not 1 <= rank <= 5 or len(strides) != rank or len(box) != rank:
        raise ArgumentError(f"tensor map: rank {rank} with {len(strides)} strides and a {len(box)}-D box "
                            "(ranks 1..5, one stride and one box extent per axis)")
    if ptr % 16:
        problems.append(f"base address {ptr:#x} is not 16-byte aligned")
    if any(n < 1 or n > 1 << 32 for n in shape):
        problems.append(f"shape {tuple(shape)} must be within 1..2^32")
    if strides[-1] != item:
        problems.append(f"the inner dim must be contiguous (stride {item} B for {dt}), got {strides[-1]} B")
    for ax, st in enumerate(strides[:-1]):
        if st % 16 or st <= 0 or st >= 1 << 40:
            what = "row stride" if ax == rank - 2 else f"axis {ax} stride"
            problems.append(f"{what} {st} B must be a positive multiple of 16 below 2^40")
    if any(not 1 <= b <= 256 for b in box):
        problems.append(f"box {tuple(box)} must be within 1..256 per dim")
    if (box[-1] * item) % 16:
        problems.append(f"box inner size {box[-1] * item} B must be a multiple of 16 B")
    if swizzle and box[-1] * item > swizzle:
        problems.append(f"box inner size {box[-1] * item} B exceeds the {swizzle} B swizzle span")
    if problems:
        raise ArgumentError("tensor map: " + "; ".join(problems))

    _init()
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    promo = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[l2_promotion]
    fill = "NAN_REQUEST_ZERO_FMA" if oob_nan else "NONE"
    return _check(
        driver.cuTensorMapEncodeTiled(
            getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_DTYPES[dt]}"),
            rank,
            ptr,
            [u64(n) for n in reversed(shape)],  # the driver wants the innermost dim first
            [u64(st) for st in reversed(strides[:-1])],  # strides of dims 1.. only: dim 0 is dense
            [u32(b) for b in reversed(box)],
            [u32(1)] * rank,
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{_SWIZZLES[swizzle]}"),
            getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promo}"),
            getattr(driver.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{fill}"),
        ),
        "cuTensorMapEncodeTiled",
        f"{dt}{list(shape)} strides {strides} B, box {tuple(box)}, swizzle {swizzle}",
    )


def tensor_map_bytes(tmap: Any) -> bytes:
    """The 128 raw bytes of a CUtensorMap (for hashing or passing through a struct)."""
    return bytes(struct.pack("<16Q", *(int(v) for v in tmap.opaque)))
