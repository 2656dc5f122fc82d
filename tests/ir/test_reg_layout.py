"""Register layouts beyond mma fragments: reduction plans, slices, transposes, equivalence, layout ties."""

from __future__ import annotations

import numpy as np
import pytest

from argus.dsl.parser import parse
from argus.ir import nodes as ir
from argus.ir.build import build_kernel
from argus.ir.reg_layout import (
    blocked_reg_layout,
    equivalent,
    fragment_of,
    reduction_plan,
    rows_reg_layout,
    slice_layout,
    transposed_layout,
    uniform,
)
from argus.ir.transform import scope_stmts

WGMMA = ir.RegLayout("mma", (128, 128), 256, ir.FragmentLayout("wgmma", (128, 128), 2, 1, (64, 128, 16)))
MMA_SYNC = ir.RegLayout("mma", (64, 128), 128, ir.FragmentLayout("mma.sync", (64, 128), 2, 2, (16, 8, 16)))
LAYOUTS = [
    blocked_reg_layout((4, 1024), 128, 4),
    blocked_reg_layout((1, 4096), 512, 2),
    blocked_reg_layout((64, 64), 128, 2),
    blocked_reg_layout((8, 96), 96, 4),  # 12 threads per row: not a power of two (shared memory only)
    blocked_reg_layout((16, 128), 256, 4),
    blocked_reg_layout((128,), 128, 4),
    blocked_reg_layout((4, 1024), 128, 2, warp_rows=True),  # a warp per row
    blocked_reg_layout((16, 256), 128, 4, warp_rows=True),  # a warp per row, four rows a warp
    blocked_reg_layout((2, 1024), 256, 2, warp_rows=True),  # four warps per row
    WGMMA,
    MMA_SYNC,
]


def _reduce_by_plan(lay: ir.RegLayout, axis: int, x: np.ndarray) -> np.ndarray:
    """Simulate the generated reduction: per-thread fold by the slot map, XOR lanes, cross partials."""
    f = fragment_of(lay)
    plan = reduction_plan(lay, axis)
    rows, cols = f.table()
    vals = x[rows, cols] if x.ndim == 2 else x[cols]
    smap = np.asarray(plan.slot_map(np.arange(f.slots)))
    part = np.zeros((f.threads, plan.fragment.slots))
    for s in range(f.slots):
        part[:, smap[s]] += vals[:, s]
    t = np.arange(f.threads)
    for m in plan.lanes:
        part = part + part[t ^ m]
    if plan.cross:  # every thread adds the partials of the threads that differ in the cross modes only
        total = np.zeros_like(part)
        mults = np.cumprod([1] + [s for _, s in plan.cross])[:-1]
        for p in range(plan.partials):
            src = t.copy()
            for (prefix, size), mult in zip(plan.cross, mults):
                src = src - (src // prefix) % size * prefix + (p // mult) % size * prefix
            total += part[src]
        part = total
    return part


@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda lay: f"{lay.kind}{lay.shape}/{lay.threads}")
@pytest.mark.parametrize("axis", [0, 1])
def test_reduction_plan_sums_every_line_once(lay: ir.RegLayout, axis: int) -> None:
    if len(lay.shape) == 1 and axis == 0:
        pytest.skip("a 1-D tile has one axis")
    rng = np.random.default_rng(1)
    x = rng.integers(-9, 9, lay.shape).astype(np.float64)
    fa = axis if len(lay.shape) == 2 else 1
    got = _reduce_by_plan(lay, fa, x)
    want = x.sum(axis=axis) if len(lay.shape) == 2 else np.array([x.sum()])
    _, kept = reduction_plan(lay, fa).fragment.table()
    assert (got == want[kept]).all()


@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda lay: f"{lay.kind}{lay.shape}/{lay.threads}")
def test_slices_hold_what_the_parent_holds(lay: ir.RegLayout) -> None:
    f = fragment_of(lay)
    rows, cols = f.table()
    for keep in ((0, 1) if len(lay.shape) == 2 else (0,)):
        s = slice_layout(lay, keep)
        plan = reduction_plan(lay, 1 - keep if len(lay.shape) == 2 else 1)
        _, idx = fragment_of(s).table()
        smap = np.asarray(plan.slot_map(np.arange(f.slots)))
        kept = (rows if keep == 0 else cols) if len(lay.shape) == 2 else np.zeros_like(rows)
        assert (idx[:, smap] == kept).all()


def test_mma_rows_are_the_canonical_row_slice() -> None:
    rows = slice_layout(WGMMA, 0)
    assert rows.kind == "rows" and rows == rows_reg_layout(WGMMA)
    generic = ir.RegLayout("slice", (128,), 256, parent=WGMMA, keep=0)
    assert equivalent(rows, generic)
    narrow = ir.RegLayout("mma", (128, 64), 256, ir.FragmentLayout("wgmma", (128, 64), 2, 1, (64, 64, 16)))
    assert equivalent(slice_layout(narrow, 0), rows)  # accumulators of other widths share their rows
    assert not equivalent(slice_layout(WGMMA, 1), slice_layout(narrow, 1))


