"""Layout assignment: how each `mma` spreads its tile over warps, and how every register tile is held.

mma.sync m16n8k16: the block's warps form a warps_m x warps_n grid over the accumulator; each warp
computes (M / warps_m) x (N / warps_n) with 16x8x16 instructions. wgmma m64nNk16: the warpgroups
split M in 64-row slabs (or N when M is a single slab); one instruction covers 64 x n with
n <= 256. Shapes the instruction cannot tile are errors at the `mma`, with the reason.

Register tiles: every tile-valued `Let`, and the register value of every `Store` / `Copy`, gets a
RegLayout. Tiles connected by elementwise arithmetic (and an `mma`'s accumulator with its result)
share one layout; a group containing an mma accumulator takes the mma's fragment, any other group
the "blocked" layout. `fragment_of` turns a RegLayout into the (thread, slot) -> (row, col) map
(argus/ir/fragments.py) that the code generator distributes registers by. A group that would need
two different fragments keeps no layout (the code generator reports it); this pass never rejects a
program the interpreter can run.

Shared buffers: `shared_tile_layout` is the one definition of where element (r, c) of the 2-D tile
of a buffer lives (the last two axes; leading axes, e.g. pipeline stages, are whole tiles in
row-major order).
"""

from __future__ import annotations

import dataclasses
import math

from argus.dsl.diagnostics import error
from argus.dsl.types import DType, TileT
from argus.ir import nodes as ir
from argus.ir.fragments import Fragment, mma_sync_block_fragment, smem_tile_layout, wgmma_block_fragment
from argus.ir.layout import Layout
from argus.ir.swizzle import ComposedLayout, Swizzle, smem_swizzle
from argus.ir.transform import rewrite


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mma_sync_layout(m: int, n: int, k: int, threads: int, span) -> ir.FragmentLayout:
    warps = threads // 32
    if m % 16 or n % 8 or k % 16:
        raise error("mma-shape", f"mma.sync m16n8k16 cannot tile [{m}, {k}] @ [{k}, {n}]", span,
                    "M must be a multiple of 16, N of 8 and K of 16")
    best = None
    for wm in _divisors(warps):
        wn = warps // wm
        if m % (16 * wm) or n % (8 * wn):
            continue
        tm, tn = m // wm, n // wn
        score = abs(tm - tn)  # squarest warp tile: best operand reuse per warp
        if best is None or score < best[0]:
            best = (score, wm, wn)
    if best is None:
        raise error("mma-shape", f"{warps} warps cannot split a {m}x{n} mma.sync tile evenly", span,
                    "change the tile or the thread count so each warp gets a multiple of 16x8")
    return ir.FragmentLayout("mma.sync", (m, n), best[1], best[2], (16, 8, 16))


def _wgmma_layout(m: int, n: int, k: int, threads: int, b_in_regs: bool, span) -> ir.FragmentLayout:
    if threads % 128:
        raise error("mma-shape", f"wgmma needs whole warpgroups (128 threads); this block has {threads}", span,
                    "launch with warpgroups=N or threads a multiple of 128")
    if b_in_regs:
        raise error("mma-shape", "wgmma reads its B operand from shared memory, not registers", span,
                    "keep B in a shared buffer, or use instr=\"mma.sync\"")
    groups = threads // 128
    if k % 16:
        raise error("mma-shape", f"wgmma k16 cannot tile K={k}", span, "K must be a multiple of 16")
    if m % (64 * groups) == 0:
        gm, gn = groups, 1
    elif m == 64 and n % (8 * groups) == 0:
        gm, gn = 1, groups
    else:
        raise error("mma-shape", f"{groups} warpgroup(s) cannot split a {m}x{n} wgmma tile", span,
                    "each warpgroup computes 64-row slabs: make M a multiple of 64 x warpgroups")
    per_n = n // gn
    if per_n % 8:
        raise error("mma-shape", f"wgmma N={per_n} per warpgroup must be a multiple of 8", span)
    inst_n = max(d for d in range(8, min(per_n, 256) + 1, 8) if per_n % d == 0)
    return ir.FragmentLayout("wgmma", (m, n), gm, gn, (64, inst_n, 16))




def assign_layouts(kernel: ir.Kernel) -> ir.Kernel:
    def fix_stmt_threads(stmts, threads):
        res = []
        for s in stmts:
            t = s.warpgroups * 128 if isinstance(s, ir.Role) else threads

            def fn(node, t=t):
                if isinstance(node, ir.Mma) and node.layout is None:
                    (m, k), n = _shape2(node.a), _shape2(node.b)[1]
                    if node.instr == "wgmma":
                        lay = _wgmma_layout(m, n, k, t, not isinstance(node.b, ir.Ref), node.span)
                    else:
                        lay = _mma_sync_layout(m, n, k, t, node.span)
                    return dataclasses.replace(node, layout=lay)
                return None
            if isinstance(s, ir.Role):
                res.append(dataclasses.replace(s, body=fix_stmt_threads(s.body, t)))
            else:
                res.append(rewrite(s, fn))
        return tuple(res)
    kernel = dataclasses.replace(kernel, body=fix_stmt_threads(kernel.body, kernel.threads))
    return assign_tile_layouts(kernel)


def _shape2(x) -> tuple[int, int]:
    return x.shape if isinstance(x, ir.Ref) else x.type.shape


# ---- register tiles ----------------------------------------------------------------------------------

def mma_reg_layout(lay: ir.FragmentLayout, threads: int) -> ir.RegLayout:
    return ir.RegLayout("mma", lay.tile, threads, lay)


