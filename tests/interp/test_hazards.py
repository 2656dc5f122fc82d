"""The interpreter's shadow memory observes races, async hazards, double writes and aliasing layouts."""

from __future__ import annotations

import numpy as np

from argus.interp.machine import execute
from argus.interp.run import make_arrays
from argus.ir.build import build_source
from argus.ir.smem_layout import offsets
from tests.interp.test_gemm import manual

DIMS = {"M": 100, "N": 70, "K": 96}


def observe(src: str, dims=DIMS):
    k = build_source(src)
    return execute(k, make_arrays(k, dims, np.random.default_rng(0)), dims, observe_hazards=True)


def test_correct_kernel_has_no_hazards():
    assert observe(manual("wait_async(a_s, b_s)")) == []


def test_missing_barrier_after_wait_is_a_race():
    hz = observe(manual("commit()\n        wait_async(0)"))
    assert {h.code for h in hz} == {"race"}
    h = hz[0]
    assert h.first_thread >= 0 and h.second_thread == -1 and h.first_span.line == 13 and h.second_span.line == 17


def test_missing_wait_is_a_read_before_wait():
    assert {h.code for h in observe(manual("commit()"))} == {"async-read-before-wait"}


def test_missing_trailing_barrier_is_an_overwrite():
    src = manual("wait_async(a_s, b_s)").replace("        barrier()\n    store", "    store")
    assert {h.code for h in observe(src)} == {"async-overwrite"}


def test_reading_shared_memory_no_copy_wrote_is_observed():
    """B copied into stage 0 of a 2-stage buffer while the mma reads stage k % 2: the read of stage 1 sees
    whatever the block's shared memory held (the interpreter's NaN), reported with the element."""
    src = manual("wait_async(a_s, b_s)").replace("b_s = shared(bf16[BK, BN])", "b_s = shared(bf16[2, BK, BN])")
    src = src.replace("copy_async(b_s, B", "copy_async(b_s[0], B").replace("mma(a_s, b_s,", "mma(a_s, b_s[k % 2],")
    hz = [h for h in observe(src) if h.code == "uninitialized-read"]
    assert hz and hz[0].buffer == "b_s" and hz[0].element[0] == 1 and "before any copy" in hz[0].describe()
    assert not [h for h in observe(manual("wait_async(a_s, b_s)")) if h.code == "uninitialized-read"]


def test_double_store_is_observed():
    line = "    store(C[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))"
    src = manual("wait_async(a_s, b_s)").replace(line, line + "\n" + line)
    hz = observe(src)
    assert [h.code for h in hz][:1] == ["output-written-twice"] and "written 2 times" in hz[0].describe()


def test_layout_offsets():
    row = offsets(("layout", (4, 8), (8, 1)), (4, 8))
    assert row.tolist() == np.arange(32).reshape(4, 8).tolist()
    col = offsets(("layout", (4, 8), (1, 4)), (4, 8))
    assert col[1, 0] == 1 and col[0, 1] == 4
    sw = offsets(("compose", ("swizzle", 1, 0, 1), ("layout", (2, 2), (2, 1))), (2, 2))
    assert sorted(sw.ravel().tolist()) == [0, 1, 2, 3] and sw[1, 0] == 3 and sw[1, 1] == 2
    staged = offsets(("layout", (2, 2), (2, 1)), (3, 2, 2))
    assert staged[2, 1, 1] == 11
