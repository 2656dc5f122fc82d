"""Layout assignment: how each `mma` spreads its tile over warps, and how every register tile is held.

mma.sync m16n8k16: the block's warps form a warps_m x warps_n grid over the accumulator; each warp
computes (M / warps_m) x (N / warps_n) with 16x8x16 instructions. wgmma m64nNk16: the warpgroups
split M in 64-row slabs (or N when M is a single slab); one instruction covers 64 x n with
n <= 256. Shapes the instruction cannot tile are errors at the `mma`, with the reason.

Register tiles: every tile-valued `Let`, and the register value of every `Store` / `Copy`, gets a
RegLayout. Tiles connected by elementwise arithmetic (and an `mma`'s accumulator with its result)
share one layout; a group containing an mma accumulator takes the mma's fragment ("mma"), any other
group the "blocked" layout, except two kinds of 1-D tiles:

* "index": every definition is arange arithmetic on scalars (`kpos = j * BKV + arange(BKV)`). Such a
  tile has no registers: the code generator evaluates it where it is read, from the (row, col) of the
  fragment slot being computed (`kpos[None, :]` -> the slot's column, `qpos[:, None]` -> its row).
* "rows": the result of a row reduction (`max(sc, axis=1)`) of an mma fragment tile, or a vector
  broadcast along the rows of one (`alpha[:, None]` in `acc * alpha[:, None]`), and the tiles
  connected to those (FlashAttention's m, l, alpha, m_new): the row slice of the fragment
  (fragments.slice_fragment): each thread holds the rows it owns (wgmma m64nN: 2 rows per 64-row
  slab), and a reduction is a per-thread reduction over the slots of each row followed by
  `shfl.xor` across the lanes sharing the row (derived from the fragment's layout modes, checked
  against its tables). Canonical per split of M: accumulators of different widths share it.

An mma whose result is used as the register A operand of another mma must have warps (warpgroups)
that split M only (an error at the mma if the shape does not allow it); one whose result is only
reduced along rows or combined with a row vector should (rows stay in a warp: shuffles only), and when
the shape does not allow it the warps split N too and the row reductions combine the warps' partials
through the code generator's shared scratch (the generic "slice" layout). An mma whose A operand is
an accumulator tile needs that tile's fragment to hold, in every thread, the instruction's A-fragment
elements (fragments.register_operand_map, from the tables): true for an accumulator of an mma with
the same split of M (FlashAttention's P); otherwise an error at the mma. An A operand in any other
register layout (a loaded or computed tile) is re-distributed into the A fragments through shared
memory by the code generator (argus/codegen/mma.py).

`fragment_of` turns a RegLayout into the (thread, slot) -> (row, col) map (argus/ir/fragments.py)
that the code generator distributes registers by. A group that would need two different fragments
keeps no layout (the code generator reports it).

Shared buffers: `shared_tile_layout` is the one definition of where element (r, c) of the 2-D tile
of a buffer lives (the last two axes; leading axes, e.g. pipeline stages, are whole tiles in
row-major order).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from argus.dsl.diagnostics import ArgusError, error
from argus.dsl.types import DType, TileT
from argus.ir import nodes as ir
from argus.ir.fragments import (
    Fragment,
    Slice,
    mma_sync_block_fragment,
    register_operand_map,
    slice_fragment,
    smem_tile_layout,
    wgmma_block_a_fragment,
)
from argus.ir.layout import Layout
from argus.ir.reg_layout import (  # fragment_of, rows_reg_layout: re-exported for older importers
    aligned_vars,
    blocked_reg_layout,
    broadcast_keep,
    expr_nodes,
    fragment_of,
    mma_reg_layout,
    operand_layout,
    reduce_result_layout,
    rows_reg_layout,  # noqa: F401
    slice_layout,
    tile_vars,
    unit_keep,
    unit_layout,
)
from argus.ir.swizzle import ComposedLayout, Swizzle, smem_swizzle
from argus.ir.transform import rewrite, scope_stmts


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mma_sync_layout(m: int, n: int, k: int, threads: int, span, whole_rows: bool = False,
                     kstep: int = 16, prefer_rows: bool = False) -> ir.FragmentLayout:
    """whole_rows: the warps must split M only (a register A operand); prefer_rows: they should (rows
    reduced or broadcast stay in a warp: shuffles only), else rows span warps and reductions combine the
    warps' partials through shared memory (argus/codegen/exchange.py)."""
    if prefer_rows and not whole_rows:
        try:
            return _mma_sync_layout(m, n, k, threads, span, True, kstep)
        except ArgusError:
            pass
    warps = threads // 32
    if m % 16 or n % 8 or k % kstep:
        raise error("mma-shape", f"mma.sync m16n8k{kstep} cannot tile [{m}, {k}] @ [{k}, {n}]", span,
                    f"M must be a multiple of 16, N of 8 and K of {kstep}")
    best = None
    for wm in _divisors(warps):
        wn = warps // wm
        if m % (16 * wm) or n % (8 * wn) or (whole_rows and wn != 1):
            continue
        tm, tn = m // wm, n // wn
        score = abs(tm - tn)  # squarest warp tile: best operand reuse per warp
        if best is None or score < best[0]:
            best = (score, wm, wn)
    if best is None and whole_rows:
        raise error("mma-shape", f"{warps} warps cannot each own whole rows of a {m}x{n} mma.sync tile", span,
                    "its rows are reduced or feed a register A operand, so the warps split M only: make M a "
                    "multiple of 16 x warps")
    if best is None:
        raise error("mma-shape", f"{warps} warps cannot split a {m}x{n} mma.sync tile evenly", span,
                    "change the tile or the thread count so each warp gets a multiple of 16x8")
    return ir.FragmentLayout("mma.sync", (m, n), best[1], best[2], (16, 8, kstep))


