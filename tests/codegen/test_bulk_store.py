"""The TMA-store epilogue (argus/codegen/bulk_store.py): where the lowering applies, the order of its
waits, barriers and fences, the staging layout, and the fallbacks. GPU runs compare both lowerings
with float64 on shapes whose output rows are not 16-byte aligned (the padded path)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.codegen import emit as emit_mod
from argus.codegen.compile import build
from argus.codegen.emit import generate
from argus.ir.build import build_file, build_source
from argus.ir.fragments import wgmma_m64nNk16_d
from tests.conftest import EXAMPLES
from tests.runtime.test_driver_gpu import ARCH, gpu


def _epilogue(src: str) -> str:
    return src[src.index("through shared memory"):]


def test_gemm_ws_stores_c_through_shared_with_tma() -> None:
    gen = generate(build_file(EXAMPLES / "gemm_ws.arg"))
    assert gen.bulk_outputs == ("C",) and "tma-store" in gen.features
    ep = _epilogue(gen.source)
    # per chunk: the issuing thread waits for the buffer's previous store to be read, the role meets,
    # every thread writes, fences to the async proxy, meets again, one thread issues and commits
    order = ["ag_bulk_wait_read<0>();", "ag_bar_sync(2, 256);", "ag_vec<__nv_bfloat16, 2>", "ag_fence_proxy_async();",
             "ag_bar_sync(2, 256);", "ag_tma_store_2d(&ag_tm2, (ag_stage2 + 0u), ag_bc, ag_br)", "ag_bulk_commit();",
             "ag_bulk_wait_read<1>();"]
    pos = 0
    for x in order:
        pos = ep.index(x, pos) + 1
    assert ep.count("ag_tma_store_2d(") == 4  # 256 columns in chunks of 64 (128 bytes)
    assert ep.count("ag_bulk_wait_read<0>()") == 1  # only the first chunk waits for every earlier store
    # the role waits for its stores to complete before it ends; no global store of C is left
    assert ep.index("ag_bulk_wait<0>();") > ep.rindex("ag_tma_store_2d(")
    assert "C[" not in gen.source.split("ag_smem_raw")[-1].replace("// ", "")


def test_direct_store_option_and_environment(monkeypatch) -> None:
    k = build_file(EXAMPLES / "gemm_ws.arg")
    for gen in (generate(k, bulk_store=False),):
        assert gen.bulk_outputs == () and "ag_tma_store" not in gen.source and "ag_stage" not in gen.source
    monkeypatch.setenv("ARGUS_STORE", "direct")
    assert generate(k).bulk_outputs == ()
    monkeypatch.setenv("ARGUS_STORE", "tma")
    assert generate(k).bulk_outputs == ("C",)


def test_staging_that_does_not_fit_falls_back_to_direct_stores(monkeypatch) -> None:
    k = build_file(EXAMPLES / "gemm_ws.arg")
    direct = generate(k, bulk_store=False)
    monkeypatch.setattr(emit_mod, "MAX_SMEM", direct.smem_bytes)  # room for the stages, not the staging
    gen = generate(k)
    assert gen.bulk_outputs == () and gen.smem_bytes == direct.smem_bytes


NOT_ROLES = EXAMPLES / "gemm.arg"

READS_OUTPUT = """
kernel acc_into(A: bf16[M, K], B: bf16[K, N], C: f32[M, N], D: f32[M, N]):
    param BM = 64
    param BN = 64
    param BK = 64
    launch grid=(cdiv(N, BN), cdiv(M, BM)), warpgroups=2
    assume(K % 8 == 0 and N % 8 == 0)
    bn = block_id(0)
    bm = block_id(1)
    a_s = shared(bf16[BM, BK], swizzle=128)
    b_s = shared(bf16[BK, BN], swizzle=128)
    full = mbarrier(count=1)
    with role("producer", warpgroups=1):
        expect_tx(full, (BM * BK + BK * BN) * 2)
        copy_bulk(a_s, A[bm * BM : +BM, 0 : +BK], barrier=full)
        copy_bulk(b_s, B[0 : +BK, bn * BN : +BN], barrier=full)
    with role("consumer", warpgroups=1):
        for t in range(1):
            wait(full, 0)
            acc = zeros(f32[BM, BN])
            acc = mma(a_s, b_s, acc, instr="wgmma")
            store(C[bm * BM : +BM, bn * BN : +BN], acc)
            store(D[bm * BM : +BM, bn * BN : +BN], acc + load(C[bm * BM : +BM, bn * BN : +BN]))
reference:
    C = A[:, 0:64] @ B[0:64, :]
    D = 2 * (A[:, 0:64] @ B[0:64, :])
