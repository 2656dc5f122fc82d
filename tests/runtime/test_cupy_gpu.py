"""cupy arrays (and bare DLPack exporters) on the kernel call path (marker `gpu`): results against float64
references on fresh random inputs, outputs poisoned with NaN, shapes that are not tile multiples; the
same argument checks as torch; the launch on cupy's current stream."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
pytest.importorskip("cuda.bindings.driver")

import argus  # noqa: E402
from argus.dsl.diagnostics import ArgusError  # noqa: E402
from argus.ir.build import build_source  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime.test_driver_gpu import gpu  # noqa: E402

SCALE = """\
kernel scale(X: f32[R, C], Y: f32[R, C], alpha: f32 = 2.0):
    param BR = 32
    param BC = 64
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Y[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * alpha)
reference:
    Y = X * alpha
"""


def _kernel(tmp_path, name: str, text: str, **params: Any) -> argus.Kernel:
    f = tmp_path / name
    f.write_text(text)
    build_source(text, params)  # fails here, not on the GPU, if the text is wrong
    return argus.load(f, **params)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


class DLPackOnly:
    """An array seen only through __dlpack__ / __dlpack_device__ (the generic DLPack path)."""

    def __init__(self, a: Any) -> None:
        self._a = a

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._a.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._a.__dlpack_device__()


@gpu
@pytest.mark.parametrize("r,c", [(333, 517), (64, 64), (1, 1000)])
def test_cupy_elementwise(tmp_path, r, c):
    k = _kernel(tmp_path, "scale.arg", SCALE)
    x = cupy.asarray(np.random.default_rng(r).standard_normal((r, c)).astype(np.float32))
    y = cupy.full((r, c), np.nan, np.float32)
    k(x, y, 3.0)
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_allclose(cupy.asnumpy(y), cupy.asnumpy(x).astype(np.float64) * 3.0, rtol=1e-6)


@gpu
@pytest.mark.parametrize("m,n,k", [(200, 136, 72), (333, 517, 129)])
def test_cupy_f16_gemm(tmp_path, m, n, k):
    text = (EXAMPLES / "gemm.arg").read_text().replace("bf16", "f16")
    kern = _kernel(tmp_path, "gemm_f16.arg", text, MMA="mma.sync")
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = cupy.full((m, n), np.nan, np.float16)
    kern(cupy.asarray(a), cupy.asarray(b), c)
    cupy.cuda.get_current_stream().synchronize()
    got = cupy.asnumpy(c)
    assert np.isfinite(got).all() and _rel(got, a.astype(np.float64) @ b) < 4e-3


@gpu
def test_bf16_through_bare_dlpack():
    torch = pytest.importorskip("torch")
    kern = argus.load(EXAMPLES / "gemm.arg")
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(333, 129, generator=g, device="cuda").to(torch.bfloat16)
    b = torch.randn(129, 200, generator=g, device="cuda").to(torch.bfloat16)
    c = torch.full((333, 200), float("nan"), device="cuda").to(torch.bfloat16)
    kern(DLPackOnly(a), DLPackOnly(b), DLPackOnly(c))
    torch.cuda.synchronize()
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    got = c.float().cpu().numpy()
    assert np.isfinite(got).all() and _rel(got, ref) < 1e-2


@gpu
def test_cupy_argument_errors(tmp_path):
    k = _kernel(tmp_path, "scale.arg", SCALE)
    x = cupy.zeros((64, 96), np.float32)
    y = cupy.zeros((64, 96), np.float32)
    with pytest.raises(ArgusError) as info:
        k(x.astype(np.float64), y)
    assert info.value.message == "argument X: expected f32[R, C] contiguous, got f64[64, 96] on cuda:0"
    assert "scale.arg:1:14" in str(info.value)
    with pytest.raises(ArgusError, match=r"argument Y: .*\(C is 96 from argument X\)"):
        k(x, cupy.zeros((64, 95), np.float32))
    with pytest.raises(ArgusError, match="non-contiguous"):
        k(x, cupy.zeros((96, 64), np.float32).T)
    with pytest.raises(ArgusError, match="argument alpha: expected a f32 scalar"):
        k(x, y, "2")
    with pytest.raises(ArgusError, match=r"argument Y: expected .*NumPy float32 array\), got cupy"):
        k(np.zeros((64, 96), np.float32), y)  # mixing host and device arrays


@gpu
def test_cupy_current_stream(tmp_path):
    """A spin kernel then a copy into X on a side stream, then the Argus kernel: on that stream it reads
    the copied X, on another stream the zeros X held before."""
    k = _kernel(tmp_path, "scale.arg", SCALE)
    spin = cupy.RawKernel(r'''extern "C" __global__ void spin(long long n) {
        long long t0 = clock64(); while (clock64() - t0 < n) {} }''', "spin")
    src = cupy.asarray(np.random.default_rng(3).standard_normal((300, 200)).astype(np.float32))
    x = cupy.zeros_like(src)
    y = cupy.full_like(src, np.nan)
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        spin((1,), (1,), (np.int64(200_000_000),))
        x[...] = src
        k(x, y, 2.0)
    s.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(y), cupy.asnumpy(src) * 2.0, rtol=1e-6)

