"""MMA register fragments and wgmma shared-memory operand layouts against the PTX ISA tables."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import z3

from argus.ir.fragments import (
    Fragment,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    mma_sync_block_fragment,
    smem_operand_layout,
    smem_tile_layout,
    tile_fragment,
    wgmma_block_fragment,
    wgmma_canonical_layout,
    wgmma_descriptor_strides,
    wgmma_m64k16_a,
    wgmma_m64nNk16_d,
)
from argus.ir.swizzle import SWIZZLE_MODES

# ------------------------------------------------------------------------------------------------
# The PTX ISA formulas, transcribed independently of the layout encoding
# ------------------------------------------------------------------------------------------------


def ptx_mma_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    row = g if (i < 2 or 4 <= i < 6) else g + 8
    col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def ptx_mma_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def ptx_mma_c(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + (8 if i >= 2 else 0), t * 2 + (i & 1)


def ptx_wgmma_d(thread: int, i: int) -> tuple[int, int]:
    w, lane = thread // 32, thread % 32
    g, t = lane >> 2, lane % 4
    return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + t * 2 + (i & 1)


def check_against(frag: Fragment, formula: Callable[[int, int], tuple[int, int]]) -> None:
    rows, cols = frag.table()
    for t, s in itertools.product(range(frag.threads), range(frag.slots)):
        assert (rows[t, s], cols[t, s]) == formula(t, s), (frag.name, t, s)


# ------------------------------------------------------------------------------------------------
# Instruction atoms
# ------------------------------------------------------------------------------------------------


def test_mma_a_hand_table() -> None:
    a = mma_m16n8k16_a()
    assert (a.threads, a.slots, a.tile) == (32, 8, (16, 16))
    expected = {
        0: [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)],
        1: [(0, 2), (0, 3), (8, 2), (8, 3), (0, 10), (0, 11), (8, 10), (8, 11)],
        4: [(1, 0), (1, 1), (9, 0), (9, 1), (1, 8), (1, 9), (9, 8), (9, 9)],
        31: [(7, 6), (7, 7), (15, 6), (15, 7), (7, 14), (7, 15), (15, 14), (15, 15)],
    }
    for lane, coords in expected.items():
        assert [a.coord(lane, s) for s in range(8)] == coords
    check_against(a, ptx_mma_a)


def test_mma_b_and_c_hand_tables() -> None:
    b, c = mma_m16n8k16_b(), mma_m16n8k16_c()
    assert [b.coord(0, s) for s in range(4)] == [(0, 0), (1, 0), (8, 0), (9, 0)]
    assert [b.coord(1, s) for s in range(4)] == [(2, 0), (3, 0), (10, 0), (11, 0)]
    assert [b.coord(4, s) for s in range(4)] == [(0, 1), (1, 1), (8, 1), (9, 1)]
    assert [b.coord(31, s) for s in range(4)] == [(6, 7), (7, 7), (14, 7), (15, 7)]
    assert [c.coord(0, s) for s in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert [c.coord(5, s) for s in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    assert [c.coord(31, s) for s in range(4)] == [(7, 6), (7, 7), (15, 6), (15, 7)]
    check_against(b, ptx_mma_b)
    check_against(c, ptx_mma_c)


@pytest.mark.parametrize("n", [8, 16, 64, 136, 256])
def test_wgmma_d_matches_ptx(n: int) -> None:
    d = wgmma_m64nNk16_d(n)
    assert (d.threads, d.slots, d.tile) == (128, n // 2, (64, n))
    check_against(d, ptx_wgmma_d)
    assert d.is_bijective()


def test_wgmma_hand_table() -> None:
    d = wgmma_m64nNk16_d(16)
    assert [d.coord(0, s) for s in range(8)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
    # thread 37 = warp 1, lane 5 (groupID 1, tig 1)
    assert [d.coord(37, s) for s in range(4)] == [(17, 2), (17, 3), (25, 2), (25, 3)]
    assert d.coord(127, 7) == (63, 15)
    assert str(d.tv_layout()) == "((4,8,4),(2,2,2)):((128,1,16),(64,8,512))"  # CuTe's CLayout_64x16
    with pytest.raises(ValueError):
        wgmma_m64nNk16_d(12)
    assert wgmma_m64k16_a().table()[0].tolist() == d.table()[0].tolist()


def test_atoms_bijective_and_inverse() -> None:
    for frag in (mma_m16n8k16_a(), mma_m16n8k16_b(), mma_m16n8k16_c(), wgmma_m64nNk16_d(64), wgmma_m64k16_a()):
        assert frag.is_bijective(), frag.name
        thread, slot = frag.inverse_table()
        rows, cols = frag.table()
        assert (rows[thread, slot] == np.arange(frag.tile[0])[:, None]).all()
        assert (cols[thread, slot] == np.arange(frag.tile[1])[None, :]).all()
        r, c = np.indices(frag.tile)
        t2, s2 = frag.owner(r, c)  # closed form agrees with the table
        assert (t2 == thread).all() and (s2 == slot).all()
    # mma.sync C: which lane owns row 9, col 5? groupID 1, tig 2 -> lane 6, slot 3
    assert mma_m16n8k16_c().owner(9, 5) == (6, 3)


def ev(expr: object, **values: int) -> int:
    """Evaluate a z3 expression over the variables named in ``values``."""
    if isinstance(expr, int):
        return expr
    subs = [(z3.Int(name), z3.IntVal(v)) for name, v in values.items()]
    return z3.simplify(z3.substitute(expr, *subs)).as_long()


def test_z3_coord_and_owner() -> None:
    t, s, r, c = z3.Ints("t s r c")
    for frag in (mma_m16n8k16_a(), wgmma_block_fragment(128, 128, 2, 1)):
        row_e, col_e = frag.coord(t, s)
        own_t, own_s = frag.owner(r, c)
        for tv, sv in [(0, 0), (5, 3), (frag.threads - 1, frag.slots - 1), (frag.threads // 2 + 5, 1)]:
            assert (ev(row_e, t=tv, s=sv), ev(col_e, t=tv, s=sv)) == frag.coord(tv, sv)
            rv, cv = frag.coord(tv, sv)
            assert (ev(own_t, r=rv, c=cv), ev(own_s, r=rv, c=cv)) == (tv, sv)


def test_z3_proves_fragment_injective() -> None:
    # The closed forms are linear with div/mod by constants, so z3 proves properties outright.
    frag = mma_m16n8k16_a()
    t1, s1, t2, s2 = z3.Ints("t1 s1 t2 s2")
    solver = z3.Solver()
    solver.add(0 <= t1, t1 < 32, 0 <= t2, t2 < 32, 0 <= s1, s1 < 8, 0 <= s2, s2 < 8)
    solver.add(z3.Or(t1 != t2, s1 != s2))
    r1, c1 = frag.coord(t1, s1)
    r2, c2 = frag.coord(t2, s2)
    solver.add(r1 == r2, c1 == c2)
    assert solver.check() == z3.unsat


# ------------------------------------------------------------------------------------------------
# CTA tiling
# ------------------------------------------------------------------------------------------------


def test_mma_sync_block_c() -> None:
    c = mma_sync_block_fragment("C", 128, 128, 32, warps_m=2, warps_n=4)
    assert (c.threads, c.slots) == (256, 64) and c.is_bijective()
    assert c.coord(32, 0) == (64, 0)  # warp 1 = grid (1, 0): second 64-row stripe
    assert c.coord(64, 0) == (0, 32)  # warp 2 = grid (0, 1): second 32-column stripe
    assert c.coord(0, 4) == (16, 0)  # next atom down (rep_m = 1)
    assert c.coord(0, 16) == (0, 8)  # next atom right (rep_n = 1)
    assert c.coord(255, 63) == (127, 127)
    assert c.owner(64, 0) == (32, 0) and c.owner(127, 127) == (255, 63)
    ci = mma_sync_block_fragment("C", 128, 128, 32, warps_m=2, warps_n=4, interleaved=True)
    assert ci.is_bijective()
    assert ci.coord(32, 0) == (16, 0) and ci.coord(0, 4) == (32, 0)
    assert ci.coord(64, 0) == (0, 8) and ci.coord(0, 16) == (0, 32)


def test_mma_sync_block_operands_replicate() -> None:
    a = mma_sync_block_fragment("A", 128, 128, 32, warps_m=2, warps_n=4)
    b = mma_sync_block_fragment("B", 128, 128, 32, warps_m=2, warps_n=4)
    assert a.tile == (128, 32) and b.tile == (32, 128)
    assert (a.count_table() == 4).all()  # the 4 warps of a row of the grid share A
    assert (b.count_table() == 2).all()
    assert a.coord(64, 0) == a.coord(0, 0) == (0, 0)  # warp 2 = grid (0, 1) holds warp 0's A
    assert not a.is_bijective()
    with pytest.raises(ValueError):
        a.inverse_table()


def test_wgmma_block() -> None:
    d = wgmma_block_fragment(128, 256, warpgroups_m=2)
    assert (d.threads, d.slots) == (256, 128) and d.is_bijective()
    assert d.coord(128, 0) == (64, 0)
    assert d.coord(0, 127) == (8, 249)
    wide = wgmma_block_fragment(64, 512)  # two n256 instructions per warpgroup
    assert (wide.threads, wide.slots) == (128, 256) and wide.is_bijective()
    assert wide.coord(0, 128) == (0, 256)
    with pytest.raises(ValueError):
        tile_fragment(mma_m16n8k16_c(), (24, 8), (1, 1))


# ------------------------------------------------------------------------------------------------
# Shared-memory operand layouts
# ------------------------------------------------------------------------------------------------


def hw_swizzle_bytes(addr: int, mode: int) -> int:
    if mode == 0:
        return addr
    b = {32: 1, 64: 2, 128: 3}[mode]
    mask = (1 << b) - 1
    return (addr & ~(mask << 4)) | ((((addr >> 4) & mask) ^ ((addr >> 7) & mask)) << 4)


def test_smem_tile_hand_values() -> None:
    t = smem_tile_layout(64, 64, elem_bytes=2, swizzle_bytes=128)
    assert str(t) == "Sw<3,3,3> o 0 o (64,64):(64,1)"
    assert t(0, 0) == 0 and t(1, 0) == 72 and t(3, 17) == 201 and t(9, 0) == 584 and t(0, 63) == 63
    assert str(smem_tile_layout(64, 128)) == "Sw<3,3,3> o 0 o (64,(64,2)):(64,(1,4096))"
    assert str(smem_tile_layout(64, 32, swizzle_bytes=0)) == "Sw<0,3,3> o 0 o (64,(8,4)):(8,(1,512))"
    with pytest.raises(ValueError):
        smem_tile_layout(64, 48)  # 48 bf16 is not a whole number of 128-byte rows


@pytest.mark.parametrize("mode", SWIZZLE_MODES)
@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
def test_smem_tile_is_what_tma_writes(mode: int, elem_bytes: int) -> None:
    """Emulate TMA: boxes of rows x (row_bytes / e) elements, row-major, swizzled on bytes."""
    row_bytes = max(mode, 16)
    w = row_bytes // elem_bytes
    rows, cols = 16, 2 * w
    lay = smem_tile_layout(rows, cols, elem_bytes, mode)
    assert lay.is_bijective_on()
    for r, c in itertools.product(range(rows), range(cols)):
        box, cc = divmod(c, w)
        addr = box * rows * row_bytes + hw_swizzle_bytes(r * row_bytes + cc * elem_bytes, mode)
        assert lay(r, c) * elem_bytes == addr


def test_swizzle_128b_spreads_column_chunks() -> None:
    # ldmatrix-style reads of one 16-byte column chunk over 8 rows hit 8 different chunk slots
    t = smem_tile_layout(64, 64)
    for r0, chunk in itertools.product(range(0, 64, 8), range(8)):
        slots = {(t(r0 + i, chunk * 8) * 2 // 16) % 8 for i in range(8)}
        assert len(slots) == 8


def test_unswizzled_core_matrices_are_contiguous() -> None:
    t = smem_operand_layout(64, 32, "K", 2, 0)
    for r0, c0 in itertools.product(range(0, 64, 8), range(0, 32, 8)):
        offs = sorted(t(r0 + i, c0 + j) for i in range(8) for j in range(8))
        assert offs == list(range(offs[0], offs[0] + 64)) and offs[0] % 64 == 0


def test_descriptor_strides() -> None:
    assert wgmma_descriptor_strides(128, 64, "K", 2, 128) == (128 * 128, 1024)
    assert wgmma_descriptor_strides(128, 64, "K", 2, 0) == (128 * 16, 128)  # LBO = BM*16, SBO = 128
    assert wgmma_descriptor_strides(128, 64, "MN", 2, 128) == (64 * 128, 1024)


@pytest.mark.parametrize("mode", SWIZZLE_MODES)
@pytest.mark.parametrize("major", ["K", "MN"])
def test_tile_views_match_ptx_canonical_layouts(mode: int, major: str) -> None:
    """Each wgmma's 64x16 (A) or Nx16 (B) view of a tile is the PTX canonical layout with the
    descriptor strides from ``wgmma_descriptor_strides`` and the view's start offset."""
    mn_tile, k_tile = 128, 64
    op = smem_operand_layout(mn_tile, k_tile, major, 2, mode)  # type: ignore[arg-type]
    assert op.is_bijective_on()
    lbo, sbo = wgmma_descriptor_strides(mn_tile, k_tile, major, 2, mode)  # type: ignore[arg-type]
    for mn_instr in (64, 128) if major == "MN" else (64,):
        for i, j in itertools.product(range(mn_tile // mn_instr), range(k_tile // 16)):
            view = op.local_tile((mn_instr, 16), (i, j))
            canon = wgmma_canonical_layout(major, mn_instr, 16, lbo, sbo, 2, mode, offset=view.offset)  # type: ignore[arg-type]
            assert (view.to_table() == canon.to_table()).all(), (major, mode, mn_instr, i, j)
            assert view(3, 5) == op(i * mn_instr + 3, j * 16 + 5)