"""


def test_lowering_applies_only_where_exact() -> None:
    # no roles: the block-wide cp.async pipeline keeps its direct store
    assert generate(build_file(NOT_ROLES, {"MMA": "wgmma"})).bulk_outputs == ()
    # a store after the role's last loop (one output tile per block) has nothing to overlap with
    assert generate(build_file(EXAMPLES / "flash_attention_ws.arg")).bulk_outputs == ()
    assert generate(build_source(READS_OUTPUT.replace("        for t in range(1):\n", "        if True:\n")))\
        .bulk_outputs == ()
    # a tensor the kernel reads back is stored directly (a load could see a write still in flight);
    # the other output of the same accumulator goes through TMA
    gen = generate(build_source(READS_OUTPUT))
    assert gen.bulk_outputs == ("D",)
    tmaps = [(t.tensor, t.box_rows, t.box_cols) for t in gen.tensor_maps]
    assert ("D", 64, 32) in tmaps  # f32: chunks of 32 columns (128 bytes)


def test_staging_address_is_the_tma_128_byte_swizzle_and_conflict_free() -> None:
    """The staging address of each accumulator element (the formula bulk_store.emit prints) is the
    position TMA's SWIZZLE_128B reads it from, and a warp's 32 writes of one slot hit 32 banks."""
    frag = wgmma_m64nNk16_d(64)
    rows, cols = frag.table()  # [thread, slot]
    e = 2
    byte = cols * e
    addr = rows * 128 + (((byte >> 4) ^ (rows & 7)) << 4) + (byte & 15)
    # TMA SWIZZLE_128B: within a 1024-byte atom, 16-byte unit bits [4:6] ^= address bits [7:9]
    plain = rows * 128 + byte
    tma = plain ^ (((plain >> 7) & 7) << 4)
    assert (addr == tma).all()
    assert len(np.unique(addr)) == addr.size // 1 and addr.max() < 64 * 128
    for warp in range(4):
        for slot in range(0, frag.slots, 2):
            banks = (addr[warp * 32:(warp + 1) * 32, slot] // 4) % 32
            assert len(set(banks.tolist())) == 32


def test_rank3_output_uses_a_rank3_tma_store() -> None:
    """A batched output (leading axis indexed) is stored with a rank-3 tensor map, batch coordinate last."""
    from tests.codegen.test_tma_nd import BATCHED

    head, cons = BATCHED.split('    with role("consumer", warpgroups=2, registers=232):\n')
    body, ref = cons.split("reference:")
    body = "".join(("    " + ln if ln.strip() else ln) + "\n" for ln in body.splitlines())
    src = head + '    with role("consumer", warpgroups=2, registers=232):\n        for rep in range(1):\n' + body + \
        "reference:" + ref
    gen = generate(build_source(src))
    assert gen.bulk_outputs == ("C",)
    stores = [ln.strip() for ln in gen.source.splitlines() if "ag_tma_store_" in ln and "__device__" not in ln]
    assert len(stores) == 2 and all("ag_tma_store_3d(&ag_tm2" in c and "ag_br, b);" in c for c in stores), stores
    assert build(build_source(src), arch="sm_90a", cache=False).result.binary


@pytest.mark.slow
def test_lowered_kernels_compile_for_sm90a() -> None:
    for f, params in [("gemm_ws.arg", {}), ("gemm_fp8.arg", {}), ("gemm_epilogue.arg", {}),
                      ("gemm_ws.arg", {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 8}),
                      ("gemm_ws.arg", {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6})]:
        built = build(build_file(EXAMPLES / f, params), arch="sm_90a", cache=False)
        assert built.generated.bulk_outputs, f
    for name in ("linear", "gemm_tn", "gemm_tt"):  # gemm_ws.arg's other layouts
        built = build(build_file(EXAMPLES / "gemm_ws.arg", {}, name), arch="sm_90a", cache=False)
        assert built.generated.bulk_outputs == ("Y" if name == "linear" else "C",), name


@gpu
@pytest.mark.parametrize("bulk", [True, False], ids=["tma-store", "direct"])
@pytest.mark.parametrize("shape", [(200, 300, 72), (515, 1000, 264), (128, 520, 64)],
                         ids=["odd-rows", "several-tiles", "one-row-of-tiles"])
def test_both_lowerings_match_float64_on_gpu(bulk: bool, shape: tuple[int, int, int]) -> None:
    from argus.runtime.bench import check_on_gpu
    from argus.runtime.launch import GpuKernel

    M, N, K = shape
    for params in ({"SMS": 3}, {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 8, "SMS": 5},
                   {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6, "SMS": 5}):
        gk = GpuKernel(build(build_file(EXAMPLES / "gemm_ws.arg", params), arch=ARCH, bulk_store=bulk), 0)
        assert bool(gk.generated.bulk_outputs) == bulk
        checks, _ = check_on_gpu(gk, {"M": M, "N": N, "K": K}, seed=M + N)
        assert all(c.ok for c in checks), [c.describe() for c in checks]


SM80_ROLE = """
kernel role_mma_sync(A: bf16[M, K], B: bf16[K, N], C: f32[M, N]):
    param BM = 64
    param BN = 32            # f32: one 128-byte chunk, the same slots in every thread (the lowering's shape)
    launch grid=(cdiv(N, BN), cdiv(M, BM)), warpgroups=1
    bn = block_id(0)
    bm = block_id(1)
    a_s = shared(bf16[BM, 64])
    b_s = shared(bf16[64, BN])
    with role("consumer", warpgroups=1):
        for t in range(1):
            copy(a_s, A[bm * BM : +BM, 0 : +64])
            copy(b_s, B[0 : +64, bn * BN : +BN])
            barrier()
            acc = mma(a_s, b_s, zeros(f32[BM, BN]), instr="mma.sync")
            store(C[bm * BM : +BM, bn * BN : +BN], acc)
reference:
    C = A[:, 0:64] @ B[0:64, :]
"""


def test_a_kernel_that_builds_for_sm80_keeps_direct_stores() -> None:
    """The lowering adds sm_90 instructions only to kernels that need sm_90 already (this one qualifies in
    every other respect: with sm90_native forced it is lowered)."""
    gen = generate(build_source(SM80_ROLE))
    assert gen.bulk_outputs == () and gen.min_sm == 80
    assert build(build_source(SM80_ROLE), arch="sm_80", cache=False).result.binary
    em = emit_mod.Emitter(build_source(SM80_ROLE))
    em.sm90_native = True
    assert em.generate().bulk_outputs == ("C",)
