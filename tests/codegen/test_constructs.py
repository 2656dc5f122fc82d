"""The language's register-tile constructs across the layouts the code generator uses, each built with NVRTC.

Every construct below (elementwise functions, reductions along either axis, argmax, broadcasts both
ways, transposes, stores into shared memory, atomics) is applied to a tile held in each register layout:
a blocked tile (a load), an mma.sync and a wgmma accumulator fragment, the rows of a fragment (a row
reduction), and a vector broadcast into a tile. Each kernel must lower, generate and compile for sm_90a
(and sm_80 when it uses no sm_90a instruction). Kernels without inline PTX also run on the CPU
(tests/codegen/cpusim.py, which emulates cp.async, ldmatrix and mma.sync too) against their reference;
every one runs on the GPU in tests/runtime/test_ops_gpu.py.
"""

from __future__ import annotations

import pytest

from argus.codegen.compile import build
from argus.dsl.parser import parse
from argus.ir.build import build_kernel

from . import cpusim

pytest.importorskip("cuda.bindings.nvrtc")

# How the tile `t` (f32[BM, BN]) is made, per layout; A, B feed the mma ones.
SOURCES = {
    "blocked": ("X: f32[M, N]", "    t = load(X[bm * BM : +BM, 0 : +BN])\n", "X"),
    "mma.sync": ("A: bf16[M, K], B: bf16[K, N]", """    a_s = shared(bf16[BM, 32])
    b_s = shared(bf16[32, BN])
    copy(a_s, A[bm * BM : +BM, 0 : +32])
    copy(b_s, B[0 : +32, 0 : +BN])
    barrier()
    t = mma(a_s, b_s, zeros(f32[BM, BN]), instr="mma.sync")
""", "A[:, 0:32] @ B[0:32, :]"),
    "wgmma": ("A: bf16[M, K], B: bf16[K, N]", """    a_s = shared(bf16[BM, 32], swizzle=64)
    b_s = shared(bf16[32, BN], swizzle=64)
    copy(a_s, A[bm * BM : +BM, 0 : +32])
    copy(b_s, B[0 : +32, 0 : +BN])
    barrier()
    t = mma(a_s, b_s, zeros(f32[BM, BN]), instr="wgmma")
""", "A[:, 0:32] @ B[0:32, :]"),
}

