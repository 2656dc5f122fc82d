"""TMA copies from tensors of rank > 2: the tile spans the two innermost axes, leading axes are indexed.
Compiles with NVRTC (no GPU); the GPU run is tests/runtime/test_launch.py::test_batched_tma_gemm_on_gpu."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from argus.codegen.compile import build  # noqa: E402
from argus.codegen.emit import generate  # noqa: E402
from argus.dsl.diagnostics import ArgusError  # noqa: E402
from argus.ir.build import build_source  # noqa: E402

# A batched GEMM: block (m, n, b) multiplies batch b. TMA must zero-fill rows past K *within* batch b
# (a 2-D map over the flattened [NB * K, N] would read batch b + 1 there instead).
BATCHED = """
kernel bgemm(A: bf16[NB, M, K], B: bf16[NB, K, N], C: bf16[NB, M, N]):
    param BM = 128
    param BN = 128
    param BK = 64
    param STAGES = 3
    launch grid=(cdiv(M, BM), cdiv(N, BN), NB), warpgroups=3
    bm = block_id(0)
    bn = block_id(1)
    b = block_id(2)
    ksteps = cdiv(K, BK)
    a_s = shared(bf16[STAGES, BM, BK], swizzle=128)
    b_s = shared(bf16[STAGES, BK, BN], swizzle=128)
    full = mbarrier(count=1, n=STAGES)
    empty = mbarrier(count=1, n=STAGES)
    with role("producer", warpgroups=1, registers=40):
        for k in range(ksteps):
            s = k % STAGES
            wait(empty[s], (k // STAGES + 1) % 2)
            expect_tx(full[s], (BM * BK + BK * BN) * 2)
            copy_bulk(a_s[s], A[b, bm * BM : +BM, k * BK : +BK], barrier=full[s])
            copy_bulk(b_s[s], B[b, k * BK : +BK, bn * BN : +BN], barrier=full[s])
    with role("consumer", warpgroups=2, registers=232):
        acc = zeros(f32[BM, BN])
        for k in range(ksteps):
            s = k % STAGES
            wait(full[s], k // STAGES % 2)
            acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
            arrive(empty[s])
        store(C[b, bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    C = A @ B
"""


def test_rank3_copy_bulk_uses_a_rank3_tensor_map() -> None:
    gen = generate(build_source(BATCHED), "bgemm.arg")
    calls = [ln.strip() for ln in gen.source.splitlines() if ln.strip().startswith("ag_tma_load_")]
    assert calls and all(c.startswith("ag_tma_load_3d(") for c in calls), calls
    assert all(c.endswith(", b);") for c in calls), calls  # innermost first: column, row, then the batch
    assert {t.tensor for t in gen.tensor_maps} == {"A", "B"}  # C is stored after the last loop: directly
    res = build(build_source(BATCHED), arch="sm_90a")
    assert res.result.binary


def test_copy_bulk_of_a_non_innermost_tile_is_refused() -> None:
    src = BATCHED.replace("A[b, bm * BM : +BM, k * BK : +BK]", "A[bm * BM : +BM, b, k * BK : +BK]")
    with pytest.raises(ArgusError, match="two innermost axes"):
        generate(build_source(src), "bgemm.arg")
