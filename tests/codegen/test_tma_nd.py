"""TMA copies from tensors of rank > 2: the tile's columns are the last axis, its rows any other axis, the
other axes indexed. Compiles with NVRTC (no GPU); the GPU runs are tests/runtime/test_launch.py's
test_batched_tma_gemm_on_gpu and test_head_tile_tma_on_gpu."""

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


# A [T, H, D] tensor (flash-attn's packed layout): a tile of BT rows of one head, the head axis indexed
# between the tile's two axes; T = 200 is not a multiple of BT, so the last box runs past T (zero fill).
HEADS = """
kernel scale_heads(X: bf16[T, H, D], Y: bf16[T, H, D]):
    param BT = 64
    param HD = 64
    launch grid=(cdiv(T, BT), H), threads=128
    assume(D == HD)
    t = block_id(0)
    h = block_id(1)
    x_s = shared(bf16[BT, HD], swizzle=128)
    full = mbarrier(count=1)
    expect_tx(full, BT * HD * 2)
    copy_bulk(x_s, X[t * BT : +BT, h, 0 : +HD], barrier=full)
    wait(full, 0)
    store(Y[t * BT : +BT, h, 0 : +HD], cast(load(x_s) * 2.0, bf16))
reference:
    Y = X * 2.0
"""


def test_copy_bulk_of_rows_over_an_indexed_middle_axis() -> None:
    gen = generate(build_source(HEADS), "heads.arg")
    calls = [ln.strip() for ln in gen.source.splitlines() if ln.strip().startswith("ag_tma_load_")]
    # innermost first: the column, the head, then the row
    assert calls == ["ag_tma_load_3d((ag_smem + 0u), &ag_tm0, (ag_smem + 8192u), (0), h, ((t * 64)));"], calls
    (spec,) = gen.tensor_maps
    assert spec.box(3) == (64, 1, 64)  # outermost first: BT rows, one head, HD columns
    assert build(build_source(HEADS), arch="sm_90a").result.binary


def test_copy_bulk_whose_columns_are_not_the_last_axis_is_refused() -> None:
    src = BATCHED.replace("A[b, bm * BM : +BM, k * BK : +BK]", "A[bm * BM : +BM, k * BK : +BK, b]")
    with pytest.raises(ArgusError, match="columns are the tensor's last axis"):
        generate(build_source(src), "bgemm.arg")


# Rows longer than a box into an unswizzled tile (the TMA ring of the norms): a box writes its rows densely,
# so each row goes as pieces of [1, 200] (the widest divisor of 1000 within 256 elements and 16 bytes).
LONG_ROWS = """
kernel scale_rows(X: bf16[M, N], Y: bf16[M, N]):
    param BR = 3
    param BN = 1000
    launch grid=(cdiv(M, BR),), threads=128
    assume(N <= BN)
    r = block_id(0)
    x_s = shared(bf16[BR, BN])
    full = mbarrier(count=1)
    expect_tx(full, BR * BN * 2)
    copy_bulk(x_s, X[r * BR : +BR, 0 : +BN], barrier=full)
    wait(full, 0)
    store(Y[r * BR : +BR, 0 : +BN], cast(load(x_s) * 2.0, bf16))
reference:
    Y = X * 2.0
"""


def test_copy_bulk_of_rows_longer_than_a_box_goes_a_row_at_a_time() -> None:
    gen = generate(build_source(LONG_ROWS), "rows.arg")
    (spec,) = gen.tensor_maps
    assert spec.box(2) == (1, 200) and spec.swizzle == 0
    src = gen.source
    assert "for (int ag_i = 0; ag_i < 3; ++ag_i)" in src and "for (int ag_j = 0; ag_j < 5; ++ag_j)" in src
    assert "ag_tma_load_2d((ag_smem + 0u + (ag_u32)(ag_i * 1000 + ag_j * 200) * 2u), &ag_tm0, (ag_smem + 6000u), " \
           "(0 + ag_j * 200), ((r * 3) + ag_i));" in src
    assert build(build_source(LONG_ROWS), arch="sm_90a").result.binary


def test_copy_bulk_of_rows_not_a_multiple_of_16_bytes_is_refused() -> None:
    # 1004 bf16 = 2008 bytes: no 16-byte pieces make up the row
    with pytest.raises(ArgusError, match="whole rows of a multiple of 16 bytes"):
        generate(build_source(LONG_ROWS.replace("BN = 1000", "BN = 1004")), "rows.arg")