# construct name -> (extra arguments, body using t, reference lines using T)
CONSTRUCTS = {
    **{f"elementwise_{fn}": ("Y: f32[M, N]", f"    store(Y[bm * BM : +BM, 0 : +BN], {fn}(t))\n", f"    Y = {fn}(T)\n")
       for fn in ("exp", "tanh", "erf", "sigmoid", "gelu", "silu", "abs")},
    "elementwise_log_sqrt": ("Y: f32[M, N]", "    store(Y[bm * BM : +BM, 0 : +BN], log(sqrt(abs(t) + 1.0)))\n",
                             "    Y = log(sqrt(abs(T) + 1.0))\n"),
    **{f"reduce_{op}_axis{ax}": (f"R: f32[{'M' if ax == 1 else 'N'}]",
                                  f"    store(R[{'bm * BM : +BM' if ax == 1 else '0 : +BN'}], {op}(t, axis={ax}))\n",
                                  f"    R = {op}(T, axis={ax})\n")
       for op in ("sum", "max", "min") for ax in (0, 1)},
    **{f"argmax_axis{ax}": (f"R: i32[{'M' if ax == 1 else 'N'}]",
                            f"    store(R[{'bm * BM : +BM' if ax == 1 else '0 : +BN'}], argmax(t, axis={ax}))\n",
                            f"    R = argmax(T, axis={ax})\n") for ax in (0, 1)},
    "broadcast_rows": ("Y: f32[M, N]", "    store(Y[bm * BM : +BM, 0 : +BN], t - max(t, axis=1)[:, None])\n",
                       "    Y = T - max(T, axis=1)[:, None]\n"),
    "broadcast_cols": ("V: f32[N], Y: f32[M, N]",
                       "    v = load(V[0 : +BN])\n    store(Y[bm * BM : +BM, 0 : +BN], t * v[None, :] + v)\n",
                       "    Y = T * V[None, :] + V\n"),
    "broadcast_col_stats": ("Y: f32[M, N]", "    store(Y[bm * BM : +BM, 0 : +BN], t / sum(t * t, axis=0)[None, :])\n",
                            "    Y = T / sum(T * T, axis=0)[None, :]\n"),
    "keepdims_rows": ("Y: f32[M, N]", """    mu = sum(t, axis=1)[:, None] * 0.015625
    xc = t - mu
    store(Y[bm * BM : +BM, 0 : +BN], xc * rsqrt(sum(xc * xc, axis=1)[:, None] * 0.015625 + 1.0))
""", "    xc = T - mean(T, axis=1, keepdims=True)\n    Y = xc / sqrt(mean(xc * xc, axis=1, keepdims=True) + 1.0)\n"),
    "keepdims_cols": ("Y: f32[M, N]",
                      "    cm = max(t, axis=0)[None, :]\n    store(Y[bm * BM : +BM, 0 : +BN], t - cm)\n",
                      "    Y = T - max(T, axis=0, keepdims=True)\n"),
    "rows_vector": ("Y: f32[M, N], R: f32[M]", """    s = sum(t, axis=1)
    r = exp(s * 0.01) + 1.0
    store(R[bm * BM : +BM], r)
    store(Y[bm * BM : +BM, 0 : +BN], t * r[:, None])
""", "    R = exp(sum(T, axis=1) * 0.01) + 1.0\n    Y = T * R[:, None]\n"),
    "transpose": ("Y: f32[N, M]", "    store(Y[0 : +BN, bm * BM : +BM], t.T + 1.0)\n", "    Y = transpose(T) + 1.0\n"),
    "store_shared": ("Y: f32[M, N]", """    t_s = shared(f32[BM, BN])
    store(t_s, t * 2.0)
    barrier()
    store(Y[bm * BM : +BM, 0 : +BN], load(t_s) + 1.0)
""", "    Y = T * 2.0 + 1.0\n"),
    "copy_shared_transposed": ("Y: f32[N, M]", """    t_s = shared(f32[BM, BN])
    copy(t_s, t)
    barrier()
    store(Y[0 : +BN, bm * BM : +BM], load(t_s.T))
""", "    Y = transpose(T)\n"),
    # constants: a negated negative (not the C decrement --2.0f) and infinities in 16-bit tiles
    "negate_negative_constant": ("Y: f32[M, N]",
                                 "    store(Y[bm * BM : +BM, 0 : +BN], t * -full(f32[BM, BN], -2.0))\n",
                                 "    Y = T * 2.0\n"),
    "bf16_infinity": ("Y: bf16[M, N]", "    store(Y[bm * BM : +BM, 0 : +BN], "
                      "min(cast(t, bf16), full(bf16[BM, BN], inf)))\n", "    Y = T\n"),
    "cast_bf16": ("Y: bf16[M, N]", "    store(Y[bm * BM : +BM, 0 : +BN], cast(t, bf16))\n", "    Y = T\n"),
    "atomic_add_f32": ("Y: f32[N]", "    atomic_add(Y[0 : +BN], sum(t, axis=0))\n", "    Y = Y + sum(T, axis=0)\n"),
    "atomic_add_bf16": ("Y: bf16[M, N]", "    atomic_add(Y[bm * BM : +BM, 0 : +BN], cast(t, bf16))\n",
                        "    Y = Y + T\n"),
}


def kernel_source(layout: str, construct: str) -> str:
    args, make, tensor = SOURCES[layout]
    extra, body, ref = CONSTRUCTS[construct]
    threads = 128
    return (f"kernel k({args}, {extra}):\n    param BM = 64\n    param BN = 64\n"
            f"    launch grid=(cdiv(M, BM),), threads={threads}\n    assume(N == BN)\n"
            + ("    assume(K >= 32)\n" if "K" in args else "")
            + f"    bm = block_id(0)\n{make}{body}reference:\n    T = {tensor}\n{ref}")


CASES = [(lay, c) for lay in SOURCES for c in CONSTRUCTS]


@pytest.mark.parametrize(("layout", "construct"), CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_construct_builds(layout: str, construct: str) -> None:
    src = kernel_source(layout, construct)
    k = build_kernel(parse(src, f"{layout}_{construct}.arg").kernels[0], {})
    built = build(k, arch="sm_90a")
    assert built.result.cubin[:4] == b"\x7fELF"
    if layout != "wgmma":
        assert build(k, arch="sm_80").result.cubin[:4] == b"\x7fELF"


CPU_CASES = [(lay, c) for lay in ("blocked", "mma.sync") for c in CONSTRUCTS]


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
@pytest.mark.parametrize(("layout", "construct"), CPU_CASES, ids=[f"{a}-{b}" for a, b in CPU_CASES])
def test_construct_runs_on_the_cpu(layout: str, construct: str) -> None:
    """The blocked and mma.sync versions run on the CPU emulation: compare with the reference."""
    src = kernel_source(layout, construct)
    k = build_kernel(parse(src, f"{layout}_{construct}.arg").kernels[0], {})
    whole = any(w in construct for w in ("axis0", "col_stats", "keepdims_cols"))  # one block holds the rows it reduces
    shapes = ({"M": 64, "N": 64, "K": 32},) if whole else ({"M": 150, "N": 64, "K": 32}, {"M": 64, "N": 64, "K": 40})
    for dims in shapes:
        for c in cpusim.check(k, {d: v for d, v in dims.items() if d in k.dims}, seed=3):
            assert c.ok, c.describe()
