"""The interpreter against a float64 NumPy reference, and against broken kernels it must not 'fix'."""

from __future__ import annotations

import numpy as np
import pytest

from argus.interp.machine import InterpError, execute
from argus.interp.numerics import round_bf16
from argus.interp.run import make_arrays, run_interp
from argus.ir.build import build_file, build_source
from tests.conftest import EXAMPLES

SHAPES = [(256, 256, 256), (200, 136, 72), (64, 320, 520)]


def gemm_by_hand(kernel, M, N, K, seed):
    """Run with our own inputs and compare with A @ B computed here in float64 (not the reference block)."""
    rng = np.random.default_rng(seed)
    A = round_bf16(rng.standard_normal((M, K)).astype(np.float32))
    B = round_bf16(rng.standard_normal((K, N)).astype(np.float32))
    C = np.full((M, N), np.nan, np.float32)
    execute(kernel, {"A": A, "B": B, "C": C}, {"M": M, "N": N, "K": K})
    ref = A.astype(np.float64) @ B.astype(np.float64)
    return C, ref


@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_float64(mma, shape):
    M, N, K = shape
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": mma})
    C, ref = gemm_by_hand(k, M, N, K, seed=hash(shape) % 1000)
    assert np.isfinite(C).all()
    np.testing.assert_allclose(C, ref, rtol=2 ** -7, atol=2 ** -7 * np.abs(ref).max())
    res = run_interp(k, {"M": M, "N": N, "K": K})  # fresh random inputs, through the reference block
    assert res.ok, [c.describe() for c in res.checks]


@pytest.mark.parametrize("params", [{"STAGES": 1}, {"STAGES": 2}, {"STAGES": 4},
                                    {"BM": 64, "BN": 64, "BK": 32, "SWIZZLE": 64, "MMA": "mma.sync"}])
def test_gemm_configurations(params):
    k = build_file(EXAMPLES / "gemm.arg", params)
    for M, N, K in [(200, 136, 72), (64, 64, 16)]:  # includes K smaller than one tile
        res = run_interp(k, {"M": M, "N": N, "K": K}, seed=3)
        assert res.ok, (params, [c.describe() for c in res.checks])


MANUAL = """
kernel g(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):
    param BM = 64
    param BN = 64
    param BK = 32
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[BM, BK])
    b_s = shared(bf16[BK, BN])
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)):
        copy_async(a_s, A[bm * BM : +BM, k * BK : +BK]{MASK})
        copy_async(b_s, B[k * BK : +BK, bn * BN : +BN])
        {WAIT}
        acc = mma(a_s, b_s, acc, instr="mma.sync")
        barrier()
    store(C[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    C = A @ B
"""


def manual(wait: str, mask: str = "") -> str:
    return MANUAL.replace("{WAIT}", wait).replace("{MASK}", mask)


def test_manual_wait_is_correct():
    k = build_source(manual("wait_async(a_s, b_s)"))
    assert run_interp(k, {"M": 100, "N": 70, "K": 96}, seed=0).ok


@pytest.mark.parametrize("wait", ["barrier()", "commit()\n        barrier()", "commit()\n        wait_async(1)"
                                  "\n        barrier()"], ids=["no-wait", "commit-no-wait", "wait-one-too-few"])
def test_missing_wait_gives_a_wrong_result(wait):
    k = build_source(manual(wait))
    res = run_interp(k, {"M": 100, "N": 70, "K": 96}, seed=0)
    assert not res.ok
    (c,) = res.checks
    assert c.bad > 0 and c.first_bad is not None


def test_wrong_grid_leaves_poison_visible():
    k = build_source(manual("wait_async(a_s, b_s)").replace("cdiv(M, BM), cdiv(N, BN)", "cdiv(M, BM) - 1, cdiv(N, BN)"))
    res = run_interp(k, {"M": 200, "N": 64, "K": 32}, seed=0)
    (c,) = res.checks
    assert not res.ok and c.nonfinite == 8 * 64  # rows 192..199 never written: still NaN


def test_unmasked_edge_tile_is_an_out_of_bounds_error():
    k = build_source(manual("wait_async(a_s, b_s)", ", masked=False"))
    assert run_interp(k, {"M": 128, "N": 64, "K": 64}, seed=0).ok  # in bounds: fine
    with pytest.raises(InterpError) as info:
        run_interp(k, {"M": 100, "N": 64, "K": 64}, seed=0)
    d = info.value.diagnostics[0]
    assert d.code == "out-of-bounds" and "global tensor 'A'" in d.message and "index 100 on axis 0" in d.message
    assert info.value.details["block"] == (1, 0, 0) and info.value.details["element"] == [100, 0]
    assert "thread" in d.notes[0] and "warp" in d.notes[0] and d.span.line == 13


