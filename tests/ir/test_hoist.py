"""An mma nested in a larger expression (`s = mma(...) * 0.5`) is hoisted into its own tile, so it keeps
the fragment layout and can feed the next mma as its register A operand (argus/ir/passes/hoist.py)."""

from __future__ import annotations

import pytest

from argus.dsl.parser import parse
from argus.ir import nodes as ir
from argus.ir.build import build_kernel
from argus.verification import verify_kernel

SRC = """kernel two_mma(A: bf16[M, K], B: bf16[K, N], V: bf16[N, D], O: f32[M, D]):
    param BM = 64
    param MMA = "wgmma"
    launch grid=(cdiv(M, BM),), threads=128
    assume(K == 64 and N == 64 and D == 64)
    bm = block_id(0)
    a_s = shared(bf16[BM, 64], swizzle=128)
    b_s = shared(bf16[64, 64], swizzle=128)
    v_s = shared(bf16[64, 64], swizzle=128)
    copy_async(a_s, A[bm * BM : +BM, 0 : +64])
    copy_async(b_s, B[0 : +64, 0 : +64])
    copy_async(v_s, V[0 : +64, 0 : +64])
    wait_async(a_s, b_s, v_s)
    s = mma(a_s, b_s, zeros(f32[BM, 64]), instr=MMA) * 0.5
    o = mma(cast(s, bf16), v_s, zeros(f32[BM, 64]), instr=MMA)
    store(O[bm * BM : +BM, 0 : +64], o)
reference:
    O = (A @ B * 0.5) @ V
"""


def _kernel(mma: str) -> ir.Kernel:
    return build_kernel(parse(SRC, "two_mma.arg").kernels[0], {"MMA": mma})


def test_the_nested_mma_gets_its_own_tile_in_the_fragment_layout():
    k = _kernel("wgmma")
    lets = {s.name: s for s in k.body if isinstance(s, ir.Let)}
    (hoisted,) = [s for n, s in lets.items() if n.startswith("mma_")]
    assert isinstance(hoisted.value, ir.Mma) and hoisted.layout.kind == "mma"
    assert lets["s"].layout.kind == "mma"  # the scaled scores stay in the accumulator's fragment


@pytest.mark.parametrize("mma", ["wgmma", "mma.sync"])
def test_it_verifies_and_builds(mma):
    pytest.importorskip("cuda.bindings.nvrtc")
    from argus.codegen.compile import build

    node = parse(SRC, "two_mma.arg").kernels[0]
    v = verify_kernel(node, {"MMA": mma}, file="two_mma.arg")
    assert v.status == "verified", v.render()
    build(_kernel(mma), arch="sm_90a")


def test_it_runs_on_the_cpu_against_the_reference():
    from tests.codegen import cpusim

    if not cpusim.available():
        pytest.skip("needs g++")
    from argus.dsl.types import DTYPES

    # O is f32 but computed through bf16(s): bf16's criterion, as for attention's P
    for c in cpusim.check(_kernel("mma.sync"), {"M": 100, "K": 64, "N": 64, "D": 64}, seed=3,
                          criteria={"O": DTYPES["bf16"]}):
        assert c.ok, c.describe()
