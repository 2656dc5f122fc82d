"""Output coverage of a tensor that `atomic_add` accumulates into.

An atomic add reads what the element holds and adds to it, so its tensor is an input as well, and "every
element written exactly once" is not its contract: an element no block adds to keeps its value, and any
number of atomic adds to one element do not race (the sum does not depend on their order beyond
rounding). Which sums each element must receive is the reference's (`T = T + ...`), compared by the
footprint (argus/analysis/atomic_terms.py, argus/analysis/footprint.py).

What coverage proves: no element is both plain-stored by one block and atomically added to by another
(blocks are unordered: the result would depend on which runs first); with adds only, every element
receives one (a claim: a scatter may leave elements alone on purpose, so only a replayed wrong value
stands); the kernel does not read the tensor while other blocks may be adding to it. A block that both
stores and adds to one element, or a schedule whose writers are not blocks (a persistent tile loop,
data-dependent positions), is unknown with the reason.
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.findings import VIOLATED
from argus.analysis.solving import check_split
from argus.analysis.symbolic import SOLVER_TIMEOUT_MS, as_int, solver
from argus.analysis.trace import path_decisions

CODES = ("output-unwritten", "output-written-twice")


def atomic_coverage(cov, a, live, out: str) -> None:
    # covers() lives with the block coverage it serves (imported here, as coverage_data does, because
    # coverage imports this module)
    from argus.analysis.checks.coverage import covers

    stores = [(s, tr, c) for tr, c in live for s in tr.stores if s.view.base == out]
    span = next(s.span for s, _t, _c in stores if s.atomic)
    reads = [acc for tr, _c in live for acc in tr.global_accesses if acc[2] == "read" and acc[0].base == out]
    if reads:
        cov.unknown("output-written-twice", reads[0][3], f"'{out}' is read by the kernel and accumulated by atomic "
                    "adds: a read racing with other blocks' adds is not modelled")
    plain = [(s, tr, c) for s, tr, c in stores if not s.atomic]
    if not plain:
        _reached(cov, live, out, span)  # only atomic adds: no two of them race
        return
    if any(tr.tiles for _s, tr, _c in stores):
        for code in CODES:
            cov.unknown(code, span, f"'{out}' is both stored and atomically added to in a persistent tile loop")
        return
    cov.unknown("output-unwritten", span, f"'{out}' is both stored and atomically added to: which elements must "
                "be stored is the reference's (not modelled with atomic adds)")
    _, ctx = live[0]
    t = a.kernel.tensor(out)
    dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in t.dims]
    c = tuple(z3.Int(f"{out}_a{d}") for d in range(len(dims)))
    in_range = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])
    block_names = {str(b) for b in ctx.block}
    base = [x for x in ctx.constraints if not T.mentions(x, block_names)]
    b1 = tuple(z3.Int(f"pa{d}") for d in range(3))
    b2 = tuple(z3.Int(f"ra{d}") for d in range(3))

    def on_path(tr, blk):
        """The path of trace `tr` taken by block `blk` (its constraints, with the block renamed)."""
        sub = list(zip(ctx.block, blk))
        return z3.And(*[z3.substitute(T.zb(x), *sub) for x in tr.constraints])

    def in_grid(blk):
        return z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(blk, ctx.grid)])

    atomics = [(s, tr) for s, tr, _c in stores if s.atomic]
    other, same = [], []
    for sp, tp, _c in plain:
        for sa, ta in atomics:
            hit1 = z3.And(on_path(tp, b1), covers(sp, b1, ctx, c))
            other.append(z3.And(hit1, on_path(ta, b2), covers(sa, b2, ctx, c),
                                z3.Not(z3.And(*[x == y for x, y in zip(b1, b2)]))))
            same.append(z3.And(hit1, on_path(ta, b1), covers(sa, b1, ctx, c)))
    # two different blocks: one stores the element, the other adds to it -- unordered, a race
    cov.record("output-written-twice", base, z3.And(in_range, in_grid(b1), in_grid(b2), z3.Or(*other)), ctx, c, out,
               f"output '{out}' has elements one block stores while another adds to them atomically (blocks are "
               "unordered: the result depends on which runs first)", span)
    if cov.status["output-written-twice"] == VIOLATED:
        return
    s = solver(SOLVER_TIMEOUT_MS)
    s.add(*base, in_range, in_grid(b1), z3.Or(*same))
    if check_split(s) != z3.unsat:
        cov.unknown("output-written-twice", span, f"a block may both store and atomically add to an element of "
                    f"'{out}': the order of its global writes is not modelled")


def _reached(cov, live, out: str, span) -> None:
    """Elements no block adds to keep their input value. The reference usually adds to every element, but
    may not (a scatter): such an element is a claim the replay must confirm (its value differs from the
    reference's), else unknown."""
    from argus.analysis.checks.coverage import candidate_block, covers

    for tr, ctx in live:
        block_names = {str(b) for b in ctx.block}
        path = path_decisions(tr, ctx)
        if any(T.mentions(x, block_names) for x in path):
            cov.unknown("output-unwritten", span, f"blocks take different paths to their atomic adds to '{out}'")
            return
        dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in cov.a.kernel.tensor(out).dims]
        c = tuple(z3.Int(f"{out}_r{d}") for d in range(len(dims)))
        misses = []
        for st in (s for s in tr.stores if s.view.base == out):
            cb = candidate_block(st, ctx, c)
            if cb is None:
                cov.unknown("output-unwritten", span, f"which block adds to an element of '{out}' is not solved")
                return
            in_grid = z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(cb, ctx.grid)])
            misses.append(z3.Not(z3.And(in_grid, covers(st, cb, ctx, c))))
        base = [x for x in ctx.constraints if not T.mentions(x, block_names)] + path
        in_range = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])
        cov.record("output-unwritten", base, z3.And(in_range, *misses), ctx, c, out,
                   f"output '{out}' has elements no block adds to (they keep their input value)", span, claim=True,
                   unproved=f"whether every element of '{out}' receives an atomic add is not proved")
        if cov.status["output-unwritten"] == VIOLATED:
            return