def test_shared_index_out_of_range_names_the_block():
    src = MANUAL.replace("a_s = shared(bf16[BM, BK])", "a_s = shared(bf16[2, BM, BK])").replace(
        "copy_async(a_s, A", "copy_async(a_s[k + 1], A").replace("mma(a_s,", "mma(a_s[k + 1],").replace(
        "{WAIT}", "wait_async(b_s)").replace("{MASK}", "")
    k = build_source(src)
    with pytest.raises(InterpError) as info:
        run_interp(k, {"M": 64, "N": 64, "K": 64}, seed=0)
    assert "shared buffer 'a_s': index 2 on axis 0 (size 2)" in info.value.diagnostics[0].message


WS = """
kernel gemm_ws(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):
    param BM = 128
    param BN = 64
    param BK = 64
    param STAGES = 2
    launch grid=(cdiv(M, BM), cdiv(N, BN)), warpgroups=3
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[STAGES, BM, BK], swizzle=128)
    b_s = shared(bf16[STAGES, BK, BN], swizzle=128)
    full = mbarrier(count=1, n=STAGES)
    empty = mbarrier(count=1, n=STAGES)
    with role("producer", warpgroups=1):
        for k in range(cdiv(K, BK)):
            s = k % STAGES
            if k >= STAGES:
                wait(empty[s], (k // STAGES - 1) % 2)
            expect_tx(full[s], (BM * BK + BK * BN) * 2)
            copy_bulk(a_s[s], A[bm * BM : +BM, k * BK : +BK], barrier=full[s])
            copy_bulk(b_s[s], B[k * BK : +BK, bn * BN : +BN], barrier=full[s])
    with role("consumer", warpgroups=2):
        acc = zeros(f32[BM, BN])
        for k in range(cdiv(K, BK)):
            s = k % STAGES
            {CONSUMER_WAIT}
            acc = mma(a_s[s], b_s[s], acc, instr="wgmma")
            arrive(empty[s])
        store(C[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    C = A @ B
"""


def test_warp_specialised_gemm_with_mbarriers():
    k = build_source(WS.replace("{CONSUMER_WAIT}", "wait(full[s], (k // STAGES) % 2)"))
    for dims in ({"M": 200, "N": 136, "K": 520}, {"M": 128, "N": 64, "K": 64}):
        res = run_interp(k, dims, seed=1)
        assert res.ok, [c.describe() for c in res.checks]


def test_bulk_copy_is_invisible_without_its_wait():
    k = build_source(WS.replace("{CONSUMER_WAIT}", "pass"))
    res = run_interp(k, {"M": 128, "N": 64, "K": 128}, seed=1)  # two steps: the producer never blocks
    assert not res.ok and res.checks[0].nonfinite > 0  # NaN-filled shared memory was multiplied
    # With more steps than stages the consumer may overtake the producer's empty-barrier phases (on the
    # GPU the parity wait then never returns): a deadlock or a wrong result, never the right answer.
    try:
        assert not run_interp(k, {"M": 128, "N": 64, "K": 256}, seed=1).ok
    except InterpError as exc:
        assert exc.diagnostics[0].code == "deadlock"


def test_wrong_phase_parity_deadlocks():
    k = build_source(WS.replace("{CONSUMER_WAIT}", "wait(full[s], (k // STAGES + 1) % 2)"))
    with pytest.raises(InterpError) as info:
        run_interp(k, {"M": 128, "N": 64, "K": 256}, seed=1)
    d = info.value.diagnostics[0]
    assert d.code == "deadlock"
    # the error points at a blocked wait and names every blocked role's barrier, parity and phase count
    assert d.span is not None and any("waits on full[" in n and "for parity 1" in n for n in d.notes), d.notes


def test_inputs_are_random_and_outputs_poisoned():
    k = build_file(EXAMPLES / "gemm.arg")
    a = make_arrays(k, {"M": 16, "N": 16, "K": 16}, np.random.default_rng(0))
    b = make_arrays(k, {"M": 16, "N": 16, "K": 16}, np.random.default_rng(1))
    assert np.isnan(a["C"]).all() and np.count_nonzero(a["A"]) > 200 and not np.array_equal(a["A"], b["A"])
    assert np.array_equal(round_bf16(a["A"]), a["A"])  # inputs are exactly representable in bf16
