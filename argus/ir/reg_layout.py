"""Register layouts: how a register tile is spread over the threads of its scope, as Fragment maps.

One definition for the three readers of the IR: the code generator distributes registers by
`fragment_of(layout)`, the verifier and the interpreter's shadow memory know which thread holds which
element through it (argus.ir.threads.Holders).

Kinds of `ir.RegLayout`:

* "mma": the accumulator fragment of an `mma` (argus/ir/fragments.py);
* "blocked": threads in row-major order over runs of `vec` consecutive elements of the last axis;
* "rows": the row slice of an mma fragment (canonical per split of M: accumulators of different widths
  share it), FlashAttention's running max and sum;
* "slice": the 1-D tile of one axis (`keep`) of any 2-D layout `parent` (a 1-D parent is one row):
  each thread holds the indices of that axis it holds in the parent, so `x[:, None]` / `x[None, :]`
  read in the parent's layout take the value from the thread's own registers, and a reduction along
  the other axis lands there;
* "transposed": `parent` with rows and columns exchanged (what `x.T` is read in);
* "index": arange arithmetic, no registers (evaluated per slot by the code generator).

`reduction_plan` says how a reduction along one axis of a fragment runs: every thread folds its own
slots into the kept indices it holds, then combines with the threads holding the same indices: lanes
of one warp by `shfl.xor` masks, the rest (other warps, or lane groups XOR cannot reach) through
shared memory.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.fragments import Fragment, mma_sync_block_fragment, slice_fragment, sliced, wgmma_block_fragment
from argus.ir.layout import Layout, flatten

WARP = 32


def mma_reg_layout(lay: ir.FragmentLayout, threads: int) -> ir.RegLayout:
    return ir.RegLayout("mma", lay.tile, threads, lay)


def blocked_reg_layout(shape: tuple[int, ...], threads: int, elem_bytes: int = 2,
                       warp_rows: bool = False) -> ir.RegLayout:
    """Threads over runs of `vec` elements (up to 16 bytes) of the last axis, row-major. `warp_rows`
    (a tile reduced along its rows): rows go to warps before a row takes more than one warp, so each
    warp holds whole rows where there are enough of them and their reductions need no shared memory."""
    last = shape[-1] if shape else 1
    vec = 1
    while vec * 2 <= max(1, 16 // elem_bytes) and last % (vec * 2) == 0:
        vec *= 2
    while vec > 1 and math.prod(shape) // vec < threads:  # small tiles: more threads, shorter runs
        vec //= 2
    row_threads = 0
    if warp_rows and len(shape) == 2 and shape[0] > 1:
        per_row = max(WARP, threads // shape[0])
        row_threads = 1 << (per_row.bit_length() - 1)  # a power of two, as the thread counts the rule divides
        if row_threads >= threads:
            row_threads = 0
    return ir.RegLayout("blocked", tuple(shape), threads, None, vec, row_threads=row_threads)


def slice_layout(parent: ir.RegLayout, keep: int) -> ir.RegLayout:
    """The 1-D tile of axis `keep` of `parent` (0: its rows, 1: its columns); a 1-D parent is one row,
    so keep=0 of it is a tile of one element every thread holds. Mma rows are the canonical "rows"."""
    if parent.kind == "mma" and keep == 0:
        rows = rows_reg_layout(parent)
        if rows is not None:
            return rows
    two_d = len(parent.shape) == 2
    n = parent.shape[keep] if two_d else (1 if keep == 0 else parent.shape[0])
    return ir.RegLayout("slice", (n,), parent.threads, parent=parent, keep=keep)


def transposed_layout(parent: ir.RegLayout) -> ir.RegLayout:
    """`parent` read with rows and columns exchanged; the transpose of a transpose is the parent. A 1-D
    parent (one row) becomes one column: [n] -> [n, 1]."""
    if parent.kind == "transposed" and parent.parent is not None:
        return parent.parent
    shape = (parent.shape[0], 1) if len(parent.shape) == 1 else tuple(parent.shape[::-1])
    return ir.RegLayout("transposed", shape, parent.threads, parent=parent)


def unit_layout(lay: ir.RegLayout, keep: int) -> ir.RegLayout:
    """How a [R, 1] (keep 0) or [1, C] (keep 1) tile broadcast into a tile held in `lay` is held: as the
    slice of `lay` along that axis, as a column or a row (numpy's keepdims statistics, `x - mean`)."""
    s = slice_layout(lay, keep)
    if keep == 0:
        return transposed_layout(s)
    return ir.RegLayout("slice", (1, lay.shape[1]), lay.threads, parent=lay, keep=1)


@functools.lru_cache(maxsize=1024)
def fragment_of(lay: ir.RegLayout) -> Fragment:
    """The (thread, slot) -> (row, col) map of a register layout; 1-D tiles are one row (row 0)."""
    if lay.kind == "mma":
        f = lay.mma
        m, n = f.tile
        if f.instr == "wgmma":
            return wgmma_block_fragment(m, n, f.warps_m, f.warps_n, instr_n=f.inst_shape[1])
        return mma_sync_block_fragment("C", m, n, 16, f.warps_m, f.warps_n)
    if lay.kind == "rows":
        return slice_fragment(fragment_of(mma_reg_layout(lay.mma, lay.threads)), 0).fragment
    if lay.kind == "slice":
        return reduction_plan(lay.parent, 1 - lay.keep).fragment
    if lay.kind == "transposed":  # a 1-D parent is one row: its transpose one column
        f = fragment_of(lay.parent)
        return Fragment(f"{f.name}.T", (f.tile[1], f.tile[0]), f.col, f.row)
    if lay.kind == "index":
        return blocked_fragment(ir.RegLayout("blocked", lay.shape, lay.threads, None, 1))
    return blocked_fragment(lay)


def blocked_fragment(lay: ir.RegLayout) -> Fragment:
    rows, cols = (1, lay.shape[0]) if len(lay.shape) == 1 else lay.shape[-2:]
    if len(lay.shape) > 2:
        raise ValueError(f"register tiles have 1 or 2 axes, got {lay.shape}")
    v, t = lay.vec, lay.threads
    tpr = math.gcd(cols // v, t)  # threads along a row, each owning runs of v elements
    if lay.row_threads:
        tpr = math.gcd(tpr, lay.row_threads)
    rp = t // tpr  # rows covered by one pass of all threads
    rg = math.gcd(rows, rp)  # distinct rows per pass; rp // rg threads hold each element (replicas)
    thread_shape = (tpr, rg, rp // rg)
    slot_shape = (v, cols // (v * tpr), rows // rg)
    row = Layout((thread_shape, slot_shape), ((0, 1, 0), (0, 0, rg)))
    col = Layout((thread_shape, slot_shape), ((v, 0, 0), (1, v * tpr, 0)))
    name = f"blocked{lay.shape}/{t}x{v}" + (f"/r{lay.row_threads}" if lay.row_threads else "")
    return Fragment(name, (rows, cols), row, col)


def rows_reg_layout(lay: ir.RegLayout) -> ir.RegLayout | None:
    """The rows of an mma-fragment tile as a 1-D register tile ("rows": each thread holds the rows it
    owns in the fragment), or None when threads of several warps share a row. Canonical: the same for
    every mma with the same split of M (the fragment's columns do not matter)."""
    if lay.kind != "mma" or lay.mma is None:
        return None
    f = lay.mma
    n0 = 8 * f.warps_n
    canon = ir.FragmentLayout(f.instr, (f.tile[0], n0), f.warps_m, f.warps_n, (f.inst_shape[0], 8, f.inst_shape[2]))
    try:
        slice_fragment(fragment_of(mma_reg_layout(canon, lay.threads)), 0)
    except ValueError:
        return None
    return ir.RegLayout("rows", (f.tile[0],), lay.threads, canon)


def replicas(lay: ir.RegLayout) -> int:
    """How many threads hold each element (only the first of them stores it)."""
    if lay.kind == "mma":
        return 1
    return int(fragment_of(lay).count_table().max())


@functools.lru_cache(maxsize=4096)
def _tables(lay: ir.RegLayout) -> tuple[bytes, bytes, tuple[int, int]]:
    rows, cols = fragment_of(lay).table()
    return rows.tobytes(), cols.tobytes(), rows.shape


def equivalent(a: ir.RegLayout | None, b: ir.RegLayout | None) -> bool:
    """Two layouts put every element in the same thread and slot (so one reads the other's registers)."""
    if a is None or b is None:
        return a is b
    if a == b:
        return True
    if tuple(a.shape) != tuple(b.shape) or a.threads != b.threads or "index" in (a.kind, b.kind):
        return False
    try:
        return _tables(a) == _tables(b)
    except ValueError:
        return False


def uniform(lay: ir.RegLayout) -> bool:
    """A one-element tile every thread holds in slot 0 (reads of it broadcast to any layout)."""
    if math.prod(lay.shape) != 1 or lay.kind == "index":
        return False
    rows, cols = fragment_of(lay).table()
    return bool((rows[:, 0] == 0).all() and (cols[:, 0] == 0).all())


# ---- reductions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReductionPlan:
    """A reduction along one axis of a fragment, keeping the other.

    `fragment`: (thread, slot) -> (0, kept index): the result, as a 1-D tile held as the parent holds
    that axis (threads that held other elements of the reduced axis now hold replicas). `slot_map`:
    parent slot -> result slot holding the same kept index (the same for every thread). `lanes`: XOR
    masks over which the threads sharing kept indices combine with shfl.xor. `cross`: (prefix, size)
    of the thread modes that combine through shared memory (thread index t has coordinate
    (t // prefix) % size along such a mode); empty when one warp holds whole lines.
    """

    fragment: Fragment
    slot_map: Layout
    lanes: tuple[int, ...]
    cross: tuple[tuple[int, int], ...]

    @property
    def partials(self) -> int:
        """Partial results per kept index exchanged through shared memory (1: none)."""
        return math.prod(s for _, s in self.cross)

    def cross_index(self, thread: int | np.ndarray):
        """This thread's position among the partials of its kept indices."""
        out, mult = 0, 1
        for prefix, size in self.cross:
            out = out + (thread // prefix) % size * mult
            mult *= size
        return out


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _thread_modes(f: Fragment, kept: Layout, red: Layout) -> list[tuple[int, int, int]]:
    """(size, kept stride, reduced stride) of the thread modes, split where a mode crosses a warp."""
    out: list[tuple[int, int, int]] = []
    prefix = 1
    for size, k, r in zip(flatten(kept[0].shape), flatten(kept[0].stride), flatten(red[0].stride), strict=True):
        if prefix < WARP < prefix * size and WARP % prefix == 0 and size % (WARP // prefix) == 0:
            inner = WARP // prefix
            out += [(inner, k, r), (size // inner, k * inner, r * inner)]
        else:
            out.append((size, k, r))
        prefix *= size
    return out


@functools.lru_cache(maxsize=1024)
def reduction_plan(parent: ir.RegLayout, axis: int) -> ReductionPlan:
    """How to reduce a tile held in `parent` along `axis` (of the 2-D fragment: 1-D tiles are one row,
    so their axis 0 is fragment axis 1). Raises ValueError when a mode of the fragment moves along both
    axes (no layout the code generator builds does)."""
    f = fragment_of(parent)
    keep = 1 - axis
    kept, red = (f.row, f.col) if keep == 0 else (f.col, f.row)
    t_shape, t_stride, lanes, cross, prefix = [], [], [], [], 1
    for size, k, r in _thread_modes(f, kept, red):
        if k and r and size > 1:
            raise ValueError(f"fragment {f.name}: a thread mode moves along both axes")
        if r and size > 1:  # threads holding the same kept indices with other reduced-axis elements
            if _pow2(size) and _pow2(prefix) and prefix * size <= WARP:
                lanes += [prefix << b for b in range(size.bit_length() - 1)]
            else:
                cross.append((prefix, size))
        t_shape.append(size)
        t_stride.append(0 if r else k)
        prefix *= size
    frag, slot_map = sliced(f, keep, t_shape, t_stride)
    plan = ReductionPlan(frag, slot_map, tuple(lanes), tuple(cross))
    _check_plan(f, keep, plan)
    return plan


def _check_plan(f: Fragment, keep: int, plan: ReductionPlan) -> None:
    """The plan agrees with `f`'s tables: the slot map gives each slot's kept index, and the threads a
    thread combines with (its lane masks and cross modes) hold its lines, every element of each line
    exactly once between them."""
    rows, cols = f.table()
    kept, red = (rows, cols) if keep == 0 else (cols, rows)
    _, idx = plan.fragment.table()
    smap = np.asarray(plan.slot_map(np.arange(f.slots)))
    if not (idx[:, smap] == kept).all():
        raise ValueError(f"reduction plan of fragment {f.name} disagrees with its table")
    modes = [(m, 2) for m in plan.lanes] + list(plan.cross)  # (prefix, size) of every combined mode
    threads = np.arange(f.threads)
    key = threads.copy()
    for prefix, size in modes:
        key = key - (key // prefix) % size * prefix
    width = int(red.max()) + 1
    every = np.unique(kept * width + red)  # each (line, element) of the tile once
    for g in np.unique(key):
        members = threads[key == g]
        lines = np.unique(kept[members[0]])
        if any(not np.array_equal(np.unique(kept[m]), lines) for m in members):
            raise ValueError(f"fragment {f.name}: threads combined with thread {members[0]} hold other lines")
        held = (kept[members] * width + red[members]).ravel()
        want = every[np.isin(every // width, lines)]
        if len(held) != len(np.unique(held)) or not np.array_equal(np.unique(held), want):
            raise ValueError(f"fragment {f.name}: the lines of thread {members[0]} are not covered once by the "
                             "threads it combines with")

# ---- queries on register-tile expressions (the layout pass and the code generator share them) ----------


def tile_vars(e, out: set[str], shape: tuple[int, ...] | None = None) -> set[str]:
    """Register-tile variables whose layout must equal the value of `e` (elementwise reach); with
    `shape`, only those of that shape (a 1-D tile broadcast into a 2-D value has a layout of its own)."""
    if isinstance(e, ir.Var) and isinstance(e.type, TileT):
        if shape is None or tuple(e.type.shape) == tuple(shape):
            out.add(e.name)
    elif isinstance(e, ir.Mma):
        tile_vars(e.acc, out, shape)  # the a / b operands have operand layouts of their own
    elif isinstance(e, (ir.Reduce, ir.Reshape, ir.Transpose, ir.Lambda, ir.ElemTag)):
        pass  # the shape changes: not the same layout
    elif isinstance(e, ir.Expr):
        for f in dataclasses.fields(e):
            if f.name not in ("span", "type"):
                v = getattr(e, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    if isinstance(x, ir.Expr):
                        tile_vars(x, out, shape)
    return out


def aligned_vars(e: ir.Expr) -> set[str]:
    """The register tiles an elementwise value `e` reads at its own shape (they share its layout)."""
    return tile_vars(e, set(), tuple(e.type.shape)) if isinstance(e.type, TileT) else set()


def expr_nodes(e, out: list) -> list:
    """Every expression node under `e` (including e), operands of mma and reductions too."""
    if isinstance(e, ir.Expr):
        out.append(e)
        for f in dataclasses.fields(e):
            if f.name not in ("span", "type"):
                v = getattr(e, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    expr_nodes(x, out)
    return out


def operand_layout(e: ir.Expr, layout_of_var, threads: int) -> ir.RegLayout:
    """The layout the operand `e` of a reduction is computed in: that of its tiles (the first, when
    they disagree: the others are converted), else (loads, aranges) the blocked layout of its shape."""
    for name in sorted(aligned_vars(e)):
        lay = layout_of_var(name)
        if lay is not None and lay.kind != "index":
            return lay
    return blocked_reg_layout(tuple(e.type.shape), threads, value_bytes(e))


def value_bytes(e: ir.Expr) -> int:
    """Smallest element size among the loads and tiles of `e` (what vectorised accesses are sized by)."""
    sizes = [x.type.dtype.bytes for x in expr_nodes(e, []) if isinstance(x, (ir.Load, ir.Var))
             and isinstance(x.type, TileT)]
    return min(sizes, default=e.type.dtype.bytes)


def reduce_result_layout(operand: ir.RegLayout, r: ir.Reduce) -> ir.RegLayout:
    """Where `op(x, axis=a)` lands when x is held in `operand`: the slice of the kept axis (a 1-D x
    is one row: its reduction is one element every thread holds)."""
    if len(operand.shape) == 1:
        return slice_layout(operand, 0)
    return slice_layout(operand, 1 - r.axis)


def broadcast_keep(src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The axis of a 2-D tile of shape `dst` that a 1-D tile of shape `src` runs along when broadcast
    into it (x[:, None]: 0; x[None, :] or numpy's trailing alignment: 1), or None."""
    if len(src) != 1 or len(dst) != 2:
        return None
    return 1 if src[0] == dst[1] and dst[1] != 1 else 0 if src[0] == dst[0] else None


def unit_keep(src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The axis a [R, 1] (0) or [1, C] (1) tile keeps when broadcast into a 2-D tile of shape `dst`."""
    if len(src) != 2 or len(dst) != 2 or tuple(src) == tuple(dst):
        return None
    if src[1] == 1 and src[0] == dst[0] and dst[1] != 1:
        return 0
    if src[0] == 1 and src[1] == dst[1] and dst[0] != 1:
        return 1
    return None
