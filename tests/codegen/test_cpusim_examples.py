"""The new examples' generated CUDA, run on the CPU (tests/codegen/cpusim.py) against their references.

What runs here is the code the GPU runs, minus what needs the hardware: kernels with TMA, mbarriers or
wgmma are covered by mma.sync variants of the same epilogues (the register code is the same generator
over another fragment) and by tests/runtime/test_ops_gpu.py on the GPU. Shapes are small and not tile
multiples; outputs are poisoned, inputs fresh random values.
"""

from __future__ import annotations

import pytest

from argus.dsl.parser import parse, parse_file
from argus.dsl.types import DTYPES
from argus.ir.build import build_kernel
from tests.conftest import EXAMPLES

from . import cpusim

pytestmark = pytest.mark.skipif(not cpusim.available(), reason="needs g++")


def _kernel(file: str, name: str, params: dict):
    node = next(k for k in parse_file(str(EXAMPLES / file)).kernels if k.name == name)
    return build_kernel(node, params)


def _check(k, dims: dict, seed: int = 0, loose: tuple[str, ...] = ()) -> None:
    """`loose`: fp32 outputs computed through a bf16 operand (P of attention): bf16's criterion."""
    for c in cpusim.check(k, dims, seed=seed, criteria={o: DTYPES["bf16"] for o in loose}):
        assert c.ok, c.describe()


CASES = [
    ("softmax.arg", "softmax", {}, {"M": 5, "N": 2000}),
    ("softmax.arg", "softmax", {"BM": 2, "BN": 512, "THREADS": 128}, {"M": 7, "N": 300}),
    ("softmax.arg", "softmax_stats", {}, {"M": 3, "N": 2500}),
    ("softmax.arg", "softmax_normalize", {}, {"M": 3, "N": 2500}),
    ("rmsnorm.arg", "rmsnorm", {}, {"M": 9, "N": 1000}),
    ("rmsnorm.arg", "rmsnorm", {"BM": 4, "BN": 256, "THREADS": 64}, {"M": 10, "N": 200}),
    ("layernorm.arg", "layernorm", {}, {"M": 9, "N": 1000}),
    ("layernorm.arg", "layernorm", {"BM": 4, "BN": 256, "THREADS": 128}, {"M": 6, "N": 256}),
    # two passes over column steps (rows not multiples of BC, shorter than BN)
    ("rmsnorm.arg", "rmsnorm_looped", {"BN": 1024, "BC": 256, "THREADS": 64}, {"M": 4, "N": 700}),
    ("layernorm.arg", "layernorm_looped", {"BN": 1024, "BC": 256, "THREADS": 64, "OCC": 8}, {"M": 4, "N": 700}),
    ("transpose.arg", "transpose", {}, {"M": 100, "N": 150}),
    ("rope.arg", "rope", {}, {"B": 2, "S": 45, "H": 3, "D": 128, "D2": 64}),
    ("rope.arg", "rope", {"HD": 64}, {"B": 1, "S": 17, "H": 2, "D": 64, "D2": 32}),
    ("decode_attention.arg", "decode_combine", {}, {"B": 2, "H": 3, "NS": 5, "D": 128}),
    ("gemm_ws.arg", "splitk_reduce", {}, {"SPLITS": 3, "M": 40, "N": 300}),
    ("moe_route.arg", "moe_route", {}, {"T": 37, "E": 8, "KTOP": 2}),
    ("moe_route.arg", "moe_route", {"K": 8}, {"T": 20, "E": 200, "KTOP": 8}),
]


