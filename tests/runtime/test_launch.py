"""Launching Argus kernels: argument binding and validation on the CPU, correctness on the GPU.

GPU tests (marker `gpu`) draw fresh random inputs, poison the outputs with NaN, launch, and compare
with the kernel's `reference:` block evaluated in float64 (argus.runtime.bench.check_on_gpu, the
interpreter's comparison), at tile-multiple and irregular shapes, including M or N below one tile and
rows that are not 16-byte aligned (the runtime's padded-copy path).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("cuda.bindings.driver")

from argus.ir.build import build_file, build_source  # noqa: E402
from argus.runtime.arrays import ArgumentError  # noqa: E402
from argus.runtime.launch import bind_arguments, check_preconditions, validate  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime.test_driver_gpu import ARCH, gpu  # noqa: E402


class _Fake:
    """A device array seen through __cuda_array_interface__ only (never dereferenced)."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "bfloat16", strides: Any = None) -> None:
        item = 4 if dtype == "float32" else 2
        self.dtype = dtype
        self.__cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": shape,
                                         "typestr": "<f4" if item == 4 else "<V2",
                                         "strides": None if strides is None else tuple(s * item for s in strides),
                                         "version": 3}


def test_arguments_bind_by_position_and_name() -> None:
    k = build_file(EXAMPLES / "gemm.arg")
    a, b, c = _Fake((64, 32)), _Fake((32, 16)), _Fake((64, 16))
    assert bind_arguments(k, (a, b), {"C": c}) == {"A": a, "B": b, "C": c}
    with pytest.raises(ArgumentError, match="missing array argument"):
        bind_arguments(k, (a, b), {})
    with pytest.raises(ArgumentError, match="has no argument 'D'"):
        bind_arguments(k, (a, b, c), {"D": c})
    with pytest.raises(ArgumentError, match="takes 3 arguments"):
        bind_arguments(k, (a, b, c, c), {})


def test_validation_binds_dims_and_rejects_mismatches() -> None:
    k = build_file(EXAMPLES / "gemm.arg")
    _, dims, _ = validate(k, {"A": _Fake((64, 32)), "B": _Fake((32, 16)), "C": _Fake((64, 16))})
    assert dims == {"M": 64, "K": 32, "N": 16}
    with pytest.raises(ArgumentError, match=r"argument B: expected bf16\[K, N\].*\(K is 32 from argument A\)"):
        validate(k, {"A": _Fake((64, 32)), "B": _Fake((33, 16)), "C": _Fake((64, 16))})
    with pytest.raises(ArgumentError, match=r"argument C: expected bf16\[M, N\] contiguous.*got f32"):
        validate(k, {"A": _Fake((64, 32)), "B": _Fake((32, 16)), "C": _Fake((64, 16), "float32")})
    with pytest.raises(ArgumentError, match="non-contiguous"):
        validate(k, {"A": _Fake((64, 32), strides=(1, 64)), "B": _Fake((32, 16)), "C": _Fake((64, 16))})


def test_scalars_are_checked_and_defaulted() -> None:
    k = build_source("""
kernel scale(X: f32[N], Y: f32[N], alpha: f32 = 2.0):
    launch grid=(cdiv(N, 128),), threads=128
    store(Y[block_id(0) * 128 : +128], load(X[block_id(0) * 128 : +128]) * alpha)
reference:
    Y = X * alpha
""")
    x, y = _Fake((100,), "float32"), _Fake((100,), "float32")
    assert bind_arguments(k, (x, y), {})["alpha"] == 2.0
    with pytest.raises(ArgumentError, match="argument alpha: expected a f32 scalar"):
        validate(k, bind_arguments(k, (x, y, "fast"), {}))


def test_preconditions_are_checked_before_launch() -> None:
    k = build_file(EXAMPLES / "bugs" / "async_ws_consumer_parity_early.arg")  # assume(K % 8 == 0), assume(N % 8 == 0)
    check_preconditions(k, {"M": 64, "K": 64, "N": 64}, {})
    with pytest.raises(ArgumentError, match=r"precondition assume\(K % 8 == 0\).*does not hold for .*K=65"):
        check_preconditions(k, {"M": 64, "K": 65, "N": 64}, {})


