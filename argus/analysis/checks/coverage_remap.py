"""Output coverage through a remapped block id over data-dependent tiles.

A grouped raster over a host tile schedule (MoE: `t = f(block)`, `r0 = load(tile_row[t])`,
`n = g(block)`, stores at `[r0 : +BM, n * BN : +BN]`) reaches the stores only through *index terms*
I_k(block): the arguments of the schedule reads (t) and the tile indices of affine starts (n of n * BN).
If block -> (I_1, ..., I_m) is a bijection from the launch grid onto the box [0, n_1) x ... x [0, n_m),
every index tuple is run by exactly one block, so the blocks can be renamed by their tuples: the stores,
their masks, the per-block constraints and the quantified contract are rewritten over fresh virtual
block ids V_k, and coverage is the exact data-dependent argument (argus/analysis/checks/coverage_data.py)
over the virtual grid, where the schedule is indexed by a block id directly again.

The bijection is three queries, as the tile-schedule lemma of coverage_tiles.py: every block lands in
the box, the grid has as many blocks as the box has tuples, and two blocks never share a tuple. Any
block id left over after the rewrite (a store, mask, path constraint or contract instance that still
reads it) means the renaming does not capture the schedule: the caller falls back to its claim.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import z3

from argus.analysis import terms as T
from argus.analysis.solving import nonlinear_check
from argus.analysis.symbolic import as_int, solver


class Virtual:
    """The symbolic context with the block ids replaced by virtual ones; everything else delegated."""

    def __init__(self, ctx, block: tuple, grid: tuple, rewrite):
        self._ctx = ctx
        self.block = block
        self.grid = grid
        self._rewrite = rewrite

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def instantiate(self, q, v):
        return self._rewrite(self._ctx.instantiate(q, v))


@dataclass
class Remapped:
    stores: list
    constraints: list
    ctx: Virtual


def remap(stores: list, constraints: list, ctx, kernel, out: str) -> Remapped | str:
    """The stores of `out` over virtual block ids, or why the renaming does not apply."""
    names = {str(b) for b in ctx.block}
    fns = {f.name(): f for f in ctx.functions.values()}
    odims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in kernel.tensor(out).dims]
    terms: list = []  # index terms, in order of discovery
    ranges: list = []

    def add(term, n) -> None:
        if not any(term.eq(x) for x in terms):
            terms.append(term)
            ranges.append(n)

    for st in stores:
        for ax, (start, ext) in enumerate(zip(st.view.starts, st.view.extents)):
            e = as_int(start)
            if not T.mentions(e, names):
                continue
            found = _schedule_indices(e, names, fns, kernel, ctx)
            if found:
                for term, n in found:
                    add(term, n)
                continue
            size = ext or 1
            x = _tile_index(e, size)
            if x is None or not T.mentions(x, names):
                return f"the start {e} of '{out}' is no tile index or schedule read of the block id"
            add(x, (odims[ax] + size - 1) / size)
    if not terms:
        return "no index terms"
    v = tuple(z3.Int(f"vblock{k}") for k in range(len(terms)))
    # terms are compared structurally: everything is put in z3's simplified form first
    pairs = [(z3.simplify(t), x) for t, x in zip(terms, v)]

    def rw(x):
        return z3.substitute(z3.simplify(x), *pairs) if isinstance(x, z3.ExprRef) else x

    new_stores = [replace(st, view=_view(st.view, rw)) for st in stores]
    # the grid's own bounds hold for every block: the virtual grid states its own instead
    kept = [x for x in constraints if isinstance(x, bool) or not T.mentions(x, names) or not _grid_bound(x, ctx)]
    new_constraints = [rw(x) for x in kept]
    probe = z3.Int("_remap_probe")
    leftovers = [x for st in new_stores for x in _view_terms(st.view)] + \
        [x for x in new_constraints if not isinstance(x, bool)] + \
        [rw(ctx.instantiate(q, probe)) for q in ctx.quantified]
    if any(T.mentions(x, names) for x in leftovers):
        return "the block id is read besides the index terms (a mask, a path condition or the contract)"
    why = _bijection(terms, ranges, ctx, constraints, names)
    if why:
        return why
    return Remapped(new_stores, new_constraints, Virtual(ctx, v, tuple(ranges), rw))


def _grid_bound(x, ctx) -> bool:
    """Whether constraint x is implied by the block ids' ranges alone (0 <= b < grid)."""
    s = solver(1000)  # a resource limit: a wall-clock one made the check's verdict depend on the load
    s.add(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(ctx.block, ctx.grid)], z3.Not(x))
    return s.check() == z3.unsat


