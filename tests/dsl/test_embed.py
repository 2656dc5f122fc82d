"""`@argus.kernel` (inline in Python) and `argus.load(path)` use the same grammar and compiler."""

from __future__ import annotations

import numpy as np
import pytest

import argus
from argus.dsl.diagnostics import ArgusError, render
from tests.conftest import EXAMPLES


def test_inline_kernel_runs_in_the_interpreter():
    from tests.dsl import inline_kernels as m

    k = m.scale_rows
    assert isinstance(k, argus.Kernel) and k.name == "scale_rows"
    X = np.random.default_rng(0).standard_normal((80, 64)).astype(np.float32)
    Y = np.full_like(X, np.nan)
    k(X, Y, 3.0)
    np.testing.assert_allclose(Y, X * 3.0, rtol=1e-6)


def test_inline_kernel_errors_point_at_the_python_file():
    from tests.dsl import inline_kernels as m

    with pytest.raises(ArgusError) as info:
        m.broken.lower()
    d = info.value.diagnostics[0]
    assert d.span.path.endswith("inline_kernels.py") and d.span.line == 26 and "undefined name 'Z'" in d.message
    assert "load(Z[0:+BR, 0:+64])" in render(d)


def test_load_with_params_and_interpret():
    k = argus.load(EXAMPLES / "gemm.arg", BM=64, BN=64)
    ir = k.lower()
    assert ir.param_dict["BM"] == 64
    rng = np.random.default_rng(5)
    from argus.interp.numerics import round_bf16

    A = round_bf16(rng.standard_normal((70, 80)).astype(np.float32))
    B = round_bf16(rng.standard_normal((80, 90)).astype(np.float32))
    C = np.full((70, 90), np.nan, np.float32)
    k(A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=2 ** -7, atol=0.05)


def test_interpret_checks_shapes():
    k = argus.load(EXAMPLES / "gemm.arg")
    with pytest.raises(ArgusError, match=r"argument B: expected bf16\[K, N\].*\(K is 5 from argument A\)"):
        k(np.zeros((4, 5), np.float32), np.zeros((6, 4), np.float32), np.zeros((4, 4), np.float32))
