"""Repeated GPU calls on the CPU: argus.runtime.launch reuses a checked launch per argument layout.

No GPU here: the kernel is compiled with NVRTC (as CI does), the driver function it would launch is a
recorder, and the arrays are stand-ins that look like CUDA torch tensors to argus.runtime.arrays. What
is checked is the bookkeeping the GPU test (test_launch.py, test_repeated_calls_swap_in_each_calls_arrays)
checks end to end: every call launches with its own addresses, a tensor map is re-encoded when its
tensor moved and only then, scalars are part of the layout, and a changed shape is checked again.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

pytest.importorskip("cuda.bindings.driver")

from argus.codegen.compile import build  # noqa: E402
from argus.ir.build import build_file, build_source  # noqa: E402
from argus.runtime import driver as drv  # noqa: E402
from argus.runtime import launch as L  # noqa: E402
from argus.runtime.arrays import ArgumentError  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402


class FakeTensor:
    """What argus.runtime.arrays reads of a CUDA torch tensor (never dereferenced)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str = "bfloat16") -> None:
        self._ptr, self.shape, self.dtype = ptr, shape, dtype
        self.device = SimpleNamespace(type="cuda", index=0)

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self) -> tuple[int, ...]:
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))


FakeTensor.__module__ = "torch.fake"  # module_root() == "torch"


class Recorder:
    """The driver kernel: records each launch's parameter values."""

    device = 0
    name = "recorded"
    max_threads_per_block = 1024
    static_smem_bytes = 0

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def params(self):
        return None

    def launch(self, grid, block, args, *, smem=0, stream=None, cluster=None, arg_names=None) -> None:
        self.calls.append(("launch", [_value(a) for a in args]))

    def enqueue(self, grid, block, smem, stream, packed) -> None:
        self.calls.append(("enqueue", [_value(v) for v in packed._values]))


def _value(v):
    if isinstance(v, ctypes._SimpleCData):
        return v.value
    if isinstance(v, ctypes.Array):  # a scalar packed as raw bytes
        return bytes(v)
    return v


@pytest.fixture
def encoded(monkeypatch):
    """make_tensor_map stands in: a tensor map is its address (as a ctypes value the packer accepts)."""
    seen: list[int] = []

    def fake(ptr, *rest, **kw):
        seen.append(int(ptr))
        return ctypes.c_uint64(int(ptr))

    monkeypatch.setattr(drv, "make_tensor_map", fake)
    # the stand-ins look like torch tensors: with torch installed (a CPU build in CI) the launch would ask
    # torch for its current CUDA stream; the recorder launches on stream 0
    monkeypatch.setattr(drv, "current_stream", lambda args, device=0: 0)
    return seen


def _gpu_kernel(kernel) -> tuple[L.GpuKernel, Recorder]:
    gk = L.GpuKernel.__new__(L.GpuKernel)
    gk.built, gk.device, gk.module = build(kernel, arch="sm_90a"), 0, None
    gk.fn = Recorder()
    gk._plans = {}
    return gk, gk.fn


def test_each_call_launches_on_its_own_arrays(encoded) -> None:
    gk, rec = _gpu_kernel(build_file(EXAMPLES / "gemm_ws.arg", {"SMS": 5}))
    M, N, K = 200, 136, 264
    b = FakeTensor(0x20000, (K, N))
    for i, base in enumerate((0x100000, 0x200000, 0x100000)):
        a, c = FakeTensor(base, (M, K)), FakeTensor(base + 0x80000, (M, N))
        gk(a, b, c)
        kind, values = rec.calls[-1]
        assert kind == ("launch" if i == 0 else "enqueue")
        names = [p.arg for p in gk.generated.params]
        for v, p in zip(values, gk.generated.params):
            if p.kind == "tensor" or p.kind not in ("stride", "dim", "scalar"):  # pointers and tensor maps
                assert v == {"A": base, "B": 0x20000, "C": base + 0x80000}[p.arg if p.kind == "tensor" else
                                                                           gk.generated.tensor_maps[p.tmap].tensor], \
                    (i, names)
    assert len(gk._plans) == 1
    # B never moved: encoded once; A and C on the first call and again each time they moved
    assert encoded.count(0x20000) == 1


def test_scalars_and_shapes_are_part_of_the_layout(encoded) -> None:
    gk, rec = _gpu_kernel(build_source("""
kernel scale_rows(X: f32[R, C], Y: bf16[R, C], alpha: f32 = 2.0):
    param BR = 32
    launch grid=(cdiv(R, BR),), threads=128
    r = block_id(0)
    x = load(X[r * BR : +BR, 0:+64])
    store(Y[r * BR : +BR, 0:+64], cast(x * alpha, bf16))
"""))
    x, y = FakeTensor(0x1000, (100, 64), "float32"), FakeTensor(0x90000, (100, 64))
    at = next(i for i, p in enumerate(gk.generated.params) if p.kind == "scalar" and p.arg == "alpha")
    for alpha in (2.0, 3.0, 2.0):
        gk(x, y, alpha=alpha)
        assert rec.calls[-1][1][at] == pytest.approx(alpha)
    assert [k for k, _ in rec.calls] == ["launch", "launch", "enqueue"] and len(gk._plans) == 2
    # another shape is checked again: a mismatch is still an error, not a stale launch
    with pytest.raises(ArgumentError, match="argument Y"):
        gk(FakeTensor(0x1000, (50, 64), "float32"), y)
    gk(FakeTensor(0x1000, (50, 64), "float32"), FakeTensor(0x90000, (50, 64)))
    assert rec.calls[-1][0] == "launch" and len(gk._plans) == 3