def blocked_reg_layout(shape: tuple[int, ...], threads: int, elem_bytes: int = 2) -> ir.RegLayout:
    """Threads over runs of `vec` elements (up to 16 bytes) of the last axis, row-major."""
    last = shape[-1] if shape else 1
    vec = 1
    while vec * 2 <= max(1, 16 // elem_bytes) and last % (vec * 2) == 0:
        vec *= 2
    while vec > 1 and math.prod(shape) // vec < threads:  # small tiles: more threads, shorter runs
        vec //= 2
    return ir.RegLayout("blocked", tuple(shape), threads, None, vec)


def fragment_of(lay: ir.RegLayout) -> Fragment:
    """The (thread, slot) -> (row, col) map of a register layout; 1-D tiles are one row (row 0)."""
    if lay.kind == "mma":
        f = lay.mma
        m, n = f.tile
        if f.instr == "wgmma":
            return wgmma_block_fragment(m, n, f.warps_m, f.warps_n, instr_n=f.inst_shape[1])
        return mma_sync_block_fragment("C", m, n, 16, f.warps_m, f.warps_n)
    rows, cols = (1, lay.shape[0]) if len(lay.shape) == 1 else lay.shape[-2:]
    if len(lay.shape) > 2:
        raise ValueError(f"register tiles have 1 or 2 axes, got {lay.shape}")
    v, t = lay.vec, lay.threads
    tpr = math.gcd(cols // v, t)  # threads along a row, each owning runs of v elements
    rp = t // tpr  # rows covered by one pass of all threads
    rg = math.gcd(rows, rp)  # distinct rows per pass; rp // rg threads hold each element (replicas)
    thread_shape = (tpr, rg, rp // rg)
    slot_shape = (v, cols // (v * tpr), rows // rg)
    row = Layout((thread_shape, slot_shape), ((0, 1, 0), (0, 0, rg)))
    col = Layout((thread_shape, slot_shape), ((v, 0, 0), (1, v * tpr, 0)))
    return Fragment(f"blocked{lay.shape}/{t}x{v}", (rows, cols), row, col)


def replicas(lay: ir.RegLayout) -> int:
    """How many threads hold each element (only the first of them stores it)."""
    if lay.kind == "mma":
        return 1
    f = fragment_of(lay)
    return f.row.shape[0][2]


def _tile_vars(e, out: set[str]) -> set[str]:
    """Register-tile variables whose layout must equal the value of `e` (elementwise reach)."""
    if isinstance(e, ir.Var) and isinstance(e.type, TileT):
        out.add(e.name)
    elif isinstance(e, ir.Mma):
        _tile_vars(e.acc, out)  # the a / b operands have operand layouts of their own
    elif isinstance(e, (ir.Reduce, ir.Reshape, ir.Transpose, ir.Lambda, ir.ElemTag)):
        pass  # the shape changes: not the same layout
    elif isinstance(e, ir.Expr):
        for f in dataclasses.fields(e):
            if f.name not in ("span", "type"):
                v = getattr(e, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    if isinstance(x, ir.Expr):
                        _tile_vars(x, out)
    return out


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
        return root

    def fix(self, root: str, lay: ir.RegLayout | None) -> None:
        if root in self.fixed and self.fixed[root] != lay:
            self.fixed[root] = None
        else:
            self.fixed[root] = lay

    def note(self, root: str, shape: tuple[int, ...], nbytes: int) -> None:
        old = self.shape.get(root)
        self.shape[root] = (shape, nbytes if old is None else min(old[1], nbytes))


def _scope_stmts(body):
    """Statements of one scope, nested loops and ifs included, roles excluded."""
    for s in body:
        if isinstance(s, ir.Role):
            continue
        yield s
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                yield from _scope_stmts(getattr(s, f))


def _assign_scope(body: tuple[ir.Stmt, ...], threads: int) -> tuple[ir.Stmt, ...]:
    g = _Groups()
    anon = 0
    keys: dict[int, str] = {}  # id(stmt) -> a name in its group

    def value_bytes(e) -> int:
        return e.type.dtype.bytes if isinstance(getattr(e, "type", None), TileT) else 4

    for s in _scope_stmts(body):
        value = s.value if isinstance(s, (ir.Let, ir.Store)) else s.src if isinstance(s, ir.Copy) else None
        if not isinstance(getattr(value, "type", None), TileT) or isinstance(value, ir.Ref):
            continue
        names = sorted(_tile_vars(value, set()))
        if isinstance(s, ir.Let):
            names = [s.name, *names]
        else:
            anon += 1
            names = [f"#{anon}", *names]
        root = g.union(names)
        keys[id(s)] = names[0]
        g.note(root, value.type.shape, value_bytes(value))
        mma = _mma_of(value)
        if mma is not None and mma.layout is not None:
            g.fix(root, mma_reg_layout(mma.layout, threads))

    def layout_of(s) -> ir.RegLayout | None:
        if id(s) not in keys:
            return None
        root = g.find(keys[id(s)])
        if root in g.fixed:
            return g.fixed[root]
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


def assign_tile_layouts(kernel: ir.Kernel) -> ir.Kernel:
    """Give every register tile of every scope (the block outside roles, each role) a RegLayout."""
    body = _assign_scope(kernel.body, kernel.threads)
    body = tuple(dataclasses.replace(s, body=_assign_scope(s.body, s.warpgroups * 128)) if isinstance(s, ir.Role)
                 else s for s in body)
    return dataclasses.replace(kernel, body=body)


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