def _wgmma_layout(m: int, n: int, k: int, threads: int, b_in_regs: bool, span,
                  whole_rows: bool = False, kstep: int = 16, prefer_rows: bool = False) -> ir.FragmentLayout:
    """whole_rows / prefer_rows: as _mma_sync_layout, for warpgroups."""
    if prefer_rows and not whole_rows:
        try:
            return _wgmma_layout(m, n, k, threads, b_in_regs, span, True, kstep)
        except ArgusError:
            pass
    if threads % 128:
        raise error("mma-shape", f"wgmma needs whole warpgroups (128 threads); this block has {threads}", span,
                    "launch with warpgroups=N or threads a multiple of 128")
    if b_in_regs:
        raise error("mma-shape", "wgmma reads its B operand from shared memory, not registers", span,
                    "keep B in a shared buffer, or use instr=\"mma.sync\"")
    groups = threads // 128
    if k % kstep:
        raise error("mma-shape", f"wgmma k{kstep} cannot tile K={k}", span, f"K must be a multiple of {kstep}")
    if m % (64 * groups) == 0:
        gm, gn = groups, 1
    elif whole_rows:
        raise error("mma-shape", f"{groups} warpgroups cannot each own whole rows of a {m}x{n} wgmma tile", span,
                    "its rows are reduced or feed a register A operand, so the warpgroups split M only: make M "
                    "a multiple of 64 x warpgroups")
    elif m == 64 and n % (8 * groups) == 0:
        gm, gn = 1, groups
    else:
        raise error("mma-shape", f"{groups} warpgroup(s) cannot split a {m}x{n} wgmma tile", span,
                    "each warpgroup computes 64-row slabs: make M a multiple of 64 x warpgroups")
    per_n = n // gn
    if per_n % 8:
        raise error("mma-shape", f"wgmma N={per_n} per warpgroup must be a multiple of 8", span)
    inst_n = max(d for d in range(8, min(per_n, 256) + 1, 8) if per_n % d == 0)
    return ir.FragmentLayout("wgmma", (m, n), gm, gn, (64, inst_n, kstep))




