"""A row of a 2-D shared buffer as a copy's destination (`copy_async(a_s[i], X[j, ...])`): a gather GEMM
filling its A tile one gathered row at a time, built with NVRTC for sm_90a and run on the CPU
(tests/codegen/cpusim.py) against its reference at shapes that are not tile multiples. Until 2026-12-02
the code generator refused the row ("a 1-D slice of 2-D shared buffer") after `check` had verified it."""

from __future__ import annotations

import pytest

from argus.codegen.compile import build
from argus.dsl.parser import parse
from argus.ir.build import build_kernel

from . import cpusim

pytest.importorskip("cuda.bindings.nvrtc")

GATHER = """
kernel gather_gemm(X: bf16[T, K], idx: i32[M], W: bf16[K, N], Y: bf16[M, N]):
    param BM = 64
    param BN = 128
    param BK = 64
    param MMA = "mma.sync"
    param ASYNC = True
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    assume(lambda r: 0 <= load(idx[r]) and load(idx[r]) < T, over=M)
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[BM, BK], swizzle=128)
    b_s = shared(bf16[BK, BN], swizzle=128)
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)):
        for i in range(BM):
            r = min(bm * BM + i, M - 1)
            if ASYNC:
                copy_async(a_s[i], X[load(idx[r]), k * BK : +BK])
            else:
                copy(a_s[i], load(X[load(idx[r]), k * BK : +BK]))
        copy_async(b_s, W[k * BK : +BK, bn * BN : +BN])
        wait_async(b_s)
        if ASYNC:
            wait_async(a_s)
        barrier()
        acc = mma(a_s, b_s, acc, instr=MMA)
        barrier()
    store(Y[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    Y = X[idx] @ W
"""


def _kernel(params: dict):
    return build_kernel(parse(GATHER, "<gather>").kernels[0], params)


@pytest.mark.parametrize("params", [{"MMA": "wgmma"}, {"MMA": "mma.sync"}, {"ASYNC": False}],
                         ids=["wgmma", "mma.sync", "sync-copy"])
def test_a_gathered_row_copy_builds_for_sm90a(params):
    assert build(_kernel(params), arch="sm_90a").result.cubin[:4] == b"\x7fELF"


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
@pytest.mark.parametrize("params", [{}, {"ASYNC": False}], ids=["cp.async", "sync-copy"])
@pytest.mark.parametrize("dims", [{"T": 50, "M": 70, "K": 100, "N": 130}, {"T": 9, "M": 64, "K": 64, "N": 128}])
def test_a_gathered_row_copy_computes_the_reference_on_the_cpu(params, dims):
    for c in cpusim.check(_kernel(params), dims, seed=3):
        assert c.ok, c.describe()


ROW_LOAD = """
kernel rowload(X: f32[R, C], Y: f32[C]):
    param BR = 4
    param BC = 64
    launch grid=(1,), threads=32
    assume(R == BR and C == BC)
    s = shared(f32[BR, BC])
    copy(s, load(X[0 : +BR, 0 : +BC]))
    barrier()
    v = load(s[2])
    store(Y[0 : +BC], v * 2.0)
reference:
    Y = X[2] * 2.0
"""


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
def test_a_row_of_a_shared_tile_loads_as_a_vector():
    k = build_kernel(parse(ROW_LOAD, "<rowload>").kernels[0], {})
    for c in cpusim.check(k, {"R": 4, "C": 64}, seed=1):
        assert c.ok, c.describe()


def test_a_column_of_a_shared_tile_is_refused_at_its_line():
    from argus.dsl.diagnostics import ArgusError

    src = ROW_LOAD.replace("load(s[2])", "load(s[:, 2])").replace("Y: f32[C]", "Y: f32[R]") \
        .replace("Y[0 : +BC]", "Y[0 : +BR]").replace("X[2] * 2.0", "X[:, 2] * 2.0")
    k = build_kernel(parse(src, "<colload>").kernels[0], {})
    with pytest.raises(ArgusError) as e:
        build(k, arch="sm_90a")
    d = e.value.diagnostics[0]
    assert d.code == "codegen" and "column of 2-D shared buffer 's'" in d.message and d.span.line == 10