# ---- GPU ---------------------------------------------------------------------------------------------

SHAPES = [(256, 256, 256), (200, 136, 72), (64, 300, 520), (300, 40, 130), (129, 77, 33)]
IDS = ["tiles", "irregular", "M-below-tile", "N-below-tile", "unaligned-rows"]

GEMM_T = """
kernel gemm_t(A: bf16[K, M], B: bf16[N, K], C: bf16[M, N]):
    param BM = 128
    param BN = 128
    param BK = 64
    param MMA = "mma.sync"
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=256
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[2, BK, BM], swizzle=128)
    b_s = shared(bf16[2, BN, BK], swizzle=128)
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)):
        s = k % 2
        copy_async(a_s[s], A[k * BK : +BK, bm * BM : +BM])
        copy_async(b_s[s], B[bn * BN : +BN, k * BK : +BK])
        wait_async(a_s[s], b_s[s])
        acc = mma(a_s[s].T, b_s[s].T, acc, instr=MMA)
    store(C[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    C = A.T @ B.T
"""

ELEMENTWISE = """
kernel scale_rows(X: f32[R, C], Y: bf16[R, C], alpha: f32 = 2.0):
    param BR = 32
    launch grid=(cdiv(R, BR),), threads=128
    r = block_id(0)
    x = load(X[r * BR : +BR, 0:+64])
    store(Y[r * BR : +BR, 0:+64], cast(select(x > 0.0, x * alpha, exp2(x)), bf16))
reference:
    Y = where(X > 0, X * alpha, exp2(X))
"""


def _gpu_kernel(kernel):
    from argus.codegen.compile import build
    from argus.runtime.launch import GpuKernel

    return GpuKernel(build(kernel, arch=ARCH), 0)


def _check(kernel, dims: dict[str, int], seed: int = 0) -> None:
    from argus.runtime.bench import check_on_gpu

    checks, _ = check_on_gpu(_gpu_kernel(kernel), dims, seed=seed)
    assert all(c.ok for c in checks), [c.describe() for c in checks]


@gpu
@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_gemm_on_gpu(mma: str, shape: tuple[int, int, int]) -> None:
    M, N, K = shape
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": mma})
    _check(k, {"M": M, "N": N, "K": K}, seed=M + N + K)