def assign_layouts(kernel: ir.Kernel) -> ir.Kernel:
    def mma_layout(node: ir.Mma, t: int, rows_need: str | None) -> ir.Mma:
        (m, k), n = _shape2(node.a), _shape2(node.b)[1]
        # a register A operand (its own, or the tile this mma's result becomes): rows whole per warp(group);
        # rows only reduced or broadcast: preferred whole, else combined across warps
        whole_rows = rows_need == "must" or not isinstance(node.a, ir.Ref)
        prefer = rows_need == "prefer"
        dt = node.a.dtype if isinstance(node.a, ir.Ref) else node.a.type.dtype
        kstep = 32 if dt.bytes == 1 else 16  # 8-bit operands: k32 instructions (32 bytes of K, as k16 of bf16)
        if node.instr == "wgmma":
            lay = _wgmma_layout(m, n, k, t, not isinstance(node.b, ir.Ref), node.span, whole_rows, kstep, prefer)
        else:
            lay = _mma_sync_layout(m, n, k, t, node.span, whole_rows, kstep, prefer)
        return dataclasses.replace(node, layout=lay)

    def fix(stmts, t: int, rows: dict[str, str]):
        res = []
        for s in stmts:
            if isinstance(s, ir.Role):
                res.append(scope(s, s.warpgroups * 128))
                continue
            changes = {f: fix(getattr(s, f), t, rows) for f in ("body", "then", "orelse") if hasattr(s, f)}
            s = dataclasses.replace(s, **changes) if changes else s
            whole = rows.get(s.name) if isinstance(s, ir.Let) else None

            def fn(node, whole=whole):
                if isinstance(node, ir.Mma) and node.layout is None:
                    return mma_layout(node, t, whole)
                return None
            res.append(rewrite(s, fn))
        return tuple(res)

    def scope(role: ir.Role, t: int) -> ir.Role:
        return dataclasses.replace(role, body=fix(role.body, t, _whole_row_names(role.body)))

    kernel = dataclasses.replace(kernel, body=fix(kernel.body, kernel.threads, _whole_row_names(kernel.body)))
    kernel = assign_tile_layouts(kernel)
    _check_register_operands(kernel)
    return kernel


def _shape2(x) -> tuple[int, int]:
    return x.shape if isinstance(x, ir.Ref) else x.type.shape


# ---- register tiles ----------------------------------------------------------------------------------

def _mma_of(e) -> ir.Mma | None:
    while isinstance(e, ir.Tag):
        e = e.x
    return e if isinstance(e, ir.Mma) else None


