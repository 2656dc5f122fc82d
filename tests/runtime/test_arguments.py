"""argus.runtime.arguments: the NumPy interpreter's argument rules (the GPU's are in test_launch.py)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.ir.build import build_file, build_source
from argus.runtime.arguments import bind_arguments, validate_host
from argus.runtime.arrays import ArgumentError
from tests.conftest import EXAMPLES

MIXED = """\
kernel mixed(X: f16[N], I: i32[N], Y: f32[N], s: i32 = 3):
    launch grid=(cdiv(N, 128),), threads=128
    i = block_id(0)
    store(Y[i * 128 : +128], cast(load(X[i * 128 : +128]), f32) + cast(load(I[i * 128 : +128]), f32))
"""


def test_storage_dtypes_are_accepted_and_others_refused():
    k = build_source(MIXED)
    ok = {"X": np.zeros(5, np.float16), "I": np.zeros(5, np.int32), "Y": np.zeros(5, np.float32)}
    call = validate_host(k, bind_arguments(k, (), ok))
    assert call.dims == {"N": 5} and call.scalars == {"s": 3} and call.write_back == ()
    assert validate_host(k, bind_arguments(k, (), {**ok, "X": np.zeros(5, np.float32)})).dims == {"N": 5}
    with pytest.raises(ArgumentError, match=r"argument I: expected i32\[N\] \(a C-contiguous NumPy int32 array\), "
                       r"got int64\[5\]"):
        validate_host(k, bind_arguments(k, (), {**ok, "I": np.zeros(5, np.int64)}))
    with pytest.raises(ArgumentError, match="argument s: expected a i32 scalar, got 2.5"):
        validate_host(k, bind_arguments(k, (), {**ok, "s": 2.5}))


def test_errors_are_located_at_the_declaration():
    k = build_source(MIXED, path="mixed.arg")
    with pytest.raises(ArgumentError) as info:
        validate_host(k, bind_arguments(k, (), {"X": np.zeros(5, np.float16), "I": np.zeros(6, np.int32),
                                                "Y": np.zeros(5, np.float32)}))
    d = info.value.diagnostics[0]
    assert (d.code, d.span.path, d.span.line, d.span.col) == ("argument", "mixed.arg", 1, 25)
    assert "(N is 5 from argument X)" in d.message


def test_read_only_outputs_and_empty_dims():
    k = build_file(EXAMPLES / "gemm.arg")
    c = np.zeros((4, 4), np.float32)
    c.flags.writeable = False
    args = {"A": np.zeros((4, 8), np.float32), "B": np.zeros((8, 4), np.float32), "C": c}
    with pytest.raises(ArgumentError, match=r"argument C: .*\(read-only, but the kernel writes it\)"):
        validate_host(k, bind_arguments(k, (), args))
    with pytest.raises(ArgumentError, match="dimension K is 0 .*at least 1"):
        validate_host(k, bind_arguments(k, (), {"A": np.zeros((4, 0), np.float32), "B": np.zeros((0, 4), np.float32),
                                                "C": np.zeros((4, 4), np.float32)}))


def test_convert_rounds_inputs_and_writes_outputs_back():
    k = build_source(MIXED)
    y = np.full(3, np.nan)  # float64 output
    args = {"X": np.array([1.0001, 2.0, 3.0]), "I": np.array([1, 2, 3]), "Y": y}
    call = validate_host(k, bind_arguments(k, (), args), convert=True)
    assert call.arrays["X"].dtype == np.float32 and call.arrays["X"][0] == np.float32(np.float16(1.0001))
    assert call.arrays["I"].dtype == np.int32 and call.arrays["Y"] is not y
    call.arrays["Y"][:] = 7.0
    call.finish()
    np.testing.assert_array_equal(y, 7.0)


def test_fast_binding_leaves_malformed_calls_to_the_checked_path():
    """fast_bind / layout_key decide when a GPU call may reuse an earlier call's checks: a call that is
    malformed, or whose arrays or scalars the key cannot describe, gets None (the full, checked path)."""
    from argus.runtime.arguments import fast_bind, layout_key

    k = build_source(MIXED)
    x, i, y = object(), object(), object()
    assert fast_bind(k, (x, i), {"Y": y}) == {"X": x, "I": i, "Y": y, "s": 3}
    assert fast_bind(k, (x, i, y, 4), {}) == {"X": x, "I": i, "Y": y, "s": 4}
    assert fast_bind(k, (x, i), {"Y": y, "t": 1}) is None  # no argument t
    assert fast_bind(k, (x, i), {"I": y, "Y": y}) is None  # I given twice
    assert fast_bind(k, (x, i), {}) is None  # Y missing
    assert fast_bind(k, (x, i, y, 4, 5), {}) is None  # too many
    assert layout_key(k, {"X": x, "I": i, "Y": y, "s": 3}) is None  # not torch / cupy arrays