def _schedule_indices(e, names: set[str], fns: dict, kernel, ctx) -> list:
    """(argument, extent) of every tensor read in `e` whose argument computes with a block id."""
    out, todo = [], [e]
    while todo:
        x = todo.pop()
        if z3.is_app(x) and x.decl().name() in fns and x.num_args() > 0:
            t = kernel.tensor(x.decl().name())
            for pos, arg in enumerate(x.children()):
                if T.mentions(arg, names) and not _has_read(arg, fns):
                    d = t.dims[pos]
                    out.append((arg, as_int(d) if isinstance(d, int) else ctx.dims[d]))
                elif T.mentions(arg, names):
                    todo.append(arg)
            continue
        todo.extend(x.children())
    return out


def _has_read(x, fns: dict) -> bool:
    if z3.is_app(x) and x.decl().name() in fns and x.num_args() > 0:
        return True
    return any(_has_read(c, fns) for c in x.children())


def _tile_index(e, size: int):
    """X where e == X * size (an affine start over whole tiles); e itself for one-element tiles."""
    if size == 1:
        return e
    if z3.is_mul(e) and e.num_args() == 2:
        a, b = e.children()
        for x, k in ((a, b), (b, a)):
            if z3.is_int_value(k) and k.as_long() == size:
                return x
    return None


def _view(view, rw):
    keep = view.keep
    return replace(view, starts=tuple(rw(as_int(s)) for s in view.starts),
                   keep=None if keep is None else (lambda idx, _k=keep: rw(T.zb(_k(idx)))))


def _view_terms(view) -> list:
    out = [as_int(s) for s in view.starts]
    if view.keep is not None:
        out.append(T.zb(view.keep(tuple(z3.Int(f"_remap_k{d}") for d in range(len(view.shape))))))
    return out


def _bijection(terms: list, ranges: list, ctx, constraints: list, names: set[str]) -> str | None:
    """None when block -> terms is a bijection of the grid onto the box of `ranges`, else the reason."""
    base = [x for x in constraints if not isinstance(x, bool) and not T.mentions(x, names)]
    prefer = [d <= 512 for d in ctx.dims.values()]
    blk = tuple(ctx.block)
    other = tuple(z3.Int(f"{b}_other") for b in blk)

    def in_grid(bs):
        return [z3.And(b >= 0, b < as_int(g)) for b, g in zip(bs, ctx.grid)]

    def at(bs, x):
        return z3.substitute(x, *zip(blk, bs))

    outside = z3.Or(*[z3.Or(x < 0, x >= n) for x, n in zip(terms, ranges)])
    grid = z3.IntVal(1)
    for g in ctx.grid:
        grid = grid * as_int(g)
    box = z3.IntVal(1)
    for n in ranges:
        box = box * n
    distinct = z3.Or(*[b != o for b, o in zip(blk, other)])
    same = [x == at(other, x) for x in terms]
    queries = [("a block's index tuple leaves the box", [*in_grid(blk), outside]),
               ("the grid and the box differ in size", [grid != box]),
               ("two blocks share an index tuple", [*in_grid(blk), *in_grid(other), distinct, *same])]
    for why, q in queries:
        r, _ = nonlinear_check(base + q, prefer)
        if r != z3.unsat:
            return f"the block remapping is not proved a bijection ({why}{'' if r == z3.sat else ': timeout'})"
    return None