def test_transpose_swaps_the_fragment_and_undoes_itself() -> None:
    lay = blocked_reg_layout((32, 64), 128, 4)
    t = transposed_layout(lay)
    assert t.shape == (64, 32) and transposed_layout(t) == lay
    (r, c), (tr, tc) = fragment_of(lay).table(), fragment_of(t).table()
    assert (r == tc).all() and (c == tr).all()


def test_uniform_is_one_element_in_every_thread() -> None:
    assert uniform(blocked_reg_layout((1,), 128))
    assert uniform(slice_layout(blocked_reg_layout((256,), 128, 4), 0))
    assert not uniform(blocked_reg_layout((4,), 128))


def test_cross_warp_plan_names_its_modes() -> None:
    plan = reduction_plan(blocked_reg_layout((1, 4096), 512, 2), 1)
    assert plan.lanes == (1, 2, 4, 8, 16) and plan.cross == ((32, 16),) and plan.partials == 16
    assert reduction_plan(blocked_reg_layout((64, 64), 128, 2), 1).cross == ()


SRC = """
kernel k(X: f32[M, N], G: f32[N], Y: f32[M, N], S: f32[N]):
    param BM = 16
    param BN = 256
    launch grid=(cdiv(M, BM),), threads=128
    r = block_id(0)
    x = load(X[r * BM : +BM, 0 : +BN])
    g = load(G[0 : +BN])
    m = max(x, axis=1)
    y = (x - m[:, None]) * g
    store(Y[r * BM : +BM, 0 : +BN], y)
    store(S[0 : +BN], sum(y, axis=0))
reference:
    Y = (X - max(X, axis=1, keepdims=True)) * G
    S = sum(Y, axis=0)
"""


def test_vectors_take_the_slice_of_the_tile_they_meet() -> None:
    k = build_kernel(parse(SRC, "k.arg").kernels[0], {})
    lays = {s.name: s.layout for s in scope_stmts(k.body) if isinstance(s, ir.Let)}
    x = lays["x"]
    assert x.kind == "blocked" and lays["y"] == x
    assert equivalent(lays["m"], slice_layout(x, 0))  # a row reduction lands in x's rows
    assert equivalent(lays["g"], slice_layout(x, 1))  # a vector broadcast along rows is held as x's columns


def test_plan_check_refuses_a_plan_that_misses_threads() -> None:
    """_check_plan is what makes a plan trustworthy: drop a lane mask or a cross mode and it refuses."""
    import dataclasses

    from argus.ir.reg_layout import _check_plan

    lay = blocked_reg_layout((1, 4096), 512, 2)
    plan = reduction_plan(lay, 1)
    f = fragment_of(lay)
    _check_plan(f, 0, plan)
    for bad in (dataclasses.replace(plan, lanes=plan.lanes[:-1]), dataclasses.replace(plan, cross=())):
        with pytest.raises(ValueError):
            _check_plan(f, 0, bad)


ROWS_SRC = """
kernel k(X: f32[M, N], Y: f32[M, N]):
    param BM = 16
    param BN = 256
    launch grid=(cdiv(M, BM),), threads=128
    r = block_id(0)
    x = load(X[r * BM : +BM, 0 : +BN])
    e = exp(x - max(x, axis=1)[:, None])
    store(Y[r * BM : +BM, 0 : +BN], e / sum(e, axis=1)[:, None])
reference:
    Y = softmax(X, axis=1)
"""


def test_a_tile_reduced_along_its_rows_gives_warps_whole_rows() -> None:
    """Softmax over 16 rows on 4 warps: each warp holds 4 whole rows, so both reductions are shuffles only
    (no cross-warp partials through shared memory); without the rule a row spans 2 warps."""
    k = build_kernel(parse(ROWS_SRC, "k.arg").kernels[0], {})
    x = next(s.layout for s in scope_stmts(k.body) if isinstance(s, ir.Let) and s.name == "x")
    assert x.kind == "blocked" and x.row_threads == 32
    rows, _ = fragment_of(x).table()
    assert all(len(set(rows[w * 32:(w + 1) * 32].ravel())) == 4 for w in range(4))  # 4 rows a warp
    assert reduction_plan(x, 1).cross == ()
    plain = blocked_reg_layout((16, 256), 128, 4)
    assert reduction_plan(plain, 1).cross != ()


def test_warp_rows_leave_a_single_row_and_short_rows_alone() -> None:
    assert blocked_reg_layout((1, 4096), 512, 2, warp_rows=True).row_threads == 0  # one row: every thread on it
    assert blocked_reg_layout((2, 1024), 256, 2, warp_rows=True).row_threads == 128  # rows fewer than warps
    # rows shorter than a warp's runs: threads along a row stay gcd(runs, threads), as without the rule
    a, b = (fragment_of(blocked_reg_layout((64, 64), 128, 2, warp_rows=w)).table() for w in (True, False))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
