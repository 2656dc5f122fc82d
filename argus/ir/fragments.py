"""Register-fragment maps of the MMA instructions and shared-memory operand layouts of wgmma.

A :class:`Fragment` says which thread holds which element of a tile in which register *slot*:
``(thread, slot) -> (row, col)``. Both maps are layouts over the same ``(thread, slot)`` shape, so
they evaluate on ints, NumPy arrays and z3 expressions alike and stay affine (z3-friendly).

Sources reproduced (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and
"Register Fragments / wgmma .m64nNk16"), with ``groupID = lane >> 2``, ``tig = lane % 4``:

* ``mma.sync.m16n8k16`` A (16x16, f16/bf16, slots a0..a7 = four .f16x2 registers, low half first)::

      row = groupID      for a0, a1, a4, a5;   groupID + 8 for a2, a3, a6, a7
      col = tig*2 + (i & 1)   for a0..a3;       tig*2 + (i & 1) + 8 for a4..a7

* ``mma.sync.m16n8k16`` B (16x8, rows = k, cols = n, slots b0..b3)::

      row = tig*2 + (i & 1)   for b0, b1;       tig*2 + (i & 1) + 8 for b2, b3
      col = groupID

* ``mma.sync.m16n8k16`` C/D (16x8, f32 c0..c3; the f16 accumulator packs the same elements)::

      row = groupID for c0, c1;  groupID + 8 for c2, c3;   col = tig*2 + (i & 1)

* ``wgmma.m64nNk16`` D (64xN f32, 128 threads, slots d0..d(N/2-1)); warp ``w = thread // 32`` of the
  warpgroup owns rows ``16w..16w+15`` and repeats the mma.sync C pattern every 8 columns::

      row = 16*w + groupID + 8*((i >> 1) & 1);     col = 8*(i >> 2) + tig*2 + (i & 1)

  The register A operand of wgmma (64x16, slots a0..a7) has the same shape of map with N = 16.

Thread and slot indices are linear; inside the maps they split colexicographically, e.g. the
thread mode of mma.sync is ``(4, 8)`` = ``(tig, groupID)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from argus.ir.arith import Value, add, fdiv, fmod, mul
from argus.ir.layout import IntTuple, Layout, flatten, make_layout, right_inverse
from argus.ir.swizzle import ComposedLayout, smem_swizzle

__all__ = [
    "Fragment",
    "mma_m16n8k16_a",
    "mma_m16n8k16_b",
    "mma_m16n8k16_c",
    "wgmma_m64nNk16_d",
    "wgmma_m64k16_a",
    "tile_fragment",
    "mma_sync_block_fragment",
    "wgmma_block_fragment",
    "smem_tile_layout",
    "smem_operand_layout",
    "wgmma_descriptor_strides",
    "wgmma_canonical_layout",
    "Slice",
    "slice_fragment",
    "register_operand_map",
    "wgmma_block_a_fragment",
]


@dataclass(frozen=True)
class Fragment:
    """``(thread, slot) -> (row, col)`` of a ``tile = (rows, cols)`` held in registers.

    ``row`` and ``col`` are rank-2 layouts with the same shape ``(thread modes, slot modes)``.
    """

    name: str
    tile: tuple[int, int]
    row: Layout
    col: Layout

    def __post_init__(self) -> None:
        if self.row.shape != self.col.shape or self.row.rank() != 2:
            raise ValueError("fragment row/col maps need the same rank-2 (thread, slot) shape")

    @property
    def threads(self) -> int:
        return self.row[0].size()

    @property
    def slots(self) -> int:
        return self.row[1].size()

    def coord(self, thread: Value, slot: Value) -> tuple[Value, Value]:
        """``(row, col)`` of the element held by ``thread`` in register slot ``slot``."""
        return self.row((thread, slot)), self.col((thread, slot))

    def tv_layout(self) -> Layout:
        """CuTe-style thread-value layout: ``(thread, slot) -> row + rows*col`` (column-major tile)."""
        stride = _zip_map(lambda r, c: r + self.tile[0] * c, self.row.stride, self.col.stride)
        return Layout(self.row.shape, stride)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """``rows[t, s]``, ``cols[t, s]`` for every thread and slot."""
        t = np.arange(self.threads, dtype=np.int64)[:, None]
        s = np.arange(self.slots, dtype=np.int64)[None, :]
        shape = (self.threads, self.slots)
        r, c = self.coord(t, s)
        return np.broadcast_to(r, shape).copy(), np.broadcast_to(c, shape).copy()

    def count_table(self) -> np.ndarray:
        """How many ``(thread, slot)`` pairs hold each tile element (1 everywhere iff bijective)."""
        rows, cols = self.table()
        if rows.min() < 0 or cols.min() < 0 or rows.max() >= self.tile[0] or cols.max() >= self.tile[1]:
            raise ValueError(f"fragment {self.name} maps outside its {self.tile} tile")
        counts = np.zeros(self.tile, dtype=np.int64)
        np.add.at(counts, (rows.ravel(), cols.ravel()), 1)
        return counts

    def is_bijective(self) -> bool:
        """Every element of the tile is held by exactly one ``(thread, slot)``."""
        try:
            return bool((self.count_table() == 1).all())
        except ValueError:
            return False

    def inverse_table(self) -> tuple[np.ndarray, np.ndarray]:
        """``thread[r, c]``, ``slot[r, c]``: the owner of each element (bijective fragments only)."""
        if not self.is_bijective():
            raise ValueError(f"fragment {self.name} is not a bijection onto its tile")
        rows, cols = self.table()
        thread = np.empty(self.tile, dtype=np.int64)
        slot = np.empty(self.tile, dtype=np.int64)
        t, s = np.indices(rows.shape)
        thread[rows, cols] = t
        slot[rows, cols] = s
        return thread, slot

    @cached_property
    def _owner_layout(self) -> Layout:
        if not self.is_bijective():
            raise ValueError(f"fragment {self.name} is not a bijection onto its tile")
        inv = right_inverse(self.tv_layout())
        assert inv.size() == self.tile[0] * self.tile[1]
        return inv

    def owner(self, row: Value, col: Value) -> tuple[Value, Value]:
        """``(thread, slot)`` holding element ``(row, col)``; closed form, so it works on z3 too."""
        lin = self._owner_layout(add(row, mul(col, self.tile[0])))
        return fmod(lin, self.threads), fdiv(lin, self.threads)


def _zip_map(f: Callable[[int, int], int], a: IntTuple, b: IntTuple) -> IntTuple:
    if isinstance(a, tuple):
        return tuple(_zip_map(f, x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return f(a, b)


def _fragment(
    name: str,
    tile: tuple[int, int],
    shape: tuple[IntTuple, IntTuple],
    row_stride: tuple[IntTuple, IntTuple],
    col_stride: tuple[IntTuple, IntTuple],
) -> Fragment:
    return Fragment(name, tile, Layout(shape, row_stride), Layout(shape, col_stride))


# ---------------------------------------------------------------------------------------------
# Instruction atoms (one warp / one warpgroup)
# ---------------------------------------------------------------------------------------------

# Thread mode of every warp-level map: lane = tig + 4*groupID.
_LANE = (4, 8)


def mma_m16n8k16_a() -> Fragment:
    """A operand of ``mma.sync.m16n8k16`` (f16/bf16): 32 lanes x 8 halves -> 16x16 (row=m, col=k)."""
    # slot i = i0 + 2*i1 + 4*i2: i0 -> col+1, i1 -> row+8, i2 -> col+8
    return _fragment("mma.m16n8k16.A", (16, 16), (_LANE, (2, 2, 2)), ((0, 1), (0, 8, 0)), ((2, 0), (1, 0, 8)))


def mma_m16n8k16_b() -> Fragment:
    """B operand of ``mma.sync.m16n8k16``: 32 lanes x 4 halves -> 16x8 (row=k, col=n)."""
    # slot i = i0 + 2*i1: i0 -> k+1, i1 -> k+8
    return _fragment("mma.m16n8k16.B", (16, 8), (_LANE, (2, 2)), ((2, 0), (1, 8)), ((0, 1), (0, 0)))


def mma_m16n8k16_c() -> Fragment:
    """C/D accumulator of ``mma.sync.m16n8k16``: 32 lanes x 4 f32 -> 16x8 (row=m, col=n)."""
    # slot i = i0 + 2*i1: i0 -> col+1, i1 -> row+8
    return _fragment("mma.m16n8k16.C", (16, 8), (_LANE, (2, 2)), ((0, 1), (0, 8)), ((2, 0), (1, 0)))


def wgmma_m64nNk16_d(n: int) -> Fragment:
    """f32 accumulator of ``wgmma.m64nNk16``: 128 threads x N/2 slots -> 64xN (row=m, col=n)."""
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n}")
    # thread = tig + 4*groupID + 32*warp; slot i = i0 + 2*i1 + 4*j: i0 -> col+1, i1 -> row+8, j -> col+8j
    shape = ((4, 8, 4), (2, 2, n // 8))
    return _fragment(f"wgmma.m64n{n}k16.D", (64, n), shape, ((0, 1, 16), (0, 8, 0)), ((2, 0, 0), (1, 0, 8)))


def wgmma_m64k16_a() -> Fragment:
    """Register A operand of ``wgmma.m64nNk16`` (f16/bf16): 128 threads x 8 halves -> 64x16 (m, k)."""
    d = wgmma_m64nNk16_d(16)
    return Fragment("wgmma.m64k16.A", d.tile, d.row, d.col)


# ---------------------------------------------------------------------------------------------
# CTA tiling
# ---------------------------------------------------------------------------------------------


def tile_fragment(
    atom: Fragment,
    tile: tuple[int, int],
    grid: tuple[int, int],
    grid_axes: tuple[int | None, int | None] = (0, 1),
    *,
    interleaved: bool = False,
    name: str | None = None,
) -> Fragment:
    """Tile ``atom`` over a CTA ``tile`` with a ``grid`` of warps (or warpgroups).

    Thread in block = ``atom_thread + atom.threads * (g0 + grid[0] * g1)`` (grid dim 0 fastest).
    Grid dim ``i`` splits tile axis ``grid_axes[i]`` (0 = rows, 1 = cols) or, with ``None``, holds
    a replica (e.g. warps along N all need the same A rows). The atom repeats to fill each warp's
    share; slot in block = ``atom_slot + atom.slots * (rep_row + reps_row * rep_col)``.

    Blocked (default): warp ``g`` along an axis owns one contiguous stripe of ``reps * atom``
    elements. ``interleaved=True``: the ``grid * atom`` block repeats (CuTe's TiledMMA order).
    """
    extents, atom_ext = tile, atom.tile
    per_axis = [1, 1]
    for g, ax in zip(grid, grid_axes, strict=True):
        if ax is not None:
            if per_axis[ax] != 1:
                raise ValueError("at most one grid dimension may split each tile axis")
            per_axis[ax] = g
    reps = []
    for a in (0, 1):
        if extents[a] % (atom_ext[a] * per_axis[a]):
            raise ValueError(f"tile {tile} is not a multiple of atom {atom.tile} x grid {tuple(per_axis)}")
        reps.append(extents[a] // (atom_ext[a] * per_axis[a]))

    def grid_stride(ax: int | None, a: int) -> int:
        if ax != a:
            return 0
        return atom_ext[a] if interleaved else atom_ext[a] * reps[a]

    def rep_stride(a: int) -> int:
        return atom_ext[a] * per_axis[a] if interleaved else atom_ext[a]

    shape = ((atom.row.shape[0], *grid), (atom.row.shape[1], reps[0], reps[1]))
    row = Layout(
        shape,
        (
            (atom.row.stride[0], *(grid_stride(ax, 0) for ax in grid_axes)),  # type: ignore[index]
            (atom.row.stride[1], rep_stride(0), 0),  # type: ignore[index]
        ),
    )
    col = Layout(
        shape,
        (
            (atom.col.stride[0], *(grid_stride(ax, 1) for ax in grid_axes)),  # type: ignore[index]
            (atom.col.stride[1], 0, rep_stride(1)),  # type: ignore[index]
        ),
    )
    return Fragment(name or f"{atom.name}@{tile[0]}x{tile[1]}", tile, row, col)


def mma_sync_block_fragment(
    operand: Literal["A", "B", "C"],
    bm: int,
    bn: int,
    bk: int,
    warps_m: int,
    warps_n: int,
    *,
    interleaved: bool = False,
) -> Fragment:
    """A (BMxBK), B (BKxBN) or C (BMxBN) of a CTA whose ``warps_m x warps_n`` warps use m16n8k16.

    Warp ``w = thread // 32`` sits at grid position ``(w % warps_m, w // warps_m)``.
    """
    grid = (warps_m, warps_n)
    if operand == "A":
        return tile_fragment(mma_m16n8k16_a(), (bm, bk), grid, (0, None), interleaved=interleaved)
    if operand == "B":
        return tile_fragment(mma_m16n8k16_b(), (bk, bn), grid, (None, 1), interleaved=interleaved)
    if operand == "C":
        return tile_fragment(mma_m16n8k16_c(), (bm, bn), grid, (0, 1), interleaved=interleaved)
    raise ValueError(f"operand must be 'A', 'B' or 'C', got {operand!r}")


def wgmma_block_fragment(
    bm: int,
    bn: int,
    warpgroups_m: int = 1,
    warpgroups_n: int = 1,
    *,
    instr_n: int | None = None,
    interleaved: bool = False,
) -> Fragment:
    """f32 accumulator of a BMxBN CTA tile computed by a grid of warpgroups with wgmma.m64nNk16.

    ``instr_n`` defaults to the whole per-warpgroup width (capped at 256). Thread indices count
    from the first consumer warpgroup (subtract a producer warpgroup's 128 threads beforehand).
    """
    n = instr_n if instr_n is not None else min(bn // warpgroups_n, 256)
    return tile_fragment(
        wgmma_m64nNk16_d(n), (bm, bn), (warpgroups_m, warpgroups_n), (0, 1), interleaved=interleaved
    )


# ---------------------------------------------------------------------------------------------
# Shared-memory operand layouts (TMA / wgmma)
# ---------------------------------------------------------------------------------------------


def _row_elems(swizzle_bytes: int, elem_bytes: int) -> int:
    """Elements per swizzled row: the swizzle width, or one 16-byte core-matrix row unswizzled."""
    return max(swizzle_bytes, 16) // elem_bytes


def smem_tile_layout(rows: int, cols: int, elem_bytes: int = 2, swizzle_bytes: int = 128) -> ComposedLayout:
    """``(r, c) -> element offset`` of a ``rows x cols`` shared tile whose ``cols`` are contiguous.

    The tile is stored as ``cols / W`` slabs of ``rows x W`` elements (``W`` = swizzle width in
    elements, 16 bytes when unswizzled), each slab row-major, slabs one after another, and the
    whole offset swizzled (``smem_swizzle``). This is exactly what TMA writes for boxes of
    ``rows x W`` elements with the matching ``CU_TENSOR_MAP_SWIZZLE_*`` mode into a buffer aligned
    to ``8 * swizzle_bytes`` bytes (e.g. a BMx64 bf16 box with 128B swizzle: ``Sw<3,3,3> o (BM,64):(64,1)``),
    and it is the canonical wgmma layout (8-row x 16-byte core matrices / swizzle atoms).
    """
    w = _row_elems(swizzle_bytes, elem_bytes)
    if rows % 8 or cols % w:
        raise ValueError(f"{rows}x{cols} tile does not fit {swizzle_bytes}B swizzle atoms of 8x{w} elements")
    if cols == w:
        layout = Layout((rows, w), (w, 1))
    else:
        layout = Layout((rows, (w, cols // w)), (w, (1, rows * w)))
    return ComposedLayout(smem_swizzle(swizzle_bytes, elem_bytes), 0, layout)


def smem_operand_layout(
    mn: int,
    k: int,
    major: Literal["K", "MN"] = "K",
    elem_bytes: int = 2,
    swizzle_bytes: int = 128,
) -> ComposedLayout:
    """Shared layout of an MMA operand tile indexed ``(mn, k)`` (A: ``(m, k)``, B: ``(n, k)``).

    ``K``-major stores ``k`` contiguously (A row-major, or B given as N x K); ``MN``-major stores
    ``mn`` contiguously (B given as K x N row-major). Storage is :func:`smem_tile_layout`.
    """
    if major == "K":
        return smem_tile_layout(mn, k, elem_bytes, swizzle_bytes)
    if major == "MN":
        t = smem_tile_layout(k, mn, elem_bytes, swizzle_bytes)
        return ComposedLayout(t.swizzle, 0, make_layout(t.layout[1], t.layout[0]))
    raise ValueError(f"major must be 'K' or 'MN', got {major!r}")


def wgmma_descriptor_strides(
    mn: int, k: int, major: Literal["K", "MN"], elem_bytes: int = 2, swizzle_bytes: int = 128
) -> tuple[int, int]:
    """``(LBO, SBO)`` in bytes describing :func:`smem_operand_layout` to a wgmma descriptor.

    SBO: between consecutive 8-row groups (8 rows of the non-contiguous dimension). LBO: between
    consecutive slabs of the contiguous dimension (K-major: along K, read only when unswizzled;
    MN-major: along MN).
    """
    row_bytes = max(swizzle_bytes, 16)
    rows = mn if major == "K" else k
    del elem_bytes  # strides are independent of the element size once expressed in bytes
    return rows * row_bytes, 8 * row_bytes


def wgmma_canonical_layout(
    major: Literal["K", "MN"],
    mn: int,
    k: int,
    lbo_bytes: int,
    sbo_bytes: int,
    elem_bytes: int = 2,
    swizzle_bytes: int = 128,
    offset: Value = 0,
) -> ComposedLayout:
    """What one wgmma reads for an ``mn x k`` operand, from the PTX canonical layouts.

    In units of ``T = 16 / elem_bytes`` elements and ``W`` = swizzle row in elements (``T`` when
    unswizzled), coordinates ``(mn, k)``:

    * K-major:  ``((8, mn/8), (T, k/T)) : ((W, SBO), (1, LBO if unswizzled else T))``
    * MN-major: ``((T, W/T, mn/W), (8, k/8)) : ((1, T, LBO), (W, SBO))``

    then ``offset`` (the descriptor start address, relative to a pattern-aligned base) is added and
    the mode's swizzle applied.
    """
    e = elem_bytes
    t = 16 // e
    w = _row_elems(swizzle_bytes, e)
    if lbo_bytes % e or sbo_bytes % e:
        raise ValueError("LBO/SBO must be whole elements")
    lbo, sbo = lbo_bytes // e, sbo_bytes // e
    if major == "K":
        if mn % 8 or k % t or (swizzle_bytes and k > w):
            raise ValueError(f"{mn}x{k} is not a K-major wgmma operand for {swizzle_bytes}B swizzle")
        mn_mode = Layout((8, mn // 8), (w, sbo))
        k_mode = Layout((t, k // t), (1, lbo if swizzle_bytes == 0 else t))
    elif major == "MN":
        if k % 8 or mn % t or (mn > w and mn % w):
            raise ValueError(f"{mn}x{k} is not an MN-major wgmma operand for {swizzle_bytes}B swizzle")
        inner = min(mn, w)
        mn_mode = Layout((t, inner // t, mn // inner), (1, t, lbo))
        k_mode = Layout((8, k // 8), (w, sbo))
    else:
        raise ValueError(f"major must be 'K' or 'MN', got {major!r}")
    return ComposedLayout(smem_swizzle(swizzle_bytes, e), offset, make_layout(mn_mode, k_mode))


# ---------------------------------------------------------------------------------------------
# Slices of a fragment (row statistics) and register operands taken from another fragment
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    """The 1-D tile of one axis of a 2-D fragment ``f``, held as ``f`` holds that axis.

    ``fragment``: ``(thread, slot) -> (0, index)`` over the kept axis (a 1-D tile is one row), each
    thread holding the indices it owns in ``f`` (e.g. the rows of an accumulator). ``slot_map``:
    slot of ``f`` -> slot of the slice holding the same kept index (the same for every thread).
    ``lanes``: XOR masks of the thread index connecting the threads that hold the same kept indices
    but other elements along the reduced axis: a reduction over that axis is a per-thread reduction
    over its slots followed by one ``shfl.xor`` step per mask.
    """

    fragment: Fragment
    slot_map: Layout
    lanes: tuple[int, ...]


def _modes(part: Layout, other: Layout) -> list[tuple[int, int, int]]:
    """Flat (size, stride, other stride) of one half (thread or slot) of two fragment maps."""
    return list(zip(flatten(part.shape), flatten(part.stride), flatten(other.stride), strict=True))


def slice_fragment(f: Fragment, keep: int) -> Slice:
    """The rows (``keep=0``) or columns (``keep=1``) of ``f`` as a :class:`Slice`.

    Every mode of ``f`` must move along one axis only; threads that share kept indices while holding
    other elements must differ in lane bits only (one warp), reached by XOR masks. Raises ValueError
    otherwise. The result is checked against ``f``'s tables.
    """
    if keep not in (0, 1):
        raise ValueError("keep must be 0 (rows) or 1 (columns)")
    kept, red = (f.row, f.col) if keep == 0 else (f.col, f.row)
    t_modes = _modes(kept[0], red[0])
    t_shape, t_stride, lanes, prefix = [], [], [], 1
    for size, k, r in t_modes:
        if k and r:
            raise ValueError(f"fragment {f.name}: a thread mode moves along both axes")
        if r and size > 1:  # threads holding the same kept indices, other reduced-axis elements
            if size & (size - 1) or prefix & (prefix - 1) or prefix * size > 32:
                raise ValueError(f"fragment {f.name}: threads sharing a {('row', 'column')[keep]} are not "
                                 "lanes of one warp reachable by XOR")
            lanes += [prefix << b for b in range(size.bit_length() - 1)]
        t_shape.append(size)
        t_stride.append(k)
        prefix *= size
    frag, slot_map = sliced(f, keep, t_shape, t_stride)
    out = Slice(frag, slot_map, tuple(lanes))
    _check_slice(f, keep, out)
    return out


def sliced(f: Fragment, keep: int, t_shape: list[int], t_stride: list[int]) -> tuple[Fragment, Layout]:
    """The 1-D fragment of axis `keep` of `f` with thread modes (t_shape, t_stride) (the caller decides
    which thread modes keep their stride), and the slot map: slot of `f` -> slot of the slice. The slot
    modes that move along the kept axis are the slice's slots; the others fold away."""
    kept, red = (f.row, f.col) if keep == 0 else (f.col, f.row)
    s_shape, s_stride, map_stride, n = [], [], [], 1
    for size, k, r in _modes(kept[1], red[1]):
        if k and r and size > 1:
            raise ValueError(f"fragment {f.name}: a register slot mode moves along both axes")
        if k and size > 1:
            s_shape.append(size)
            s_stride.append(k)
            map_stride.append(n)
            n *= size
        else:
            map_stride.append(0)
    if not s_shape:
        s_shape, s_stride = [1], [0]
    shape = (tuple(t_shape), tuple(s_shape))
    zeros = (tuple(0 for _ in t_shape), tuple(0 for _ in s_shape))
    frag = Fragment(f"{f.name}.{('rows', 'cols')[keep]}", (1, f.tile[keep]), Layout(shape, zeros),
                    Layout(shape, (tuple(t_stride), tuple(s_stride))))
    return frag, Layout(tuple(flatten(kept[1].shape)), tuple(map_stride))


def _check_slice(f: Fragment, keep: int, sl: Slice) -> None:
    """The slice agrees with ``f`` on every thread, and the XOR group of a thread covers whole lines."""
    rows, cols = f.table()
    kept = rows if keep == 0 else cols
    _, idx = sl.fragment.table()
    smap = np.asarray(sl.slot_map(np.arange(f.slots)))
    if not (idx[:, smap] == kept).all():
        raise ValueError(f"slice of fragment {f.name} disagrees with its table")
    group = np.zeros(1, dtype=np.int64)
    for m in sl.lanes:
        group = np.concatenate([group, group ^ m])
    per_line = f.count_table().sum(axis=1 - keep)  # elements per kept index in the whole tile
    for t in range(f.threads):
        members = t ^ group
        if (members >= f.threads).any():
            raise ValueError(f"fragment {f.name}: shuffle partners of thread {t} outside the tile's threads")
        if not all(set(kept[m].tolist()) == set(kept[t].tolist()) for m in members):
            raise ValueError(f"fragment {f.name}: shuffle partners of thread {t} hold other lines")
        held = np.bincount(kept[members].ravel(), minlength=f.tile[keep])
        for line in set(kept[t].tolist()):
            if held[line] != per_line[line]:
                raise ValueError(f"fragment {f.name}: line {line} is spread beyond thread {t}'s shuffle group")


def register_operand_map(src: Fragment, dst: Fragment) -> np.ndarray | None:
    """``m[s]``: the slot of ``src`` holding, in the same thread, the element that ``dst`` wants in
    its slot ``s`` -- the same slot for every thread -- or None when no such map exists (then the
    operand would have to move between threads). E.g. an f32 accumulator reused as an MMA A operand."""
    if src.tile != dst.tile or src.threads != dst.threads or not src.is_bijective():
        return None
    owner, slot = src.inverse_table()
    rows, cols = dst.table()
    if not (owner[rows, cols] == np.arange(dst.threads)[:, None]).all():
        return None
    s = slot[rows, cols]
    if not (s == s[:1]).all():
        return None
    return s[0].copy()


def wgmma_block_a_fragment(bm: int, bk: int, warpgroups_m: int = 1) -> Fragment:
    """Register A operand (BMxBK) of warpgroups that split M and each run wgmma.m64nNk16 over their
    64-row slabs: slot = atom slot + 8 * (slab + slabs * k16 step)."""
    return tile_fragment(wgmma_m64k16_a(), (bm, bk), (warpgroups_m, 1), (0, None))
