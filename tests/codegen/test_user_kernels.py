"""Kernels written from the README alone, as a new user (a Triton / TileLang user) would write them.

tests/codegen/user_kernels/ holds them (elementwise with broadcasts both ways, GEMM epilogues, row and
column reductions, argmax, cross-entropy, embedding gathers, causal softmax, atomics, shared-memory
transposes, a 3-D grid, runtime scalars, register A operands, both operands loaded into registers, row
reductions of mma tiles whose warps split N, a `.py` kernel). The rule they hold the compiler to (issue
15): what `argus check` accepts builds for sm_90a. Each kernel is built with NVRTC; the ones without
sm_90a instructions also run on the CPU emulator of the generated code (tests/codegen/cpusim.py) against
their float64 reference, on fresh random inputs with outputs poisoned, at shapes that are not tile
multiples. A construct the code
generator cannot emit must be refused by `check` at its line (test_three_axis_register_tile_is_refused).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import argus
from argus.codegen.compile import build
from argus.codegen.emit import generate
from argus.dsl.diagnostics import ArgusError
from argus.dsl.types import DTYPES
from argus.verification import build_refusal

from . import cpusim

pytest.importorskip("cuda.bindings.nvrtc")

HERE = Path(__file__).resolve().parent / "user_kernels"

# (file, kernel, dims: none a tile multiple, outputs held to bf16's criterion: fp32 through a bf16 value)
KERNELS = [
    ("vector_add.arg", "vector_add", {"N": 3001}, ()),
    ("bias_add.arg", "bias_add", {"M": 45, "N": 300}, ()),
    ("row_scale.arg", "row_scale", {"M": 100, "N": 77}, ()),
    ("gemm_residual.arg", "gemm_residual", {"M": 100, "N": 136, "K": 72}, ()),
    ("gemm_f32_out.arg", "gemm_f32_out", {"M": 200, "N": 136, "K": 72}, ()),
    ("row_argmax.arg", "row_argmax", {"M": 37, "N": 300}, ()),
    ("col_sum.arg", "col_sum", {"M": 101, "N": 300}, ()),
    ("swiglu.arg", "swiglu", {"M": 37, "N": 300}, ()),
    ("cross_entropy.arg", "cross_entropy", {"M": 37, "N": 1000}, ()),
    ("cross_entropy_row.arg", "cross_entropy_row", {"M": 37, "N": 1000}, ()),
    ("embedding.arg", "embedding", {"T": 13, "V": 50, "D": 300}, ()),
    ("causal_softmax.arg", "causal_softmax", {"N": 150}, ()),
    ("gemm_gelu_tanh.arg", "gemm_gelu_tanh", {"M": 200, "N": 136, "K": 72}, ()),
    ("gemm_erf_gelu_sync.arg", "gemm_erf_gelu_sync", {"M": 100, "N": 136, "K": 72}, ()),
    ("clamp_relu.arg", "clamp_relu", {"M": 37, "N": 300}, ()),
    ("center_rows.arg", "center_rows", {"M": 37, "N": 200}, ()),
    ("atomic_colsum.arg", "atomic_colsum", {"M": 101, "N": 300}, ()),
    ("shared_transpose.arg", "shared_transpose", {"M": 100, "N": 75}, ()),
    ("batched_scale.arg", "batched_scale", {"B": 3, "M": 37, "N": 100}, ()),
    ("gemm_colsum_atomic.arg", "gemm_colsum_atomic", {"M": 100, "N": 136, "K": 72}, ()),
    ("gemm_store_transposed.arg", "gemm_store_transposed", {"M": 100, "N": 136, "K": 72}, ()),
    ("logits_argmax.arg", "logits_argmax", {"M": 37, "N": 100, "K": 72}, ()),
    ("gemm_row_softmax.arg", "gemm_row_softmax", {"M": 100, "N": 50, "K": 72}, ()),
    ("gemm_col_normalize.arg", "gemm_col_normalize", {"M": 50, "N": 136, "K": 72}, ()),
    ("int_ops.arg", "int_ops", {"M": 37, "N": 100}, ()),
    ("count_positive.arg", "count_positive", {"M": 37, "N": 200}, ()),
    ("masked_tail.arg", "masked_tail", {"N": 1000}, ()),
    ("l2norm_rows.arg", "l2norm_rows", {"M": 37, "N": 300}, ()),
    ("lastblock_if.arg", "lastblock_if", {"N": 1000}, ()),
    ("outer_product.arg", "outer_product", {"M": 45, "N": 100}, ()),
    ("dot_atomic.arg", "dot_atomic", {"N": 5000}, ()),
    ("global_max_norm.arg", "global_max_norm", {"M": 13, "N": 50}, ()),
    ("odd_tiles.arg", "odd_tiles", {"M": 37, "N": 90}, ()),
    ("small_tile_many_threads.arg", "small_tile_many_threads", {"M": 3, "N": 13}, ()),
    ("col_softmax.arg", "col_softmax", {"M": 100, "N": 70}, ()),
    ("transposed_reduce.arg", "transposed_reduce", {"M": 30, "N": 100}, ()),
    ("gemm_select_residual.arg", "gemm_select_residual", {"M": 100, "N": 136, "K": 72}, ()),
    ("bf16_rowmax.arg", "bf16_rowmax", {"M": 37, "N": 200}, ()),
    ("fused_mlp.arg", "fused_mlp", {"M": 100, "D": 64, "F": 128}, ()),
    ("wgmma_two_wg_colmax.arg", "wgmma_two_wg_colmax", {"M": 100, "N": 50, "K": 40}, ()),
    ("mma8warps_rownorm.arg", "mma8warps_rownorm", {"M": 100, "N": 120, "K": 72}, ()),
    ("wgmma_rownorm_2wg.arg", "wgmma_rownorm_2wg", {"M": 100, "N": 120, "K": 72}, ()),
    ("reg_a_operand.arg", "reg_a_operand", {"M": 100, "N": 136, "K": 72}, ()),
    ("reg_a_operand_wgmma.arg", "reg_a_operand_wgmma", {"M": 100, "N": 136, "K": 72}, ()),
    ("f16_gemm.arg", "f16_gemm", {"M": 100, "N": 136, "K": 72}, ()),
    ("two_kernels.arg", "rowmax", {"M": 37, "N": 300}, ()),
    ("two_kernels.arg", "sub_exp", {"M": 37, "N": 300}, ()),
    ("rms_residual.py", "rms_residual", {"M": 37, "N": 300}, ()),
    ("offset_copy.arg", "offset_copy", {"N": 1000}, ()),
    # round 2: other styles (backward passes, two outputs, two passes over column tiles, routing with an
    # index output, variable-length rows, in-out GEMM, batched and decode GEMMs, block-id branches, a 1-D
    # grid over 2-D tiles, causal scores, carried maxima and counts, persistent tiles, the Python spelling)
    ("softmax_bwd.arg", "softmax_bwd", {"M": 37, "N": 200}, ()),
    ("layernorm_residual.arg", "layernorm_residual", {"M": 37, "N": 100}, ()),
    ("rmsnorm_two_pass.arg", "rmsnorm_two_pass", {"M": 5, "N": 300}, ()),
    ("top1_route.arg", "top1_route", {"T": 37, "E": 50}, ()),
    ("masked_mean_len.arg", "masked_mean_len", {"M": 13, "N": 200}, ()),
    ("gemm_alpha_beta.arg", "gemm_alpha_beta", {"M": 100, "N": 70, "K": 72}, ()),
    ("gemm_dot_loaded.arg", "gemm_dot_loaded", {"M": 100, "N": 70, "K": 72}, ()),
    ("histogram.arg", "hist", {"N": 3001, "NB": 37}, ()),
    ("gemm_two_outputs.arg", "gemm_two_outputs", {"M": 100, "N": 136, "K": 72}, ()),
    ("bmm_strided.arg", "bmm_strided", {"BATCH": 3, "M": 50, "N": 70, "K": 72}, ()),
    ("if_first_block.arg", "if_first_block", {"N": 1000}, ()),
    ("tiles_1d_grid.arg", "tiles_1d_grid", {"M": 37, "N": 100}, ()),
    ("causal_scores.arg", "causal_scores", {"SQ": 100, "SK": 150, "D": 40}, ()),
    ("gemv_decode.arg", "gemv_decode", {"M": 5, "N": 100, "K": 200}, ()),
    ("cummax_tiles.arg", "cummax_tiles", {"M": 37, "N": 300, "NT": 5}, ()),
    ("count_in_range.arg", "count_in_range", {"M": 37, "N": 300}, ()),
    ("two_outputs_by_axis.arg", "two_outputs_by_axis", {"M": 37, "N": 200}, ()),
    ("geglu_py.py", "geglu_py", {"M": 37, "F": 100, "F2": 200}, ()),
    ("cross_entropy_bwd.arg", "cross_entropy_bwd", {"M": 13, "V": 700}, ()),
    ("gemm_bias_relu_f16.arg", "gemm_bias_relu_f16", {"M": 100, "N": 136, "K": 72}, ()),
    ("dropout_scale_mask.arg", "dropout_scale_mask", {"M": 37, "N": 300}, ()),
    ("persistent_axpy.arg", "persistent_axpy", {"N": 3001}, ()),
    ("logsumexp_online.arg", "logsumexp_online", {"M": 37, "N": 300}, ()),
    # round 3: 8-bit integers (their inputs span the whole i8 range; products widened to i32 first)
    ("int8_rowdot.arg", "int8_rowdot", {"R": 37, "K": 300}, ()),
    ("dequant_i8.arg", "dequant_i8", {"M": 37, "N": 300}, ()),
    # round 4 (2026-12-07): |x| of an unsigned tile (CUDA's abs has no unsigned overload), f64 math (the
    # interpreter computed exp in f32), u8 and bool outputs (their poison), an f32 output through bf16
    # arithmetic (held to bf16's bound), a row sum and a column sum of one tile added and an accumulator
    # added to its transpose (false "sums X twice" verdicts), log2 and rsqrt in the reference
    ("u32_abs.arg", "absu", {"N": 300}, ()),
    ("f64_exp.arg", "f64exp", {"N": 300}, ()),
    ("u8_copy.arg", "copy_u8", {"N": 300}, ()),
    ("bool_positive.arg", "pos", {"N": 300}, ()),
    ("bf16_square.arg", "sq", {"N": 300}, ("Y",)),
    ("rowsum_plus_colsum.arg", "rowsum_plus_colsum", {"M": 29, "N": 50}, ()),
    ("gemm_plus_transpose.arg", "gemm_plus_transpose", {"M": 64, "N": 64, "K": 32}, ()),
    ("log2_rsqrt.arg", "l2r", {"M": 37, "N": 100}, ()),
    ("store_bare_mma.arg", "store_bare_mma", {"M": 50, "N": 37, "K": 20}, ()),  # store(C[...], mma(...))
]
IDS = [f"{k[1]}" for k in KERNELS]

# Kernels the verifier does not prove today although they are correct; their code generation is tested
# here all the same. Strict: a kernel that starts verifying must leave this list.
VERIFIER_FALSE_ALARMS = {
}


def _kernel(file: str, name: str):
    return argus.load(HERE / file, name).lower()


def test_every_user_kernel_is_listed() -> None:
    files = {p.name for p in HERE.iterdir() if p.suffix in (".arg", ".py")}
    assert files == {f for f, *_ in KERNELS}


@pytest.mark.parametrize(("file", "name", "dims", "loose"), KERNELS, ids=IDS)
def test_user_kernel_builds(file: str, name: str, dims: dict, loose: tuple) -> None:
    k = _kernel(file, name)
    assert build_refusal(k) is None  # what `check` runs before proving: the generator takes it
    assert build(k, arch="sm_90a").result.cubin[:4] == b"\x7fELF"


EMULATED = [c for c in KERNELS if "wgmma" not in (HERE / c[0]).read_text()]


@pytest.mark.skipif(not cpusim.available(), reason="needs g++")
@pytest.mark.parametrize(("file", "name", "dims", "loose"), EMULATED, ids=[c[1] for c in EMULATED])
def test_user_kernel_runs_on_the_cpu(file: str, name: str, dims: dict, loose: tuple) -> None:
    k = _kernel(file, name)
    assert cpusim.emulatable(generate(k))
    for c in cpusim.check(k, dims, seed=11, criteria={o: DTYPES["bf16"] for o in loose}):
        assert c.ok, c.describe()


@pytest.mark.slow
@pytest.mark.parametrize(("file", "name", "dims", "loose"), [
    pytest.param(*c, marks=pytest.mark.xfail(reason=VERIFIER_FALSE_ALARMS[c[1]], strict=True))
    if c[1] in VERIFIER_FALSE_ALARMS else c for c in KERNELS], ids=IDS)
def test_user_kernel_verifies(file: str, name: str, dims: dict, loose: tuple) -> None:
    """`argus check`'s verdict: verified (atomic adds included: argus/analysis/atomic_terms.py)."""
    k = argus.load(HERE / file, name)
    v = k.verify()
    assert v.status == "verified", [f.message for f in v.findings]


THREE_AXES = """
kernel tile3d(X: f32[B, M, N], S: f32[B, N]):
    param BB = 2
    param BM = 16
    param BN = 64
    launch grid=(cdiv(B, BB), cdiv(N, BN)), threads=128
    assume(M <= BM)
    b = block_id(0)
    n = block_id(1)
    x = load(X[b * BB : +BB, 0 : +BM, n * BN : +BN])
    store(S[b * BB : +BB, n * BN : +BN], sum(x, axis=1))
reference:
    S = sum(X, axis=1)
"""


def test_three_axis_register_tile_is_refused(tmp_path: Path) -> None:
    """A register tile of three axes has no register layout: `check` refuses it at the expression that
    makes it (never an internal error, never verified-then-refused)."""
    p = tmp_path / "tile3d.arg"
    p.write_text(THREE_AXES)
    with pytest.raises(ArgusError) as exc:
        argus.load(p).verify()
    d = exc.value.diagnostics[0]
    assert d.code == "codegen" and d.span.line == 10 and d.span.col == 9
    assert "register tile of 3 axes" in d.message and "index the leading axes" in " ".join(d.notes)