@pytest.mark.parametrize(("file", "name", "params", "dims"), CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_example_runs_on_the_cpu(file: str, name: str, params: dict, dims: dict) -> None:
    _check(_kernel(file, name, params), dims)


@pytest.mark.parametrize("dims", [{"B": 2, "H": 8, "HKV": 2, "SKV": 700, "D": 64, "NS": 2},
                                  {"B": 1, "H": 16, "HKV": 2, "SKV": 1000, "D": 128, "NS": 8}])
def test_decode_split_mma_sync_runs_on_the_cpu(dims: dict) -> None:
    """The split kernel with mma.sync (one warp, 16 query-head rows): P is bf16 on its way to OP."""
    params = {"MMA": "mma.sync", "GROUP": dims["H"] // dims["HKV"], "HD": dims["D"],
              "CHUNK": 512 if dims["NS"] == 2 else 128}
    _check(_kernel("decode_attention.arg", "decode_split", params), dims, loose=("OP",))


# The GEMM epilogues and x @ W.T of examples/gemm_epilogue.arg and gemm_ws.arg's linear, on the cp.async + mma.sync
# main loop of examples/gemm.arg (the TMA / wgmma ones run on the GPU).
MMA_SYNC_GEMM = """
kernel g(A: bf16[M, K], B: bf16[{bshape}], Bias: bf16[N], C: bf16[M, N]):
    param BM = 64
    param BN = 64
    param BK = 32
    param STAGES = 2
    param ACT = "gelu"
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[STAGES, BM, BK])
    b_s = shared(bf16[{stage}])
    acc = zeros(f32[BM, BN])
    for k in pipeline(cdiv(K, BK), stages=STAGES):
        s = k % STAGES
        copy_async(a_s[s], A[bm * BM : +BM, k * BK : +BK])
        copy_async(b_s[s], {bview})
        wait_async(a_s[s], b_s[s])
        acc = mma(a_s[s], {boperand}, acc, instr="mma.sync")
    h = acc + cast(load(Bias[bn * BN : +BN]), f32)[None, :]
    store(C[bm * BM : +BM, bn * BN : +BN], cast({act}, bf16))
reference:
    H = A @ {bref} + Bias[None, :]
    C = {refact}
"""


@pytest.mark.parametrize("act", ["gelu", "silu", "none"])
@pytest.mark.parametrize("b_nk", [False, True], ids=["B[K,N]", "W[N,K]"])
def test_gemm_epilogue_mma_sync_runs_on_the_cpu(act: str, b_nk: bool) -> None:
    src = MMA_SYNC_GEMM.format(
        bshape="N, K" if b_nk else "K, N", stage="STAGES, BN, BK" if b_nk else "STAGES, BK, BN",
        bview="B[bn * BN : +BN, k * BK : +BK]" if b_nk else "B[k * BK : +BK, bn * BN : +BN]",
        boperand="b_s[s].T" if b_nk else "b_s[s]", bref="transpose(B)" if b_nk else "B",
        act={"gelu": "gelu(h)", "silu": "silu(h)", "none": "h"}[act],
        refact={"gelu": "gelu(H)", "silu": "silu(H)", "none": "H"}[act])
    k = build_kernel(parse(src, "epilogue.arg").kernels[0], {})
    _check(k, {"M": 100, "N": 136, "K": 72}, seed=1)


FP8_MMA_SYNC = """
kernel g8(A: f8e4m3[M, K], B: f8e4m3[N, K], C: bf16[M, N], scale: f32 = 0.5):
    param BM = 64
    param BN = 64
    param BK = 64
    param STAGES = 2
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    assume(K % 16 == 0)
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(f8e4m3[STAGES, BM, BK])
    b_s = shared(f8e4m3[STAGES, BN, BK])
    acc = zeros(f32[BM, BN])
    for k in pipeline(cdiv(K, BK), stages=STAGES):
        s = k % STAGES
        copy_async(a_s[s], A[bm * BM : +BM, k * BK : +BK])
        copy_async(b_s[s], B[bn * BN : +BN, k * BK : +BK])
        wait_async(a_s[s], b_s[s])
        acc = mma(a_s[s], b_s[s].T, acc, instr="mma.sync")
    store(C[bm * BM : +BM, bn * BN : +BN], cast(acc * scale, bf16))
reference:
    C = (A @ transpose(B)) * scale
"""


def test_fp8_gemm_mma_sync_runs_on_the_cpu() -> None:
    """An 8-bit mma.sync (m16n8k32 e4m3, both operands K-major through ldmatrix), the fp8 main loop the
    emulator can run (examples/gemm_fp8.arg uses TMA + wgmma: tests/runtime/test_ops_gpu.py)."""
    pytest.importorskip("torch")
    k = build_kernel(parse(FP8_MMA_SYNC, "fp8.arg").kernels[0], {})
    _check(k, {"M": 100, "N": 136, "K": 144}, seed=2)
