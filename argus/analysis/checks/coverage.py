"""Output coverage: every element of every output is written, and none twice, over the whole grid.

A *writer* is one block (or, in a persistent loop, one tile) executing one path. Stores are collected
per explored path for one symbolic block; coverage then quantifies over writers:

- "unwritten": an in-range element that no writer's store covers. For each store, the writer that
  would cover element c is solved from its starts (`T * b + offset`): c is unwritten if no store's
  candidate writer, taking that store's path, covers it.
- "written twice": two distinct writers (or two stores of one writer) covering one element; two
  different paths are never the same block.

Paths are grouped by the stores they make; a group's path condition is the disjunction of its paths'
constraints with the block ids renamed per writer, so blocks that take different paths (a last block
handling a remainder) are covered as they really run. Persistent tile loops: argus.analysis.checks.
coverage_tiles (the tile schedule is a bijection onto the output's tile grid). Stores whose positions
depend on tensor contents (MoE routing): argus.analysis.checks.coverage_data.
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.checks.common import Analysis
from argus.analysis.checks.coverage_atomic import atomic_coverage
from argus.analysis.checks.coverage_data import data_coverage, data_dependent
from argus.analysis.checks.coverage_tiles import prove_schedule, tile_coverage
from argus.analysis.findings import CHECKS, NO_ANSWER, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import CONTRACT_ROUNDS, contract_breaks, counterexample, value
from argus.analysis.solving import check_split
from argus.analysis.symbolic import SOLVER_TIMEOUT_MS, as_int, solver
from argus.analysis.trace import Obligation, View

CODES = ["output-unwritten", "output-written-twice"]


CLAIM_TIMEOUT_MS = 1500


class Coverage:
    """Verdicts of the two coverage checks, per output."""

    def __init__(self, a: Analysis):
        self.a = a
        self.status = {c: VERIFIED for c in CODES}
        self.findings: dict[str, list[Finding]] = {c: [] for c in CODES}

    def unknown(self, code: str, span, reason: str) -> None:
        if self.status[code] == VERIFIED:
            self.status[code] = UNKNOWN
        msg = f"not proved: {reason}"
        if not any(f.message == msg and f.span == span for f in self.findings[code]):  # once, not once per path
            self.findings[code].append(Finding(code, UNKNOWN, msg, span, invariant=CHECKS[code]))

    def done(self, code: str, out: str) -> bool:
        return any(f"'{out}'" in f.message for f in self.findings[code] if f.status == VIOLATED)

    def record(self, code, base, formula, ctx, c, out, msg, span, notes=(), purified=False, claim=False,
               unproved: str | None = None) -> None:
        """Ask for a model of `formula` under `base`: a violation with a counterexample, or nothing."""
        s = solver(SOLVER_TIMEOUT_MS)
        s.add(*base, formula)
        # a counterexample the interpreter can run: at least one block along every grid axis
        s.add(*[as_int(g) >= 1 for g in ctx.grid])
        small = [d <= 512 for d in ctx.dims.values()]
        budget = CLAIM_TIMEOUT_MS if claim else SOLVER_TIMEOUT_MS
        # an approximate query (claim): unsat still proves the check, but a model only means "replay it", so
        # short attempts (a long search would buy nothing better than unknown)
        r = check_split(s, small, timeout_ms=budget)
        first = None  # the first model: a claim for replay when the refined question gets no answer
        for _ in range(CONTRACT_ROUNDS + 1):
            if r != z3.sat:
                # unsat with every dim <= 512 proves nothing past them: ask without the bound
                r = check_split(s, timeout_ms=budget)
            if r != z3.sat:
                break
            # a model that breaks the kernel's own contract (a quantified assume at an index nobody asked
            # for, another block's assume) is no counterexample: rule its instances out and ask again
            broken = contract_breaks(s.model(), ctx)
            if not broken:
                break
            first = first or s.model()
            s.add(*broken)
            r = check_split(s, small, timeout_ms=budget)
        else:
            r = z3.unknown
        if r == z3.unsat:
            return
        if r == z3.unknown and first is None:
            self.unknown(code, span, (unproved or f"coverage of {out} through a remapped block index over "
                                      "data-dependent tiles is not modelled exactly, and the solver found no "
                                      "proof") if claim else f"{out}: {NO_ANSWER}")
            return
        if r == z3.unknown:
            # only contract-breaking models: the first is a claim, violated where replay reproduces it on
            # contents built from the whole contract
            m, claim = first, True
        else:
            m = s.model()
        ob = Obligation(code, span, msg, formula, [], {}, {})
        cx = counterexample(m, ctx, ob)
        cx.block = None
        if c:
            cx.values = {"element": f"{out}[{', '.join(str(value(m, x)) for x in c)}]"}
        else:
            cx.values = {}
        cx.values.update(tensor_values(m, ctx, formula))
        cx.notes = list(notes)
        self.findings[code].append(Finding(code, VIOLATED, msg, span, cx, invariant=CHECKS[code], claim=claim))
        self.status[code] = VIOLATED


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    cov = Coverage(a)
    live = [(t, c) for t, c in zip(a.traces, a.contexts) if t.deadlock is None]
    if not live:
        return {k: (cov.status[k], cov.findings[k]) for k in CODES}
    for out in a.kernel.outputs:
        if any(s.atomic for t, _c in live for s in t.stores if s.view.base == out):
            atomic_coverage(cov, a, live, out)
            continue
        if any(data_dependent([s for s in t.stores if s.view.base == out], c) for t, c in live):
            skipped = [(t, c) for t, c in live if _covered_elsewhere(t, c, out, live)]
            storing = [(t, c) for t, c in live if any(s.view.base == out for s in t.stores)]
            for trace, ctx in live:
                if any(trace is t for t, _c in skipped):
                    continue
                mine = signature([s for s in trace.stores if s.view.base == out])
                others = [(t, c) for t, c in storing
                          if t is not trace and signature([s for s in t.stores if s.view.base == out]) != mine]
                # with a path that skips the stores, a witness block must be shown to take a storing path;
                # with paths that store elsewhere, any storing path
                data_coverage(cov, a, trace, ctx, out, witness_takes_path=bool(skipped), others=others)
        elif any(t.tiles for t, _ in live):
            tile_coverage(cov, a, live, out)
        else:
            block_coverage(cov, a, live, out)
    return {k: (cov.status[k], cov.findings[k]) for k in CODES}


def _covered_elsewhere(trace, ctx, out: str, live) -> bool:
    """A path that stores nothing to `out` (a block that skips an empty MoE tile) is left to the paths that
    do when one of them has every constraint this path has that is free of the block ids (its dims and
    assumes: the same configuration, the storing path refined only by choices inside the branch, such as
    a loop's trip count). There each element is proved written by a witness block shown to take the
    storing path (coverage_data: the witness's branch conditions are obligations, not facts). A path
    whose configuration no storing path shares is checked on its own (and found unwritten)."""
    if any(s.view.base == out for s in trace.stores):
        return False
    names = {str(b) for b in ctx.block}

    def config(t) -> set:
        return {x.get_id() for x in t.constraints if not isinstance(x, bool) and not T.mentions(x, names)}

    mine = config(trace)
    return any(mine <= config(t) for t, _c in live if any(s.view.base == out for s in t.stores))


# ---- writers are blocks ----
def block_coverage(cov: Coverage, a: Analysis, live, out: str) -> None:
    trace0, ctx = live[0]
    t = a.kernel.tensor(out)
    dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in t.dims]
    c = tuple(z3.Int(f"{out}_c{d}") for d in range(len(dims)))
    in_range = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])
    block_names = {str(b) for b in ctx.block}
    base = [x for x in ctx.constraints if not T.mentions(x, block_names)]
    # A store inside a sequential loop is made once per iteration: which elements a path stores depends on
    # its trip counts, so a path's condition keeps them, and the question is asked over the explored trip
    # counts (0..cap; larger ones are the periodicity certificate's, or the verdict is unknown).
    in_loop = any(s.step for tr, _c in live for s in tr.stores if s.view.base == out)
    region = None
    if in_loop:
        if any(T.mentions(x, block_names) for tr, _c in live for x in tr.trip_constraints):
            cov.unknown("output-unwritten", next(s.span for tr, _c in live for s in tr.stores if s.view.base == out),
                        f"'{out}' is stored inside a loop whose trip count depends on the block")
        else:
            region = z3.Or(*[z3.And(*tr.trip_constraints) for tr, _c in live])
    groups: dict[tuple, tuple[list, list]] = {}
    for trace, tctx in live:
        stores = [s for s in trace.stores if s.view.base == out]
        # which path a block takes: its decisions; the loop trip counts only where a store is inside a loop
        # (explored up to a cap and certified periodic beyond it, they do not restrict which blocks store)
        trips = set() if region is not None else {x.get_id() for x in trace.trip_constraints}
        # nor do the path's assumes: a block that reaches the store writes there for every input the
        # contract admits (`if t < T: assume(0 <= ids[t] < V)` does not make ids[t] = -1 an unwritten row)
        path = [x for x in trace.constraints
                if not (isinstance(x, z3.ExprRef) and (x.get_id() in trips or x.get_id() in tctx.assumed))]
        groups.setdefault(signature(stores), (stores, []))[1].append(path)
    # one group: every path makes the same stores, so which path a block takes does not matter
    single = len(groups) == 1

    def cond(paths: list, blk) -> object:
        if single:
            return z3.BoolVal(True)
        sub = list(zip(ctx.block, blk))
        return z3.Or(*[z3.And(*[z3.substitute(T.zb(x), *sub) for x in p]) for p in paths])

    def in_grid(blk):
        return z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(blk, ctx.grid)])

    span = next((s.span for stores, _ in groups.values() for s in stores), a.kernel.span)
    stores0 = next(iter(groups.values()))[0]
    if single and len(stores0) == 1 and candidate_block(stores0[0], ctx, c) is None and _one_d(ctx):
        # a 1-D grid whose blocks map to output tiles through a schedule (a grouped raster): the block
        # index is the tile index of a persistent loop's proof (coverage_tiles)
        tv = z3.Int("tile")
        st = stores0[0]
        starts = tuple(z3.substitute(as_int(x), (ctx.block[0], tv)) for x in st.view.starts)
        prove_schedule(cov, a.kernel, ctx, out, st, starts, ctx.grid[0], st.span, tv)
        return
    if not cov.done("output-unwritten", out) and not (in_loop and region is None):
        ubase = base + ([region] if region is not None else [])
        misses, nearest, quantified = [], [], False
        for stores, paths in groups.values():
            for st in stores:
                cb = candidate_block(st, ctx, c)
                free = [] if single or cb is None else free_axes(st, ctx)
                if free:
                    # a grid axis the store does not move with (which output a block writes, picked by an
                    # `if` on block_id(1)): any block along it may be the writer, not only block 0
                    alts = along_free_axes(cb, free, ctx)
                    if alts is not None:
                        nearest.append(z3.Not(z3.Or(*[z3.And(in_grid(b), cond(paths, b), covers(st, b, ctx, c))
                                                      for b in alts])))
                        misses.append(nearest[-1])
                        continue
                    quantified = True
                    fv = [z3.Int(f"free{k}") for k in free]
                    bq = tuple(fv[free.index(k)] if k in free else x for k, x in enumerate(cb))
                    misses.append(z3.ForAll(fv, z3.Not(z3.And(in_grid(bq), cond(paths, bq), covers(st, bq, ctx, c)))))
                    nearest.append(z3.Not(z3.And(in_grid(cb), cond(paths, cb), covers(st, cb, ctx, c))))
                    continue
                if cb is None:
                    quantified = True
                    bq = tuple(z3.Int(f"q{d}") for d in range(3))
                    misses.append(z3.ForAll(list(bq), z3.Not(z3.And(in_grid(bq), cond(paths, bq),
                                                                      covers(st, bq, ctx, c)))))
                near = cb if cb is not None else candidate_block(st, ctx, c, overlapping=True)
                nearest.append(None if near is None else
                               z3.Not(z3.And(in_grid(near), cond(paths, near), covers(st, near, ctx, c))))
                if cb is not None:
                    misses.append(nearest[-1])
        # Tiles wider than the blocks' stride (a store of BQ rows masked to the GROUP rows a block owns)
        # overlap, so no single block is *the* writer and the exact query quantifies over blocks. The
        # nearest block is one writer: if it covers every element, all are covered (a proof); otherwise
        # the exact query decides, or stays unknown.
        proved = False
        if quantified and None not in nearest:
            s = solver(SOLVER_TIMEOUT_MS)
            s.add(*ubase, in_range, *nearest)
            proved = check_split(s) == z3.unsat
        if not proved:
            cov.record("output-unwritten", ubase, z3.And(in_range, *misses), ctx, c, out,
                       f"output '{out}' has elements no block writes", span)
    if not cov.done("output-written-twice", out):
        b1 = tuple(z3.Int(f"p{d}") for d in range(3))
        b2 = tuple(z3.Int(f"r{d}") for d in range(3))
        items = [(g, st, paths) for g, (stores, paths) in enumerate(groups.values()) for st in stores]
        pairs = []
        for i, (g1, s1, p1) in enumerate(items):
            for j in range(i, len(items)):
                g2, s2, p2 = items[j]
                same_block = z3.And(*[x == y for x, y in zip(b1, b2)])
                if i == j or g1 != g2:
                    distinct = z3.Not(same_block)  # one store twice, or two paths: different blocks
                else:
                    distinct = z3.BoolVal(True)  # two stores of one path
                pairs.append(z3.And(distinct, cond(p1, b1), cond(p2, b2), covers(s1, b1, ctx, c),
                                    covers(s2, b2, ctx, c)))
        if pairs:
            cov.record("output-written-twice", base, z3.And(in_range, in_grid(b1), in_grid(b2), z3.Or(*pairs)),
                       ctx, c, out, f"output '{out}' has elements written more than once", span)


def _one_d(ctx) -> bool:
    return all(z3.is_int_value(z3.simplify(as_int(g))) and z3.simplify(as_int(g)).as_long() == 1
               for g in ctx.grid[1:])


def free_axes(st, ctx) -> list[int]:
    """The grid axes whose block id neither the store's starts nor its where= mask mention."""
    exprs = [as_int(x) for x in st.view.starts]
    if st.view.keep is not None:
        exprs.append(T.zb(st.view.keep(tuple(z3.Int(f"_k{d}") for d in range(len(st.view.shape))))))
    return [k for k, b in enumerate(ctx.block) if not any(T.mentions(x, {str(b)}) for x in exprs)]


def along_free_axes(cb, free: list[int], ctx, limit: int = 16) -> list[tuple] | None:
    """Every block that differs from `cb` only on the free axes, where those grid sizes are constants
    (at most `limit` blocks in all); None otherwise."""
    sizes = []
    for k in free:
        g = z3.simplify(as_int(ctx.grid[k]))
        if not z3.is_int_value(g):
            return None
        sizes.append(g.as_long())
    out = [tuple(cb)]
    for k, n in zip(free, sizes):
        out = [b[:k] + (z3.IntVal(v),) + b[k + 1:] for b in out for v in range(n)]
        if len(out) > limit:
            return None
    return out


def covers(st, blk, ctx, c):
    """st, run by block `blk`, writes element c."""
    sub = list(zip(ctx.block, blk))
    starts = tuple(z3.substitute(as_int(s), *sub) for s in st.view.starts)
    v = View(st.view.space, st.view.base, starts, st.view.extents, st.view.transposed, st.view.shape, st.view.dtype)
    if st.view.keep is None:
        return v.covers(c)
    keep = z3.substitute(T.zb(st.view.keep(tuple(v.local(c)))), *sub)
    return z3.And(v.covers(c), keep)


def signature(stores) -> tuple:
    return tuple(sorted((s.view.base, str(s.view.starts), s.view.extents, s.masked,
                         str(s.view.keep(tuple(z3.Int(f"_k{d}") for d in range(len(s.view.shape)))))
                         if s.view.keep is not None else None) for s in stores))


def candidate_block(st, ctx, c, overlapping: bool = False) -> tuple | None:
    """The block whose store `st` would cover element c, when each block id appears in exactly one
    axis start as +-S * b + offset with S at least the store's extent there; None otherwise. With
    `overlapping`, also where the extent exceeds S: then the nearest block, one of several that may."""
    blk = []
    for b in ctx.block:
        found = None
        for ax, (start, ext) in enumerate(zip(st.view.starts, st.view.extents)):
            e = as_int(start)
            if not T.mentions(e, {str(b)}):
                continue
            size = ext or 1  # an indexed axis (b, h) covers one coordinate per block
            at0 = z3.simplify(z3.substitute(e, (b, z3.IntVal(0))))
            at1 = z3.simplify(z3.substitute(e, (b, z3.IntVal(1))))
            step = z3.simplify(at1 - at0)
            others = {str(x) for x in ctx.block if x is not b}
            if not z3.is_int_value(step) or step.as_long() == 0 or T.mentions(at0, others):
                return None
            if not 0 < size <= abs(step.as_long()) and not overlapping:
                return None
            # blocks step by S >= T (the tile or a part of it): at most one can cover c. Ascending:
            # b = (c - start(0)) div S; descending (start(0) - S * b, heavy blocks launched first):
            # b = ceil((start(0) - c) / S)
            stride = abs(step.as_long())
            found = (c[ax] - at0) / stride if step.as_long() > 0 else (at0 - c[ax] + stride - 1) / stride
            break
        blk.append(found if found is not None else z3.IntVal(0))
    return tuple(blk)


def tensor_values(m, ctx, formula, limit: int = 16) -> dict:
    """The tensor contents (routing metadata) the model chose at the reads the formula makes."""
    names = {f.name() for f in ctx.functions.values()}
    out: dict = {}
    seen: set = set()
    todo = [formula]
    while todo and len(out) < limit:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.decl().name() in names and x.num_args() > 0:
            args = [value(m, a) for a in x.children()]
            decl = next((t for t in ctx.kernel.tensors if t.name == x.decl().name()), None)
            shape = [d if isinstance(d, int) else value(m, ctx.dims[d]) for d in decl.dims] if decl else []
            inside = all(isinstance(a, int) and 0 <= a < n for a, n in zip(args, shape))
            if inside:
                out.setdefault(f"{x.decl().name()}[{', '.join(map(str, args))}]", value(m, x))
        todo.extend(x.children())
    return out
