"""Arithmetic on 8- and 16-bit integer tiles wraps to the element type in the generated code as in the
interpreter (C would compute an i8 product in int: 100 * 100 = 10000 there, 16 in the interpreter), and
the float64 / int64 reference is the mathematical value, so a kernel that multiplies in i8 fails its test."""

from __future__ import annotations

import numpy as np
import pytest

from argus.dsl.parser import parse
from argus.interp.machine import execute
from argus.interp.run import make_arrays
from argus.ir.build import build_source
from argus.verification import verify_kernel

from . import cpusim

SRC = """
kernel narrow(A: i8[M, N], B: i8[M, N], P: i32[M, N], S: i32[M, N]):
    param BM = 16
    param BN = 64
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    bm = block_id(0)
    bn = block_id(1)
    a = load(A[bm * BM : +BM, bn * BN : +BN])
    b = load(B[bm * BM : +BM, bn * BN : +BN])
    store(P[bm * BM : +BM, bn * BN : +BN], cast(a * b, i32))
    store(S[bm * BM : +BM, bn * BN : +BN], cast(-(a + b), i32))
reference:
    P = A * B
    S = -(A + B)
"""


def _arrays(m: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(m, n)).astype(np.int8)
    a[0, 0], a[0, 1] = 100, -128
    b = rng.integers(-128, 128, size=(m, n)).astype(np.int8)
    b[0, 0], b[0, 1] = 100, 0
    return {"A": a, "B": b, "P": np.full((m, n), -1, np.int32), "S": np.full((m, n), -1, np.int32)}


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
def test_generated_code_wraps_as_the_interpreter() -> None:
    k = build_source(SRC, {}, path="<narrow>")
    dims = {"M": 20, "N": 70}
    ours, theirs = _arrays(20, 70), _arrays(20, 70)
    execute(k, ours, dims)
    cpusim.run(k, theirs, dims)
    assert ours["P"][0, 0] == 16 and ours["S"][0, 1] == -128  # i8: 10000 mod 256, -(-128) wraps
    np.testing.assert_array_equal(ours["P"], theirs["P"])
    np.testing.assert_array_equal(ours["S"], theirs["S"])


def test_i8_inputs_span_their_range_and_the_reference_does_not_wrap() -> None:
    k = build_source(SRC, {}, path="<narrow>")
    arrays = make_arrays(k, {"M": 64, "N": 64}, np.random.default_rng(1))
    assert arrays["A"].min() < -100 and arrays["A"].max() > 100
    (v,) = [verify_kernel(x, {}, file="<narrow>") for x in parse(SRC, "<narrow>").kernels]
    assert v.status == "violated" and not v.report.tested.ok  # the i8 product overflows


MINMAX = """
kernel minmax(A: i8[M, N], B: i16[M, N], Amin: i8[M], Amax: i8[M], Bmin: i16[M], Bmax: i16[M]):
    param BM = 4
    param BN = 128
    launch grid=(cdiv(M, BM),), threads=128
    assume(N <= BN)
    r0 = block_id(0) * BM
    valid = (arange(BN) < N)[None, :]
    a = select(valid, load(A[r0 : +BM, 0 : +BN]), load(A[r0 : +BM, 0 : +1]))
    b = select(valid, load(B[r0 : +BM, 0 : +BN]), load(B[r0 : +BM, 0 : +1]))
    store(Amin[r0 : +BM], min(a, axis=1))
    store(Amax[r0 : +BM], max(a, axis=1))
    store(Bmin[r0 : +BM], min(b, axis=1))
    store(Bmax[r0 : +BM], max(b, axis=1))
reference:
    Amin = min(A, axis=1)
    Amax = max(A, axis=1)
    Bmin = min(B, axis=1)
    Bmax = max(B, axis=1)
"""


def minmax_arrays() -> dict[str, np.ndarray]:
    """6 rows of 100: row 0 all negative, row 1 all positive, the rest over the whole range."""
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(6, 100)).astype(np.int8)
    b = rng.integers(-32768, 32768, size=(6, 100)).astype(np.int16)
    a[0], b[0] = rng.integers(-128, 0, size=100), rng.integers(-32768, 0, size=100)
    a[1], b[1] = rng.integers(1, 128, size=100), rng.integers(1, 32768, size=100)
    outs = {"Amin": np.int8, "Amax": np.int8, "Bmin": np.int16, "Bmax": np.int16}
    return {"A": a, "B": b, **{n: np.zeros(6, t) for n, t in outs.items()}}


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
def test_narrow_min_max_start_from_their_type_range() -> None:
    """An i8 / i16 max starts from the type's least value: i32's -2^31 truncates to 0 in an i8 register,
    so a row of negative values came out 0 (and a min of positive values -1)."""
    k = build_source(MINMAX, {}, path="<minmax>")
    arrays = minmax_arrays()
    a, b = arrays["A"], arrays["B"]
    cpusim.run(k, arrays, {"M": 6, "N": 100})
    np.testing.assert_array_equal(arrays["Amax"], a.max(axis=1))
    np.testing.assert_array_equal(arrays["Amin"], a.min(axis=1))
    np.testing.assert_array_equal(arrays["Bmax"], b.max(axis=1))
    np.testing.assert_array_equal(arrays["Bmin"], b.min(axis=1))
    assert arrays["Amax"][0] < 0 and arrays["Amin"][1] > 0
