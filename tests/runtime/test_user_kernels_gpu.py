"""The kernels new users wrote (tests/codegen/user_kernels) on the GPU: generated CUDA against the float64
reference at the dims their CPU test uses (none a tile multiple), fresh inputs, outputs poisoned. The CPU
test runs them on the emulator of the generated code where it can (no wgmma there); this runs every one on
the hardware. And 8-bit integer arithmetic wraps on the GPU as in the interpreter. Marked `gpu`."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver")

import argus  # noqa: E402
from tests.codegen.test_narrow_ints import (  # noqa: E402
    MINMAX,
    _arrays,  # noqa: E402
    minmax_arrays,
)
from tests.codegen.test_narrow_ints import SRC as NARROW  # noqa: E402
from tests.codegen.test_user_kernels import HERE, IDS, KERNELS  # noqa: E402
from tests.runtime.test_driver_gpu import gpu  # noqa: E402
from tests.runtime.test_ops_gpu import _check, _gpu_kernel  # noqa: E402


@gpu
@pytest.mark.parametrize(("file", "name", "dims", "loose"), KERNELS, ids=IDS)
def test_user_kernel_on_gpu(file: str, name: str, dims: dict, loose: tuple) -> None:
    k = argus.load(HERE / file, name).lower()
    from argus.dsl.types import DTYPES

    _check(k, dims, seed=11, criteria={o: DTYPES["bf16"] for o in loose})


@gpu
def test_narrow_integer_arithmetic_wraps_on_gpu() -> None:
    import torch

    from argus.interp.machine import execute
    from argus.ir.build import build_source
    from argus.runtime.bench import to_device

    k = build_source(NARROW, {}, path="<narrow>")
    dims = {"M": 20, "N": 70}
    host = _arrays(20, 70)
    execute(k, host, dims)
    dev = {n: to_device(a, t.dtype.name) for t in k.tensors for n, a in _arrays(20, 70).items() if n == t.name}
    _gpu_kernel(k)(**dev)
    torch.cuda.synchronize()
    for o in ("P", "S"):
        np.testing.assert_array_equal(dev[o].cpu().numpy(), host[o])


@gpu
def test_narrow_min_max_on_gpu() -> None:
    """i8 / i16 row min and max of all-negative and all-positive rows (the reductions' starting values
    truncated to 0 and -1 in the narrow registers before 2026-12-04)."""
    import torch

    from argus.ir.build import build_source
    from argus.runtime.bench import to_device

    k = build_source(MINMAX, {}, path="<minmax>")
    host = minmax_arrays()
    dev = {n: to_device(a, t.dtype.name) for t in k.tensors for n, a in minmax_arrays().items() if n == t.name}
    _gpu_kernel(k)(**dev)
    torch.cuda.synchronize()
    a, b = host["A"], host["B"]
    for o, want in (("Amin", a.min(1)), ("Amax", a.max(1)), ("Bmin", b.min(1)), ("Bmax", b.max(1))):
        np.testing.assert_array_equal(dev[o].cpu().numpy(), want)