@gpu
@pytest.mark.parametrize("params", [{}, {"SMS": 3}, {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 8},
                                    {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6},
                                    {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6,
                                     "RELEASE": "immediate"},
                                    {"STAGES": 2}],
                         ids=["default", "3-blocks-persistent", "small-tiles", "small-tiles-bk128",
                              "small-tiles-bk128-immediate", "two-stages-deferred"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_gemm_ws_on_gpu(params: dict, shape: tuple[int, int, int]) -> None:
    M, N, K = shape
    k = build_file(EXAMPLES / "gemm_ws.arg", params)
    _check(k, {"M": M, "N": N, "K": K}, seed=M * 3 + N + K)


@gpu
@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
def test_transposed_operands_on_gpu(mma: str) -> None:
    k = build_source(GEMM_T, {"MMA": mma})
    for M, N, K in [(256, 128, 192), (130, 200, 72)]:
        _check(k, {"M": M, "N": N, "K": K})


@gpu
def test_elementwise_on_gpu() -> None:
    _check(build_source(ELEMENTWISE), {"R": 100, "C": 64})


@gpu
def test_python_api_launches_torch_arrays() -> None:
    import torch

    import argus

    k = argus.load(EXAMPLES / "gemm_ws.arg", SMS=7)
    a = torch.randn(300, 200, device="cuda").to(torch.bfloat16)
    b = torch.randn(200, 264, device="cuda").to(torch.bfloat16)
    c = torch.full((300, 264), float("nan"), device="cuda", dtype=torch.bfloat16)
    k(a, b, c)
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2 and not torch.isnan(c).any()
    with pytest.raises(ArgumentError, match="argument B"):
        k(a, b[:100], c)
    with pytest.raises(ArgumentError, match="non-contiguous"):
        k(a, b.t().contiguous().t(), c)
    with pytest.raises(ArgumentError, match="expected a CUDA tensor"):
        k(a.cpu(), b, c)
    with pytest.raises(ArgumentError, match=r"expected bf16\[M, K\]"):
        k(a.float(), b, c)


@gpu
def test_repeated_calls_swap_in_each_calls_arrays() -> None:
    """The second and later calls of one layout reuse the first call's checked plan (argus.runtime.launch
    _Plan): each must still run on its own arrays - new addresses, TMA descriptors re-encoded - and an
    address that is not 16-byte aligned must take the padded-copy path again."""
    import torch

    from argus.codegen.compile import build
    from argus.runtime.launch import GpuKernel

    gk = GpuKernel(build(build_file(EXAMPLES / "gemm_ws.arg", {"SMS": 5}), arch=ARCH), 0)
    M, N, K = 200, 136, 264
    for i in range(4):
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
        keep = torch.empty(1000 * (i + 1), device="cuda")  # moves later allocations  # noqa: F841
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        gk(a, b, c)
        ref = a.double() @ b.double()
        assert not torch.isnan(c).any() and float((c.double() - ref).norm() / ref.norm()) < 1e-2, i
    assert len(gk._plans) == 1
    # the same layout at an address 2 bytes past an aligned one: rows padded by the full path, still right
    big = torch.randn(M * K + 8, device="cuda").to(torch.bfloat16)
    a = big[1:1 + M * K].view(M, K)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    gk(a, b, c)
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any() and float((c.double() - ref).norm() / ref.norm()) < 1e-2
    # scalars are part of the layout: another alpha is another plan, and each call uses its own
    ek = GpuKernel(build(build_source(ELEMENTWISE), arch=ARCH), 0)
    x = torch.randn(100, 64, device="cuda")
    for alpha in (2.0, 3.0, 2.0):
        y = torch.full((100, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
        ek(x, y, alpha=alpha)
        want = torch.where(x > 0, x * alpha, torch.exp2(x))
        assert torch.allclose(y.float(), want, rtol=1e-2, atol=1e-2), alpha
    assert len(ek._plans) == 2


@gpu
def test_cli_run_bench(capsys) -> None:
    from argus.cli import main

    assert main(["run", "examples/gemm_ws.arg", "-D", "M=512", "-D", "N=512", "-D", "K=256", "--bench",
                 "--iters", "3"]) == 0
    out = capsys.readouterr().out
    assert "ok   C" in out and "TFLOP/s" in out and "cuBLAS" in out and "ratio" in out


@gpu
def test_batched_tma_gemm_on_gpu() -> None:
    """Rank-3 tensor maps: K = 72 is not a multiple of BK, so the TMA box of the last k-step runs past
    batch b's rows of B; they must read as zero, not as batch b + 1's first rows."""
    from tests.codegen.test_tma_nd import BATCHED

    _check(build_source(BATCHED), {"NB": 3, "M": 200, "N": 136, "K": 72}, seed=5)


@gpu
def test_head_tile_tma_on_gpu() -> None:
    """A TMA box of rows of one head of a [T, H, D] tensor (the head axis indexed between the tile's axes):
    T = 200 leaves the last box past T (zero fill, masked by the store)."""
    from tests.codegen.test_tma_nd import HEADS

    _check(build_source(HEADS), {"T": 200, "H": 3, "D": 64}, seed=5)


@gpu
@pytest.mark.parametrize("m", [1, 16, 40])
def test_few_rows_route_to_the_swapped_kernel_on_gpu(m: int, capsys) -> None:
    """argus.load(...)(A, B, C), `argus run` and argus.torch.op take the route of gemm_ws.arg's gemm_ws / linear
    for M <= 64 (the decode kernels); the results are checked against float64."""
    import torch

    import argus
    import argus.torch as at
    from argus.cli import main

    a = torch.randn(m, 1000, device="cuda").to(torch.bfloat16)
    b = torch.randn(1000, 264, device="cuda").to(torch.bfloat16)
    k = argus.load(EXAMPLES / "gemm_ws.arg")
    assert k.specialized({"M": m, "N": 264, "K": 1000}).name == "gemm_ws_decode"
    c = torch.full((m, 264), float("nan"), device="cuda", dtype=torch.bfloat16)
    k(a, b, c)
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2 and not torch.isnan(c).any()
    w = torch.randn(264, 1000, device="cuda").to(torch.bfloat16)
    y = at.op(EXAMPLES / "gemm_ws.arg", kernel_name="linear", name=f"linear_route_{m}")(a, w)
    ref = a.double() @ w.double().T
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-2 and not torch.isnan(y).any()
    assert main(["run", "examples/gemm_ws.arg", "--kernel", "linear", "--gpu", "-D", f"M={m}", "-D", "N=264",
                 "-D", "K=1000"]) == 0
    assert "kernel 'linear_decode'" in capsys.readouterr().out


@gpu
@pytest.mark.parametrize("shape, tile", [((1000, 1000, 1000), (64, 128)), ((768, 1536, 520), (64, 256)),
                                         ((120, 4096, 200), (64, 64))])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_tile_routes_on_gpu(shape, tile, layout: str) -> None:
    """The tile rules of gemm_ws.arg (64x128 with BK = 128, 64x256, 64x64, one consumer warpgroup) in
    every layout, as argus.load(...)(A, B, C) runs them: the tile picked, and the result against float64."""
    import torch

    import argus

    m, n, k = shape
    name = {"NN": "gemm_ws", "NT": "linear", "TN": "gemm_tn", "TT": "gemm_tt"}[layout]
    picked = argus.load(EXAMPLES / "gemm_ws.arg", name).specialized({"M": m, "N": n, "K": k}).params
    assert (picked["BM"], picked["BN"]) == tile
    a = torch.randn(k, m, device="cuda").to(torch.bfloat16).t() if layout[0] == "T" else \
        torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t() if layout[1] == "T" else \
        torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    argus.load(EXAMPLES / "gemm_ws.arg")(a, b, c)
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2
    assert float(((c.double() - ref).abs() / (ref.abs() + ref.pow(2).mean().sqrt())).max()) < 2 ** -6


@gpu
@pytest.mark.parametrize("shape", [(200, 136, 72), (129, 300, 520), (1000, 264, 1000), (16, 264, 1000), (40, 264, 1000),
                                   (256, 200, 20000)])
@pytest.mark.parametrize("layout", ["NT", "TN", "TT"])
def test_transposed_views_route_to_the_kernel_for_their_layout_on_gpu(shape, layout: str) -> None:
    """argus.load("gemm_ws.arg")(A, B, C) with A = x.t() and / or B = w.t() (transposed views of contiguous
    arrays) runs the kernel for that layout (linear, gemm_tn, gemm_tt through gemm_ws's layout routes, and
    their own few-row and split-K routes): no copy, results against float64. Row pitches that are not
    16-byte multiples (N = 300) are padded."""
    import torch

    import argus

    m, n, k = shape
    a = torch.randn(k, m, device="cuda").to(torch.bfloat16).t() if layout[0] == "T" else \
        torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t() if layout[1] == "T" else \
        torch.randn(k, n, device="cuda").to(torch.bfloat16)
    g = argus.load(EXAMPLES / "gemm_ws.arg")
    want = {"NT": "gemm_ws_bt", "TN": "gemm_ws_at", "TT": "gemm_ws_at_bt"}[layout]
    from argus.runtime.arguments import bind_arguments, launch_facts

    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert g.specialized(launch_facts(g._lowered(), bind_arguments(g._lowered(), (a, b, c), {}))).name == want
    g(a, b, c)
    torch.cuda.synchronize()
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare

    r = compare("C", c.float().cpu().numpy(), (a.double() @ b.double()).cpu().numpy(), DTYPES["bf16"])
    assert r.ok, r.describe()
