"""Coverage through a persistent tile loop: the tile schedule is a bijection onto the output's tile grid.

`for t in persistent(T)` runs every tile index t in [0, T) exactly once over the grid (block b takes
b, b + G, ...), so the writers are the tile indices, not the blocks. The executor ran the body for an
arbitrary tile t; its stores start at S(t) (a grouped raster: bm = group * GROUP_M + ..., divisions by
runtime tile counts). Instead of inverting S, coverage follows from four facts, each one query:

1. aligned: along every axis the schedule moves, S_i(t) is a multiple of the store's extent E_i (an
   indexed axis, `O[b, h, ...]`, has extent 1);
2. in the grid: 0 <= S_i(t) / E_i < n_i, with n_i = cdiv(dim_i, E_i) the tiles along the axis;
3. counting: T = prod n_i;
4. injective: two different tiles never start at the same place.

An injective map of [0, T) into a grid of T tiles is onto, so every tile of the output is stored
exactly once: nothing unwritten, nothing twice. Nonlinear divisions are purified
(argus.analysis.solving.purify); a solver timeout is unknown.
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.findings import NO_ANSWER
from argus.analysis.solving import nonlinear_check
from argus.analysis.symbolic import as_int


def tile_coverage(cov, a, live, out: str) -> None:
    k = a.kernel
    # a block past the last tile runs no tile and stores nothing: it is no writer
    live = [(tr, c) for tr, c in live if tr.tiles or any(s.view.base == out for s in tr.stores)]
    trace0, ctx = live[0]
    if any(len(tr.tiles) != 1 for tr, _ in live):
        for code in ("output-unwritten", "output-written-twice"):
            cov.unknown(code, k.span, "coverage needs every path to run one persistent tile loop")
        return
    tv = z3.Int("tile")
    sigs, stores_of = set(), None
    for tr, _ctx in live:
        t, loop, b, g, n = tr.tiles[0]
        stores = [s for s in tr.stores if s.view.base == out and _first_tile(s, loop.var, t)]
        renamed = [(s, tuple(z3.substitute(as_int(x), (t, tv)) for x in s.view.starts)) for s in stores]
        sigs.add(tuple(sorted((str(st), s.view.extents, s.view.keep is None) for s, st in renamed)))
        if stores_of is None:
            stores_of, n0 = renamed, n
    span = next((s.span for s, _ in stores_of), k.span)
    if len(sigs) != 1:
        for code in ("output-unwritten", "output-written-twice"):
            cov.unknown(code, span, "tiles store differently on different paths")
        return
    if len(stores_of) != 1:
        for code in ("output-unwritten", "output-written-twice"):
            cov.unknown(code, span, f"{len(stores_of)} stores of '{out}' per tile (one is supported)")
        return
    (st, starts), = stores_of
    prove_schedule(cov, k, ctx, out, st, starts, n0, span, tv)


def prove_schedule(cov, k, ctx, out: str, st, starts: tuple, n0, span, tv) -> None:
    """The four facts for one store whose starts move with the tile variable `tv` over [0, n0)."""
    block_names = {str(x) for x in ctx.block}
    if st.view.keep is not None or any(T.mentions(x, block_names) for x in starts):
        for code in ("output-unwritten", "output-written-twice"):
            cov.unknown(code, span, "the tile's store is masked or depends on the block, not only on the tile")
        return
    dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in k.tensor(out).dims]
    moving = [i for i, x in enumerate(starts) if T.mentions(x, {"tile"})]
    base = [x for x in ctx.constraints if not T.mentions(x, block_names)]
    count = z3.substitute(as_int(n0), *[]) if not T.mentions(as_int(n0), block_names) else None
    problems = []
    for i, (x, e) in enumerate(zip(starts, st.view.extents)):
        if i in moving:
            pass  # an indexed axis (extent None) is a tile of one element along it
        elif not (isinstance(x, int) or z3.is_int_value(z3.simplify(as_int(x)))) or \
                z3.simplify(as_int(x)).as_long() != 0 or e is None:
            problems.append(f"axis {i} is not stored whole by every tile")
    if count is None or problems:
        for code in ("output-unwritten", "output-written-twice"):
            cov.unknown(code, span, "the tile loop's count depends on the block" if count is None else
                        "; ".join(problems))
        return
    in_loop = z3.And(tv >= 0, tv < count)
    ext = {i: (1 if st.view.extents[i] is None and i in moving else st.view.extents[i]) for i in range(len(starts))}
    ntiles = {i: (dims[i] + ext[i] - 1) / ext[i] for i in moving}
    full_axes = [i for i in range(len(starts)) if i not in moving]
    # a non-moving axis must be covered by the tile's extent
    for i in full_axes:
        _ask(cov, "output-unwritten", base, [dims[i] > ext[i]], ctx, out, span,
             f"output '{out}' has elements no tile writes: axis {i} is longer than the stored tile",
             ["the tile stores a fixed slice of this axis"])
    for i in moving:
        s_i = as_int(starts[i])
        _ask(cov, "output-unwritten", base, [in_loop, z3.Or(s_i % ext[i] != 0, s_i < 0, s_i / ext[i] >= ntiles[i])],
             ctx, out, span, f"output '{out}' has elements no tile writes: the tile schedule sends a tile outside "
             "the output's tile grid (or between its tiles)", ["tile t stores outside the grid of output tiles"],
             tile=tv)
    grid = z3.IntVal(1)
    for i in moving:
        grid = grid * ntiles[i]
    _ask(cov, "output-unwritten", base, [count < grid], ctx, out, span,
         f"output '{out}' has elements no tile writes: the loop runs fewer tiles than the output has",
         ["persistent(T) with T smaller than the number of output tiles"])
    _ask(cov, "output-written-twice", base, [count > grid], ctx, out, span,
         f"output '{out}' has elements written more than once: the loop runs more tiles than the output has",
         ["persistent(T) with T larger than the number of output tiles"])
    t2 = z3.Int("tile_other")
    same = [z3.substitute(as_int(starts[i]), (tv, t2)) == as_int(starts[i]) for i in moving]
    _ask(cov, "output-written-twice", base, [in_loop, t2 >= 0, t2 < count, t2 != tv, *same], ctx, out, span,
         f"output '{out}' has elements written more than once: two tiles of the schedule store the same tile",
         ["two tile indices map to one output tile"], tile=tv, other=t2)


def _first_tile(st, var: str, t) -> bool:
    v = st.step.get(var)
    return isinstance(v, z3.ExprRef) and v.eq(t)


def _ask(cov, code, base, formula: list, ctx, out, span, msg, notes, tile=None, other=None) -> None:
    if cov.done(code, out):
        return
    r, m = nonlinear_check(list(base) + list(formula), [d <= 512 for d in ctx.dims.values()], purified_first=True)
    if r == z3.unsat:
        return
    if r == z3.unknown:
        cov.unknown(code, span, f"the tile schedule of '{out}': {NO_ANSWER}")
        return
    notes = list(notes)
    if tile is not None:
        notes.append(f"tile {m.eval(tile, model_completion=True)}" +
                     (f" and tile {m.eval(other, model_completion=True)}" if other is not None else ""))
    from argus.analysis.findings import CHECKS, VIOLATED, Counterexample, Finding
    from argus.analysis.solve import value

    cx = Counterexample(dims={d: value(m, v) for d, v in ctx.dims.items()}, notes=notes)
    cov.findings[code].append(Finding(code, VIOLATED, msg, span, cx, invariant=CHECKS[code]))
    cov.status[code] = VIOLATED
