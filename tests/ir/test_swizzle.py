"""Swizzles: hand tables, the byte-level hardware rule, bijectivity, z3 evaluation, composed layouts."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.ir.layout import Layout
from argus.ir.swizzle import SWIZZLE_MODES, ComposedLayout, Swizzle, byte_swizzle, smem_swizzle


def hw_swizzle_bytes(addr: int, mode: int) -> int:
    """The hardware rule written out independently: 16-byte chunk bits [4, 4+b) ^= bits [7, 7+b)."""
    if mode == 0:
        return addr
    b = {32: 1, 64: 2, 128: 3}[mode]
    mask = (1 << b) - 1
    chunk = (addr >> 4) & mask
    row = (addr >> 7) & mask
    return (addr & ~(mask << 4)) | ((chunk ^ row) << 4)


def test_hand_tables() -> None:
    # Swizzle(1,0,1): bit 1 XORed into bit 0
    assert Swizzle(1, 0, 1).to_table(8).tolist() == [0, 1, 3, 2, 4, 5, 7, 6]
    # Swizzle(2,0,2) on a 4x4 row-major grid: column ^= row
    assert Swizzle(2, 0, 2).to_table(16).tolist() == [0, 1, 2, 3, 5, 4, 7, 6, 10, 11, 8, 9, 15, 14, 13, 12]
    # negative shift: bits [0,1) XORed into bit [2,3)
    assert Swizzle(1, 0, -2).to_table(8).tolist() == [0, 5, 2, 7, 4, 1, 6, 3]
    assert Swizzle(0, 4, 3).to_table(64).tolist() == list(range(64))
    sw = Swizzle(3, 3, 3)  # 128B mode on bf16 element offsets: chunk (c // 8) ^= row % 8
    assert sw(1 * 64 + 0) == 72
    assert sw(3 * 64 + 17) == 3 * 64 + 8 + 1  # chunk 2 ^ 3 = 1
    assert sw(9 * 64 + 0) == 9 * 64 + 8
    assert sw(7 * 64 + 63) == 7 * 64 + 7
    assert str(sw) == "Sw<3,3,3>" and sw.period == 512


def test_named_modes() -> None:
    assert byte_swizzle(128) == Swizzle(3, 4, 3)
    assert byte_swizzle(64) == Swizzle(2, 4, 3)
    assert byte_swizzle(32) == Swizzle(1, 4, 3)
    assert byte_swizzle(0).is_identity()
    assert smem_swizzle(128, 2) == Swizzle(3, 3, 3)
    assert smem_swizzle(128, 1) == Swizzle(3, 4, 3)
    assert smem_swizzle(64, 4) == Swizzle(2, 2, 3)
    assert smem_swizzle(32, 2) == Swizzle(1, 3, 3)
    with pytest.raises(ValueError):
        smem_swizzle(256, 2)
    with pytest.raises(ValueError):
        smem_swizzle(128, 3)


@pytest.mark.parametrize("mode", SWIZZLE_MODES)
@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_element_swizzle_matches_byte_rule(mode: int, elem_bytes: int) -> None:
    n_bytes = 4096
    elems = np.arange(n_bytes // elem_bytes)
    sw_e = smem_swizzle(mode, elem_bytes)
    hw = np.array([hw_swizzle_bytes(a, mode) for a in range(n_bytes)])
    assert (byte_swizzle(mode).to_table(n_bytes) == hw).all()
    # every byte of an element moves with the element's first byte (no element straddles a chunk)
    for b in range(elem_bytes):
        assert (hw[elems * elem_bytes + b] == sw_e(elems) * elem_bytes + b).all()
    # the pattern repeats every 8 rows of `mode` bytes, the base alignment TMA/wgmma require
    if mode:
        assert byte_swizzle(mode).period == 8 * mode


def test_bijectivity() -> None:
    for mode in SWIZZLE_MODES:
        for e in (1, 2, 4):
            sw = smem_swizzle(mode, e)
            assert sw.is_bijective(sw.period * 4)
    assert Swizzle(3, 0, 1).is_bijective(64)  # overlapping fields still invert (triangular)
    assert not Swizzle(2, 0, 0).is_bijective(16)  # S == 0 clears the target bits
    assert not Swizzle(1, 0, 1).is_bijective(3)  # 2 -> 3 leaves the domain
    assert not Swizzle(3, 3, 3).is_bijective(100)  # partial pattern block


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(0, 4), st.integers(-4, 4), st.integers(0, 5000), st.integers(0, 3))
def test_period_and_involution(b: int, m: int, s: int, x: int, k: int) -> None:
    if s < 0 and m < -s:
        m = -s
    sw = Swizzle(b, m, s)
    assert sw(x + k * sw.period) == sw(x) + k * sw.period
    if abs(s) >= b:  # disjoint fields: the swizzle is its own inverse
        assert sw(sw(x)) == x


def test_z3_matches_ints() -> None:
    x = z3.Int("x")
    bv = z3.BitVec("xb", 32)
    rng = np.random.default_rng(0)
    for sw in (Swizzle(3, 3, 3), Swizzle(2, 4, 3), Swizzle(1, 0, -2), Swizzle(3, 0, 1)):
        e_int, e_bv = sw(x), sw(bv)
        for v in rng.integers(0, 1 << 14, size=12).tolist():
            assert z3.simplify(z3.substitute(e_int, (x, z3.IntVal(v)))).as_long() == sw(v)
            assert z3.simplify(z3.substitute(e_bv, (bv, z3.BitVecVal(v, 32)))).as_long() == sw(v)


def test_z3_proves_swizzle_injective() -> None:
    # The encodings are exact enough for real proofs: no two offsets of a tile collide.
    # (Int-encoded XOR is correct but slow on such queries; bit-vectors solve the 128B case in ms.)
    x, y = z3.Ints("x y")
    sw = smem_swizzle(32, 2)
    s = z3.Solver()
    s.add(0 <= x, x < 256, 0 <= y, y < 256, x != y, sw(x) == sw(y))
    assert s.check() == z3.unsat
    xb, yb = z3.BitVecs("xb yb", 16)
    sw = smem_swizzle(128, 2)
    s = z3.Solver()
    s.add(z3.ULT(xb, 8192), z3.ULT(yb, 8192), xb != yb, sw(xb) == sw(yb))
    assert s.check() == z3.unsat
    s = z3.Solver()  # and a broken one is caught with a witness
    s.add(z3.ULT(xb, 64), z3.ULT(yb, 64), xb != yb, Swizzle(2, 0, 0)(xb) == Swizzle(2, 0, 0)(yb))
    assert s.check() == z3.sat
    m = s.model()
    assert Swizzle(2, 0, 0)(m[xb].as_long()) == Swizzle(2, 0, 0)(m[yb].as_long())


def test_composed_layout() -> None:
    tile = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((16, 64), (64, 1)))  # 16 rows of 128 B
    assert str(tile) == "Sw<3,3,3> o 0 o (16,64):(64,1)"
    assert tile(1, 0) == 72 and tile(3, 17) == 201
    assert tile.is_bijective_on() and tile.cosize() == 1024
    # a sub-tile keeps absolute addresses: block (1, 2) of 8x16 blocks
    sub = tile.local_tile((8, 16), (1, 2))
    assert sub.offset == 8 * 64 + 32
    for r in range(8):
        for c in range(16):
            assert sub(r, c) == tile(8 + r, 32 + c)
    bad = ComposedLayout(Swizzle(2, 0, 0), 0, Layout(16))
    assert not bad.is_bijective_on() and not bad.is_injective()
    i = z3.Int("i")
    expr = tile(i)
    for v in (0, 5, 77, 1023):
        assert z3.simplify(z3.substitute(expr, (i, z3.IntVal(v)))).as_long() == tile(v)
