"""Driver-API loading and launching, array interop, TMA descriptors.

Tests marked ``gpu`` need an NVIDIA GPU and skip without one (``detect_arch() is None``); the rest
(argument validation, DLPack parsing, tensor-map checks) run anywhere.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver")

from argus.codegen.nvrtc import compile_cuda, detect_arch  # noqa: E402
from argus.codegen.resources import kernel_resources  # noqa: E402
from argus.runtime import driver as drv  # noqa: E402
from argus.runtime.arrays import (  # noqa: E402
    ArgumentError,
    ShapeBindings,
    array_info,
    check_array,
)

ARCH = detect_arch()
_needs_gpu = pytest.mark.skipif(ARCH is None, reason="no CUDA GPU / driver on this machine")


def gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    return pytest.mark.gpu(_needs_gpu(fn))


ADD_SRC = r"""
extern "C" __global__ void vadd(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
"""

AXPY_BF16_SRC = r"""
#include <cuda_bf16.h>
extern "C" __global__ void axpy_bf16(const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* out,
                                     float alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(alpha * __bfloat162float(x[i]) + __bfloat162float(y[i]));
}
"""

# One TMA box per block, landed in shared memory, then written out un-swizzled: the output is the
# input zero-padded to whole boxes. SWZ_MASK undoes the TMA swizzle (16-byte chunk index XOR row bits).
TMA_SRC = r"""
#include <cuda_bf16.h>
struct alignas(64) TmaDesc { unsigned long long v[16]; };
extern "C" __global__ void tma_load_2d(const __grid_constant__ TmaDesc desc, ELEM* out, int out_cols) {
  __shared__ alignas(1024) ELEM tile[BOX_R * BOX_C];
  __shared__ alignas(8) unsigned long long bar;
  unsigned bar_a = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned tile_a = (unsigned)__cvta_generic_to_shared(tile);
  int x0 = blockIdx.x * BOX_C, y0 = blockIdx.y * BOX_R;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_a) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar_a), "r"((int)(BOX_R * BOX_C * sizeof(ELEM))) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(tile_a), "l"((unsigned long long)&desc), "r"(x0), "r"(y0), "r"(bar_a) : "memory");
  }
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar_a), "r"(0) : "memory");
  }
  for (int i = threadIdx.x; i < BOX_R * BOX_C; i += blockDim.x) {
    int r = i / BOX_C, c = i % BOX_C;
    unsigned off = (unsigned)((r * BOX_C + c) * sizeof(ELEM));
    off ^= ((off >> 7) & SWZ_MASK) << 4;
    out[(size_t)(y0 + r) * out_cols + x0 + c] = *(const ELEM*)((const char*)tile + off);
  }
}
"""

BIG_SMEM_SRC = r"""
extern "C" __global__ void big_smem(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = 2.0f * in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
"""

CLUSTER_SRC = r"""
extern "C" __global__ void cluster_ids(int* out) {
  unsigned rank, cid;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
  if (threadIdx.x == 0) { out[2 * blockIdx.x] = (int)rank; out[2 * blockIdx.x + 1] = (int)cid; }
}
"""

WGMMA_SRC = r"""
#include <cuda_bf16.h>
__device__ inline unsigned long long smem_desc(const void* p, unsigned lbo, unsigned sbo) {
  unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
       | ((unsigned long long)(sbo >> 4) << 32);
}
// A: 64x16 row-major, B: 8x16 (N x K), D: 64x8 f32 = A @ B^T
extern "C" __global__ void wgmma_m64n8k16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ alignas(128) __nv_bfloat16 sA[64 * 16];
  __shared__ alignas(128) __nv_bfloat16 sB[8 * 16];
  int t = threadIdx.x;
  for (int i = t; i < 64 * 16; i += 128) {
    int r = i / 16, c = i % 16;
    sA[((r/8)*2 + c/8)*64 + (r%8)*8 + c%8] = A[i];
  }
  for (int i = t; i < 8 * 16; i += 128) {
    int n = i / 16, c = i % 16;
    sB[((n/8)*2 + c/8)*64 + (n%8)*8 + c%8] = B[i];
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  unsigned long long da = smem_desc(sA, 128, 256), db = smem_desc(sB, 128, 256);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  int warp = t / 32, lane = t % 32, row = warp * 16 + lane / 4, col = (lane % 4) * 2;
  D[row*8 + col] = d0; D[row*8 + col + 1] = d1; D[(row+8)*8 + col] = d2; D[(row+8)*8 + col + 1] = d3;
}
"""


def _load(src: str, kernel: str, options: tuple[str, ...] = ()) -> drv.Kernel:
    assert ARCH is not None
    result = compile_cuda(src, name=kernel, arch=ARCH, options=options)
    return drv.load_module(result).kernel(kernel)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------------
# CPU: arrays, validation, packing (no GPU needed)


class _FakeCAI:
    """A device array seen only through __cuda_array_interface__ (pointer never dereferenced)."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", strides: Any = None) -> None:
        self.__cuda_array_interface__ = {
            "data": (0x7F0000000000, False),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


def test_dlpack_parsing_on_host_array() -> None:
    a = np.zeros((6, 8), dtype=np.float32)[:, ::2]
    info = array_info(a, allow_host=True)
    assert (info.dtype, info.shape, info.strides, info.device, info.kind) == ("f32", (6, 4), (8, 2), -1, "dlpack")
    assert info.ptr == a.ctypes.data and not info.is_contiguous
    with pytest.raises(ArgumentError, match="argument a: expected an array on a CUDA device"):
        array_info(a, name="a")


def test_not_an_array() -> None:
    with pytest.raises(ArgumentError, match="argument x: expected a CUDA array"):
        array_info([1, 2, 3], name="x")


def test_check_array_messages() -> None:
    b = _FakeCAI((64, 32))
    with pytest.raises(ArgumentError) as e:
        check_array(b, name="B", dtype="bf16", shape=("K", "N"), device=0)
    assert e.value.message == "argument B: expected bf16[K, N] contiguous on cuda:0, got f32[64, 32] on cuda:0"

    dims = ShapeBindings()
    check_array(_FakeCAI((128, 64)), name="A", dtype="f32", shape=("M", "K"), dims=dims)
    assert dims == {"M": 128, "K": 64}
    with pytest.raises(ArgumentError, match=r"got f32\[32, 16\] on cuda:0 \(K is 64 from argument A\)"):
        check_array(_FakeCAI((32, 16)), name="B", dtype="f32", shape=("K", "N"), dims=dims)
    with pytest.raises(ArgumentError, match=r"\(3 dims instead of 2\)"):
        check_array(_FakeCAI((2, 3, 4)), name="C", shape=("M", "N"), dims=dims)
    strided = _FakeCAI((64, 16), strides=(128, 4))
    with pytest.raises(ArgumentError, match="non-contiguous"):
        check_array(strided, name="D", dtype="f32", shape=(64, 16))
    assert check_array(strided, name="D", dtype="f32", shape=(64, None), contiguous=False).strides == (32, 1)


def test_pack_scalars_to_declared_width() -> None:
    pack = drv._pack_one
    assert isinstance(pack(7, 4, "argument n", 0), ctypes.c_int32)
    assert isinstance(pack(7, 8, "argument n", 0), ctypes.c_int64)
    assert isinstance(pack(3 << 30, 4, "argument n", 0), ctypes.c_uint32)
    assert isinstance(pack(1.5, 4, "argument a", 0), ctypes.c_float)
    assert isinstance(pack(1.5, 8, "argument a", 0), ctypes.c_double)
    assert bytes(pack(np.float16(1.0), 2, "argument h", 0)) == np.float16(1.0).tobytes()
    with pytest.raises(ArgumentError, match="does not fit the 4-byte"):
        pack(1 << 40, 4, "argument n", 0)
    with pytest.raises(ArgumentError, match="f32 scalar is 4 bytes, the parameter is 8"):
        pack(np.float32(1), 8, "argument x", 0)
    with pytest.raises(ArgumentError, match="cannot pass a builtins.str"):
        pack("x", None, "argument s", 0)


def test_tensor_map_rejects_bad_layouts_before_the_driver() -> None:
    ok = dict(dtype="bf16", shape=(64, 64), strides_bytes=(128, 2), box=(16, 64))
    with pytest.raises(ArgumentError, match="not 16-byte aligned"):
        drv.make_tensor_map_2d(0x1008, **ok)
    with pytest.raises(ArgumentError, match="inner dim must be contiguous"):
        drv.make_tensor_map_2d(0x1000, "bf16", (64, 64), (256, 4), (16, 64))
    with pytest.raises(ArgumentError, match="exceeds the 64 B swizzle span"):
        drv.make_tensor_map_2d(0x1000, swizzle=64, **ok)
    with pytest.raises(ArgumentError, match="swizzle must be"):
        drv.make_tensor_map_2d(0x1000, swizzle=16, **ok)
    with pytest.raises(ArgumentError, match="row stride 100 B"):
        drv.make_tensor_map_2d(0x1000, "f32", (8, 25), (100, 4), (8, 8))
    # rank 3 (a batch of matrices, the batch axis indexed: box extent 1 there)
    with pytest.raises(ArgumentError, match="axis 0 stride 1000 B"):
        drv.make_tensor_map(0x1000, "bf16", (4, 64, 64), (1000, 128, 2), (1, 16, 64))
    with pytest.raises(ArgumentError, match="one stride and one box extent per axis"):
        drv.make_tensor_map(0x1000, "bf16", (4, 64, 64), (128, 2), (1, 16, 64))


# ----------------------------------------------------------------------------------------------
# GPU


@gpu
def test_detect_arch_on_gpu() -> None:
    assert ARCH is not None and ARCH.startswith("sm_")
    major = drv.device_attribute("COMPUTE_CAPABILITY_MAJOR")
    if major == 9:
        assert ARCH == "sm_90a"


@gpu
def test_vector_add_cupy() -> None:
    cp = pytest.importorskip("cupy")
    n = 10_000
    x = cp.arange(n, dtype=cp.float32)
    y = cp.full(n, 0.5, dtype=cp.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    k = _load(ADD_SRC, "vadd")
    k.launch(_cdiv(n, 256), 256, (x, y, out, n))
    cp.cuda.get_current_stream().synchronize()
    assert cp.array_equal(out, x + y)
    info = array_info(out)
    assert (info.kind, info.dtype, info.shape, info.device) == ("cupy", "f32", (n,), 0)


@gpu
def test_vector_add_torch_bf16_on_current_stream() -> None:
    torch = pytest.importorskip("torch")
    n = 4097
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    k = _load(AXPY_BF16_SRC, "axpy_bf16")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y were made on the default stream
    with torch.cuda.stream(s):
        k(x, y, out, 2.0, n, grid=_cdiv(n, 128), block=128)  # picks up torch's current stream
    s.synchronize()
    ref = (2.0 * x.float() + y.float()).to(torch.bfloat16)
    assert torch.equal(out, ref)
    # numpy scalars carry their own width; a plain float goes to the declared f32 param.
    k.launch(_cdiv(n, 128), 128, (x, y, out, np.float32(-1.0), np.int32(n)))
    torch.cuda.synchronize()
    assert torch.equal(out, (-x.float() + y.float()).to(torch.bfloat16))


@gpu
def test_dlpack_only_object() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(12, device="cuda", dtype=torch.float16).reshape(3, 4)[:, 1:]

    class OnlyDLPack:
        def __dlpack__(self, **kw: Any) -> Any:
            return t.__dlpack__(**kw)

        def __dlpack_device__(self) -> Any:
            return t.__dlpack_device__()

    info = array_info(OnlyDLPack())
    assert info.kind == "dlpack" and info.ptr == t.data_ptr()
    assert (info.dtype, info.shape, info.strides, info.device) == ("f16", (3, 3), (4, 1), 0)


@pytest.mark.parametrize(
    "dtype,swizzle,box_rows,box_cols,rows,cols",
    [
        ("f32", 0, 32, 32, 100, 72),  # ragged edges: out-of-bounds box elements must read as zero
        ("bf16", 32, 16, 16, 40, 40),
        ("bf16", 64, 16, 32, 40, 72),
        ("bf16", 128, 16, 64, 40, 136),
    ],
)
@gpu
def test_tma_2d_copy(dtype: str, swizzle: int, box_rows: int, box_cols: int, rows: int, cols: int) -> None:
    torch = pytest.importorskip("torch")
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    ctype = {"f32": "float", "bf16": "__nv_bfloat16"}[dtype]
    inp = (torch.arange(rows * cols, device="cuda", dtype=torch.float32) % 251).to(tdt).reshape(rows, cols)
    grid = (_cdiv(cols, box_cols), _cdiv(rows, box_rows))
    out = torch.full((grid[1] * box_rows, grid[0] * box_cols), -1.0, device="cuda", dtype=tdt)
    opts = (f"-DELEM={ctype}", f"-DBOX_R={box_rows}", f"-DBOX_C={box_cols}", f"-DSWZ_MASK={max(swizzle // 16 - 1, 0)}")
    k = _load(TMA_SRC, "tma_load_2d", opts)
    tmap = drv.make_tensor_map_2d(
        inp, dtype, (rows, cols), (inp.stride(0) * inp.element_size(), inp.element_size()),
        (box_rows, box_cols), swizzle,
    )  # fmt: skip
    k.launch(grid, 128, (tmap, out, out.shape[1]))
    torch.cuda.synchronize()
    ref = torch.zeros_like(out)
    ref[:rows, :cols] = inp
    assert torch.equal(out, ref)


@gpu
def test_dynamic_smem_above_48k() -> None:
    torch = pytest.importorskip("torch")
    n = 100 * 1024 // 4
    inp = torch.randn(n, device="cuda")
    out = torch.empty_like(inp)
    k = _load(BIG_SMEM_SRC, "big_smem")
    k.launch(1, 256, (inp, out, n), smem=n * 4)  # sets MAX_DYNAMIC_SHARED_SIZE_BYTES itself
    torch.cuda.synchronize()
    assert torch.equal(out, (2 * inp).flip(0))
    assert k.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES") == n * 4
    limit = drv.device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    with pytest.raises(drv.LaunchError, match="exceeds"):
        k.launch(1, 256, (inp, out, n), smem=limit + 1024)


@gpu
def test_cluster_launch() -> None:
    torch = pytest.importorskip("torch")
    if drv.device_attribute("COMPUTE_CAPABILITY_MAJOR") < 9:
        pytest.skip("clusters need sm_90+")
    out = torch.full((16,), -1, device="cuda", dtype=torch.int32)
    k = _load(CLUSTER_SRC, "cluster_ids")
    k.launch(8, 32, (out,), cluster=(2, 1, 1))
    torch.cuda.synchronize()
    ids = out.view(8, 2).cpu()
    assert ids[:, 0].tolist() == [0, 1] * 4
    assert ids[:, 1].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(drv.LaunchError, match="not a multiple of cluster"):
        k.launch(7, 32, (out,), cluster=2)


@gpu
def test_wgmma_numerics() -> None:
    torch = pytest.importorskip("torch")
    if ARCH != "sm_90a":
        pytest.skip("wgmma needs sm_90a")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(64, 16, device="cuda", generator=g).to(torch.bfloat16)
    bt = torch.randn(8, 16, device="cuda", generator=g).to(torch.bfloat16)
    d = torch.full((64, 8), float("nan"), device="cuda")
    _load(WGMMA_SRC, "wgmma_m64n8k16").launch(1, 128, (a, bt, d))
    torch.cuda.synchronize()
    ref = a.double() @ bt.double().T
    assert (torch.linalg.norm(d.double() - ref) / torch.linalg.norm(ref)).item() < 1e-5


@gpu
def test_resources_match_the_driver() -> None:
    assert ARCH is not None
    result = compile_cuda(WGMMA_SRC, name="wgmma", arch=ARCH)
    res = kernel_resources(result)["wgmma_m64n8k16"]
    k = drv.load_module(result).kernel("wgmma_m64n8k16")
    assert k.num_regs == res.registers
    # The driver may count the 1 KiB that sm_90 reserves per block; ptxas does not.
    assert k.static_smem_bytes - res.static_smem_bytes in (0, 1024)
    assert k.attribute("LOCAL_SIZE_BYTES") == res.stack_frame_bytes


@gpu
def test_launch_argument_errors() -> None:
    torch = pytest.importorskip("torch")
    k = _load(ADD_SRC, "vadd")
    x = torch.zeros(8, device="cuda")
    with pytest.raises(ArgumentError, match="kernel vadd takes 4 parameters, got 3 arguments"):
        k.launch(1, 32, (x, x, x))
    with pytest.raises(ArgumentError, match="argument #1: expected a CUDA tensor, got a tensor on cpu"):
        k.launch(1, 32, (x, torch.zeros(8), x, 8))
    with pytest.raises(ArgumentError, match="argument y: expected a CUDA tensor"):
        k.launch(1, 32, (x, torch.zeros(8), x, 8), arg_names=("x", "y", "out", "n"))
    with pytest.raises(ArgumentError, match="the kernel parameter is 4 bytes, not a pointer"):
        k.launch(1, 32, (x, x, x, x))
    with pytest.raises(drv.LaunchError, match="at most 1024"):
        k.launch(1, 2048, (x, x, x, 8))
    with pytest.raises(KeyError, match=r"no kernel 'nope' .*it has: vadd"):
        k.module.kernel("nope")
    with pytest.raises(ArgumentError) as e:
        check_array(torch.zeros(64, 32, device="cuda"), name="B", dtype="bf16", shape=("K", "N"), device=0)
    assert e.value.message == "argument B: expected bf16[K, N] contiguous on cuda:0, got f32[64, 32] on cuda:0"
    # Nothing above reached the GPU in a broken state: a correct launch still works.
    k.launch(1, 32, (x, x, x, 8))
    drv.synchronize()


@gpu
def test_driver_errors_carry_the_cuda_name() -> None:
    with pytest.raises(drv.CudaError, match="cuModuleLoadData failed: CUDA_ERROR_") as e:
        drv.Module(b"not a cubin, nor PTX", name="junk")  # JIT parse error, not a malformed ELF
    assert e.value.name.startswith("CUDA_ERROR_")
