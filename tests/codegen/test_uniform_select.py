"""select() with an index-tile condition: the per-element compare and select run only in tiles where a
block-uniform bound test says the condition can fail (kv blocks at SKV or on the causal diagonal)."""

from __future__ import annotations

import pytest

from argus.codegen.compile import build
from argus.codegen.emit import generate
from argus.ir.build import build_file, build_source
from tests.conftest import EXAMPLES


def _between(src: str, a: str, b: str) -> str:
    i = src.index(a)
    return src[i:src.index(b, i)]


def test_flash_attention_masks_only_boundary_blocks() -> None:
    src = generate(build_file(EXAMPLES / "flash_attention.arg", {"CAUSAL": True})).source
    # keys past SKV: max(kpos) = j * BKV + BKV - 1 < SKV; causal: max(kpos) <= min(qpos) = qb * BQ + SKV - SQ
    assert src.count("if (!((ag_ix2 + 63) < SKV)) {") == 1
    assert src.count("if (!((ag_ix2 + 63) <= (0 + ag_ix1))) {") == 1
    assert "ag_ix1 = ((qb * 256) + (SKV - SQ));" in src  # BQ = 256 for D = 128
    guarded = _between(src, "if (!((ag_ix2 + 63) < SKV)) {", "}")
    assert "? sc[ag_i] : (-__int_as_float(0x7f800000))" in guarded


KERNEL = """
kernel clip(X: f32[R, C], Y: f32[R, C], Z: f32[R, C]):
    launch grid=(cdiv(R, 32), cdiv(C, 64)), threads=128
    r = block_id(0) * 32
    c = block_id(1) * 64
    x = load(X[r : +32, c : +64], masked=True)
    rows = r + arange(32)
    cols = 2 * (c + arange(64)) - 1
    y = select((rows[:, None] < R - 3) & (cols[None, :] >= 7), x * 2.0, x)
    z = select(x > 0.0, x, -x)
    store(Y[r : +32, c : +64], y)
    store(Z[r : +32, c : +64], z)
reference:
    Y = where((arange(R)[:, None] < R - 3) * (2 * arange(C)[None, :] - 1 >= 7), X * 2.0, X)
    Z = abs(X)
"""
# dims where some tiles are wholly inside the condition, some straddle it and some are past R / C
DIMS = {"R": 100, "C": 200}


def test_bounds_of_sums_products_and_conjunctions() -> None:
    b = build(build_source(KERNEL), arch="sm_90a", cache=False)
    src = b.generated.source
    # y's condition: max(rows) < R - 3 and min(cols) = 2 * (c + 0) - 1 >= 7; a new value, so if / else
    assert "// select: per element only where" in src
    cond = _between(src, "// select: per element only where ", " fails")
    assert "+ 31) < (R - 3)" in cond and "(2 * (" in cond and ">= 7" in cond and "&&" in cond, cond
    head = _between(src, "// select: per element only where", "else")
    assert "? " not in head.split("\n", 2)[2], head  # the all-true branch computes x * 2 without a select
    # z's condition reads a register tile: no bound, the plain per-element select
    assert src.count("// select: per element only where") == 1
    assert b.result.binary


def test_guarded_kernel_in_the_interpreter() -> None:
    """The program (not the guard) is what the interpreter runs: its reference holds at DIMS."""
    from argus.interp.run import run_interp

    res = run_interp(build_source(KERNEL), DIMS, seed=3)
    assert res.ok, [c.describe() for c in res.checks]


@pytest.mark.gpu
def test_guarded_kernel_on_the_gpu() -> None:
    """The guard on the GPU: tiles wholly inside the condition, straddling it and past R / C all match the
    float64 reference (fresh random inputs, poisoned outputs)."""
    from argus.codegen.nvrtc import detect_arch

    arch = detect_arch(0)
    if arch is None:
        pytest.skip("needs an NVIDIA GPU (run on the device machine)")
    from argus.runtime.bench import check_on_gpu
    from argus.runtime.launch import GpuKernel

    checks, _ = check_on_gpu(GpuKernel(build(build_source(KERNEL), arch=arch), 0), DIMS, seed=5)
    assert all(c.ok for c in checks), [c.describe() for c in checks]