class _Groups:
    """Union-find over register-tile names of one scope."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.fixed: dict[str, ir.RegLayout | None] = {}  # root -> mma layout (None: conflicting)
        self.shape: dict[str, tuple[tuple[int, ...], int]] = {}  # root -> (shape, smallest element bytes)
        self.columns: set[str] = set()  # roots read from a transposed shared view: one element per thread

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, names: list[str]) -> str | None:
        if not names:
            return None
        root = self.find(names[0])
        for n in names[1:]:
            r = self.find(n)
            if r != root:
                self.parent[r] = root
                if r in self.fixed:
                    self.fix(root, self.fixed.pop(r))
                if r in self.shape:
                    self.note(root, *self.shape.pop(r))
                if r in self.columns:
                    self.columns.discard(r)
                    self.columns.add(root)
        return root

    def fix(self, root: str, lay: ir.RegLayout | None) -> None:
        if root in self.fixed and self.fixed[root] != lay:
            self.fixed[root] = None
        else:
            self.fixed[root] = lay

    def note(self, root: str, shape: tuple[int, ...], nbytes: int) -> None:
        old = self.shape.get(root)
        self.shape[root] = (shape, nbytes if old is None else min(old[1], nbytes))


def _reach(e, out: list) -> list:
    """Reduce, Reshape and Mma nodes at elementwise reach of `e` (the nodes where tile_vars stops)."""
    if isinstance(e, (ir.Reduce, ir.Reshape, ir.Mma)):
        out.append(e)
        if isinstance(e, ir.Mma):
            _reach(e.acc, out)
    elif isinstance(e, ir.Expr) and not isinstance(e, (ir.Transpose, ir.Lambda, ir.ElemTag)):
        for f in dataclasses.fields(e):
            if f.name not in ("span", "type"):
                v = getattr(e, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    if isinstance(x, ir.Expr):
                        _reach(x, out)
    return out


def _stmt_value(s):
    value = s.value if isinstance(s, (ir.Let, ir.Store, ir.AtomicAdd)) else s.src if isinstance(s, ir.Copy) else None
    if not isinstance(getattr(value, "type", None), TileT) or isinstance(value, ir.Ref):
        return None
    return value


def _values(body: tuple[ir.Stmt, ...]):
    """(statement, its register-tile value) for each statement of one scope that has one."""
    for s in scope_stmts(body):
        value = _stmt_value(s)
        if value is not None:
            yield s, value


def _build_groups(body: tuple[ir.Stmt, ...]) -> tuple[_Groups, dict[int, str]]:
    """Union the register tiles of one scope that share a layout; id(stmt) -> a name in its group.
    The operand of a reduction, broadcast or transpose is a value of its own: its tiles share a layout."""
    g = _Groups()
    keys: dict[int, str] = {}
    anon = 0
    for s in scope_stmts(body):
        value = _stmt_value(s)
        if value is None:
            continue
        names = sorted(aligned_vars(value))
        if isinstance(s, ir.Let):
            names = [s.name, *names]
        else:
            anon += 1
            names = [f"#{anon}", *names]
        root = g.union(names)
        keys[id(s)] = names[0]
        g.note(root, value.type.shape, value.type.dtype.bytes)
        inner = value
        while isinstance(inner, ir.Tag):
            inner = inner.x
        if isinstance(inner, ir.Load) and inner.ref.space == "shared" and inner.ref.transposed:
            # consecutive threads on consecutive rows of the buffer: with an odd word pitch (a padded
            # layout) a warp's reads of a column hit 32 different banks
            g.columns.add(root)
        for node in expr_nodes(value, []):
            inner = node.x if isinstance(node, (ir.Reduce, ir.Reshape, ir.Transpose)) else None
            if isinstance(getattr(inner, "type", None), TileT):
                g.union(sorted(aligned_vars(inner)))
    return g, keys


def _whole_row_names(body: tuple[ir.Stmt, ...]) -> dict[str, str]:
    """Tiles whose rows each warp (warpgroup) should hold whole ("prefer": those reduced along their rows
    or combined with a broadcast row vector) or must ("must": the register A operand of an mma), with
    their groups."""
    g, keys = _build_groups(body)
    marked: set[str] = set()
    must: set[str] = set()
    for s, value in _values(body):
        for node in expr_nodes(value, []):
            if isinstance(node, ir.Reduce) and len(node.x.type.shape) == 2 and node.axis == 1:
                marked |= {g.find(n) for n in tile_vars(node.x, set())}
            if isinstance(node, ir.Mma) and not isinstance(node.a, ir.Ref):
                must |= {g.find(n) for n in tile_vars(node.a, set())}
        for node in _reach(value, []):
            if isinstance(node, ir.Reshape) and len(node.type.shape) == 2 and node.type.shape[1] == 1 \
                    and len(value.type.shape) == 2:
                marked.add(g.find(keys[id(s)]))
            if isinstance(node, ir.Mma) and not isinstance(node.a, ir.Ref):
                must.add(g.find(keys[id(s)]))
    return {n: "must" if g.find(n) in must else "prefer" for n in g.parent if g.find(n) in marked | must}


def rows_slice(lay: ir.RegLayout) -> Slice:
    """The Slice (fragments.slice_fragment) of the rows of an mma-fragment tile; ValueError if none."""
    if lay.kind != "mma":
        raise ValueError("only tiles with an mma fragment layout have row slices")
    return slice_fragment(fragment_of(lay), 0)


_INDEX_NODES = (ir.Arange, ir.Full, ir.Const, ir.Special, ir.Bin, ir.Un, ir.Cmp, ir.Select, ir.Tag, ir.Var)


def _index_pure(e, index_names: set[str]) -> bool:
    """`e` is computed from arange, constants and scalars only (an index tile: no registers needed)."""
    if isinstance(e, ir.Math):
        return e.fn in ("abs", "min", "max", "cdiv", "cast") and \
            all(_index_pure(a, index_names) for a in e.args)
    if not isinstance(e, _INDEX_NODES):
        return False
    if isinstance(e, ir.Var):
        return not isinstance(e.type, TileT) or e.name in index_names
    if isinstance(e, ir.Tag):
        return _index_pure(e.x, index_names)
    for f in dataclasses.fields(e):
        if f.name not in ("span", "type"):
            v = getattr(e, f.name)
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, ir.Expr) and not _index_pure(x, index_names):
                    return False
    return True


def _index_groups(body, g: _Groups) -> set[str]:
    """Roots of the 1-D groups whose every definition is index-pure and that never read themselves."""
    lets: dict[str, list] = {}
    for s in scope_stmts(body):
        if isinstance(s, ir.Let) and isinstance(s.value.type, TileT):
            lets.setdefault(g.find(s.name), []).append(s)
    cand = {r for r, ss in lets.items() if len(ss[0].value.type.shape) == 1}
    while True:
        names = {n for n in g.parent if g.find(n) in cand}
        drop = {r for r in cand for s in lets[r]
                if not _index_pure(s.value, names - {n for n in names if g.find(n) == r})}
        if not drop:
            return cand
        cand -= drop


def _assign_scope(body: tuple[ir.Stmt, ...], threads: int) -> tuple[ir.Stmt, ...]:
    g, keys = _build_groups(body)
    for s in scope_stmts(body):
        value = _stmt_value(s)
        mma = _mma_of(value) if value is not None else None
        if mma is not None and mma.layout is not None:
            g.fix(g.find(keys[id(s)]), mma_reg_layout(mma.layout, threads))
    index = _index_groups(body, g)
    warp_rows = _row_reduced(body, g)

    # 2-D tiles: an mma fragment, else blocked; 1-D tiles: from the tiles they are tied to (below)
    decided: dict[str, ir.RegLayout | None] = {}
    for root, (shape, nbytes) in g.shape.items():
        if root in g.fixed:
            decided[root] = g.fixed[root]
        elif root in index:
            decided[root] = ir.RegLayout("index", tuple(shape), threads)
        elif len(shape) != 1 and 1 not in shape:  # a [R, 1] / [1, C] tile waits for the tile it meets
            decided[root] = blocked_reg_layout(shape, threads, 16 if root in g.columns else nbytes,
                                               warp_rows=root in warp_rows and root not in g.columns)
    while True:  # a tie may need another 1-D tile's layout: rounds settle chains
        ties = _ties(body, g, keys, decided, threads)
        new = {root: min(lst, key=lambda t: t[0])[1] for root, lst in ties.items() if root not in decided}
        if not new:  # what nothing ties is blocked, 2-D tiles first ([1, C] / [R, 1]: a block of one row,
            # say): the vectors broadcast into them then tie to their slices, where a vector made blocked
            # in the same round would be converted through shared memory (rmsnorm's weights at BM=1)
            rest = {root: sv for root, sv in g.shape.items() if root not in decided}
            wide = {root: sv for root, sv in rest.items() if len(sv[0]) != 1}
            new = {root: blocked_reg_layout(shape, threads, nbytes) for root, (shape, nbytes) in (wide or rest).items()}
        if not new:
            break
        decided.update(new)

    def layout_of(s) -> ir.RegLayout | None:
        if id(s) not in keys:
            return None
        root = g.find(keys[id(s)])
        if root in decided:
            return decided[root]
        shape, nbytes = g.shape[root]
        return blocked_reg_layout(shape, threads, nbytes)

    def fix(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out = []
        for s in stmts:
            if isinstance(s, ir.Role):
                out.append(s)
                continue
            changes = {f: fix(getattr(s, f)) for f in ("body", "then", "orelse") if hasattr(s, f)}
            lay = layout_of(s)
            if lay is not None:
                changes["layout"] = lay
            out.append(dataclasses.replace(s, **changes) if changes else s)
        return tuple(out)

    return fix(body)


def _row_reduced(body: tuple[ir.Stmt, ...], g: _Groups) -> set[str]:
    """Roots of the 2-D groups reduced along their rows and never along their columns: their blocked
    layout gives each warp whole rows where there are enough rows (softmax or a norm over several rows
    per block: shuffles only, no shared-memory round and barrier per reduction)."""
    rows: set[str] = set()
    cols: set[str] = set()
    for _, value in _values(body):
        for node in expr_nodes(value, []):
            if isinstance(node, ir.Reduce) and len(node.x.type.shape) == 2:
                roots = {g.find(n) for n in tile_vars(node.x, set())}
                (rows if node.axis == 1 else cols).update(roots)
    return rows - cols


def _ties(body, g: _Groups, keys: dict[int, str], decided: dict, threads: int) -> dict[str, list]:
    """1-D groups tied to the layout of a 2-D tile: (priority, layout) per root. A reduction's result
    (priority 0) lands in the slice of its operand's layout; a vector broadcast into a 2-D value
    (priority 1) is wanted in the slice of that value's layout. Reads in another layout convert."""
    ties: dict[str, list] = {}

    def lay_var(name: str):
        return decided.get(g.find(name))

    def tie(root: str | None, prio: int, lay: ir.RegLayout | None) -> None:
        if root is None or lay is None or root in decided:
            return
        ties.setdefault(root, []).append((prio, lay))

    def walk(e, ctx: ir.RegLayout | None, root: str | None) -> None:
        if not isinstance(e, ir.Expr) or isinstance(e, (ir.Lambda, ir.ElemTag)):
            return
        if isinstance(e, ir.Reduce):
            inner = sorted(aligned_vars(e.x))
            known = [n for n in inner if lay_var(n) is not None]
            lx = operand_layout(e.x, lay_var, threads) if known or not inner else None
            if lx is not None and root is not None and tuple(e.type.shape) == tuple(g.shape[root][0]):
                tie(root, 0, reduce_result_layout(lx, e))
            walk(e.x, lx, g.find(inner[0]) if inner else None)
            return
        if isinstance(e, ir.Reshape):
            keep = broadcast_keep(tuple(e.x.type.shape), tuple(e.type.shape)) if isinstance(e.x.type, TileT) else None
            inner = slice_layout(ctx, keep) if ctx is not None and keep is not None and len(ctx.shape) == 2 else None
            names = sorted(aligned_vars(e.x)) if isinstance(e.x.type, TileT) else []
            for n in names:
                tie(g.find(n), 1, inner)
            walk(e.x, inner, g.find(names[0]) if names else None)
            return
        if isinstance(e, ir.Var) and isinstance(e.type, TileT) and ctx is not None:
            keep = broadcast_keep(tuple(e.type.shape), tuple(ctx.shape))
            if keep is not None and len(ctx.shape) == 2:
                tie(g.find(e.name), 1, slice_layout(ctx, keep))
            unit = unit_keep(tuple(e.type.shape), tuple(ctx.shape))
            if unit is not None:
                tie(g.find(e.name), 1, unit_layout(ctx, unit))
            return
        if isinstance(e, ir.Transpose):
            walk(e.x, None, None)
            return
        if isinstance(e, ir.Mma):
            walk(e.acc, ctx, root)
            return
        for f in dataclasses.fields(e):
            if f.name not in ("span", "type"):
                v = getattr(e, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    walk(x, ctx, root)

    for s in scope_stmts(body):
        value = _stmt_value(s)
        if value is None:
            continue
        root = g.find(keys[id(s)])
        walk(value, decided.get(root), root)
    return ties


def register_a_fragment(m: ir.Mma) -> Fragment:
    """The fragment an mma wants its register A operand in (its (M, K) tile over the block's threads)."""
    lay = m.layout
    (mm, kk) = m.a.type.shape
    if lay.instr == "wgmma":
        return wgmma_block_a_fragment(mm, kk, lay.warps_m)
    return mma_sync_block_fragment("A", mm, lay.tile[1], kk, lay.warps_m, lay.warps_n)


def register_a_map(m: ir.Mma, src: ir.RegLayout) -> np.ndarray | None:
    """Slot of the A operand's register tile (layout `src`) for every slot of register_a_fragment(m)."""
    if src.kind != "mma":
        return None
    return register_operand_map(fragment_of(src), register_a_fragment(m))


def _check_register_operands(kernel: ir.Kernel) -> None:
    """An mma whose A operand is an accumulator tile needs it in the A-fragment layout of the instruction,
    element for element in the same thread: true for an accumulator of an mma with the same warp
    (group) split over M (fragments.register_operand_map proves it from the tables). Other layouts
    are exchanged through shared memory by the code generator."""

    def scope(body, threads: int) -> None:
        lays: dict[str, ir.RegLayout] = {}
        for s in scope_stmts(body):
            if isinstance(s, ir.Let) and s.layout is not None:
                lays.setdefault(s.name, s.layout)
        for s in scope_stmts(body):
            value = _stmt_value(s)
            for node in expr_nodes(value, []) if value is not None else ():
                if not isinstance(node, ir.Mma) or isinstance(node.a, ir.Ref) or node.layout is None:
                    continue
                src = {lays.get(n) for n in tile_vars(node.a, set())}
                why = None
                if len(src) != 1 or None in src:
                    why = "its register tiles have no single layout"
                else:
                    (lay,) = src
                    # another kind of layout (a loaded or computed tile) is exchanged through shared
                    # memory by the code generator (argus/codegen/mma.py _register_a_exchanged)
                    if lay.kind == "mma" and register_a_map(node, lay) is None:
                        why = (f"its layout ({lay.mma.instr} {lay.mma.warps_m}x{lay.mma.warps_n} over "
                               f"{lay.mma.tile[0]}x{lay.mma.tile[1]}) does not give each thread the A elements the "
                               f"instruction wants ({node.layout.warps_m}x{node.layout.warps_n})")
                if why is not None:
                    raise error("mma-layout", f"the register A operand of this mma cannot be used in place: {why}",
                                node.span, "compute A with an mma whose warps (warpgroups) split M the same way, "
                                "or stage it through a shared buffer")

    scope(kernel.body, kernel.threads)
    for s in _roles(kernel.body):
        scope(s.body, s.warpgroups * 128)


def _roles(body: tuple[ir.Stmt, ...]) -> list[ir.Role]:
    """The roles of a block, at any depth of its control flow (`if r0 < r_end:` around them: an MoE tile
    the schedule leaves empty skips the whole block)."""
    out: list[ir.Role] = []
    for s in body:
        if isinstance(s, ir.Role):
            out.append(s)
            continue
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                out.extend(_roles(getattr(s, f)))
    return out


def _in_roles(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """Every role of `body` (at any depth) with its own scope's layouts; the rest as it is."""
    out = []
    for s in body:
        if isinstance(s, ir.Role):
            out.append(dataclasses.replace(s, body=_assign_scope(s.body, s.warpgroups * 128)))
            continue
        changes = {f: _in_roles(getattr(s, f)) for f in ("body", "then", "orelse") if hasattr(s, f)}
        out.append(dataclasses.replace(s, **changes) if changes else s)
    return tuple(out)


def assign_tile_layouts(kernel: ir.Kernel) -> ir.Kernel:
    """Give every register tile of every scope (the block outside roles, each role) a RegLayout."""
    return dataclasses.replace(kernel, body=_in_roles(_assign_scope(kernel.body, kernel.threads)))


# ---- shared buffers ------------------------------------------------------------------------------------

def shared_tile_layout(dtype: DType, shape: tuple[int, ...], swizzle: int) -> ComposedLayout:
    """Element offset of (r, c) in the 2-D tile formed by a buffer's last two axes.

    Swizzled buffers use the TMA / wgmma layout (fragments.smem_tile_layout: 8-row x `swizzle`-byte
    atoms, XOR-swizzled); unswizzled ones are plain row-major. A 1-D buffer is one row.
    """
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape[-2:]
    if swizzle:
        return smem_tile_layout(rows, cols, dtype.bytes, swizzle)
    return ComposedLayout(Swizzle(0, 0, 0), 0, Layout((rows, cols), (cols, 1)))


def shared_swizzle(dtype: DType, swizzle: int) -> Swizzle:
    return smem_swizzle(swizzle, dtype.bytes) if swizzle else Swizzle(0, 0, 0)
