"""A tile product written as Triton's tl.dot on loaded tiles (`mma(load(A[...]), load(B[...]), acc)`):
the register B operand is staged through a shared buffer between two barriers, the inline A operand named
(argus/ir/passes/stage_operands.py). The staged kernel is what the verifier proves, the interpreter runs and
the code generator builds."""

from __future__ import annotations

import pytest

from argus.dsl.parser import parse
from argus.ir import nodes as ir
from argus.ir.build import build_kernel
from argus.verification import verify_kernel

SRC = """kernel gemm_ab(A: bf16[M, K], B: bf16[K, N], C: f32[M, N], alpha: f32 = 1.5, beta: f32 = -0.5):
    param BM = 64
    param BN = 64
    param BK = 32
    param MMA = "mma.sync"
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    i = block_id(0)
    j = block_id(1)
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)):
        acc = mma(load(A[i * BM : +BM, k * BK : +BK]), load(B[KB : +BK, j * BN : +BN]), acc, instr=MMA)
    c = load(C[i * BM : +BM, j * BN : +BN])
    store(C[i * BM : +BM, j * BN : +BN], alpha * acc + beta * c)
reference:
    C = alpha * (A @ B) + beta * C
"""


def source(kb: str = "k * BK") -> str:
    return SRC.replace("KB", kb)


def kernel(mma: str = "mma.sync") -> ir.Kernel:
    return build_kernel(parse(source(), "gemm_ab.arg").kernels[0], {"MMA": mma})


def test_b_goes_through_a_shared_buffer_between_two_barriers_and_a_is_named():
    k = kernel()
    (alloc,) = [s for s in k.body if isinstance(s, ir.AllocShared)]
    assert alloc.name == "mma_b_0" and alloc.shape == (32, 64) and alloc.swizzle == 128
    loop = next(s for s in k.body if isinstance(s, ir.For))
    kinds = [type(s).__name__ for s in loop.body]
    assert kinds == ["Let", "Barrier", "Copy", "Barrier", "Let"], kinds
    m = loop.body[-1].value
    assert isinstance(m, ir.Mma) and isinstance(m.a, ir.Var) and m.b.space == "shared" and m.b.base == alloc.name


@pytest.mark.parametrize("mma", ["mma.sync", "wgmma"])
def test_it_verifies_and_builds(mma):
    pytest.importorskip("cuda.bindings.nvrtc")
    from argus.codegen.compile import build

    v = verify_kernel(parse(source(), "gemm_ab.arg").kernels[0], {"MMA": mma}, file="gemm_ab.arg")
    assert v.status == "verified", v.render()
    build(kernel(mma), arch="sm_90a")


def test_a_wrong_k_tile_of_b_is_still_found():
    """The staging changes where B lives, not what the verifier knows: B's first K tile at every step is a
    violation with a counterexample."""
    v = verify_kernel(parse(source("0"), "gemm_ab.arg").kernels[0], {}, file="gemm_ab.arg")
    assert v.status == "violated", v.render()


def test_it_runs_on_the_cpu_against_the_reference():
    from tests.codegen import cpusim

    if not cpusim.available():
        pytest.skip("needs g++")
    for c in cpusim.check(kernel(), {"M": 100, "K": 72, "N": 70}, seed=3):
        assert c.ok, c.describe()
