"""Output coverage: every element of every output is written, and none twice, over the whole grid.

Stores are collected for one symbolic block; the block ids are then quantified: "unwritten" asks for an
in-range element that no block's store covers (a universally quantified block), "written twice" for
two distinct (block, store) pairs covering the same element. Paths whose decisions depend on the block
id (different blocks, different control flow) are reported as unknown.
"""

from __future__ import annotations

import z3

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, UNKNOWN, VERIFIED, VIOLATED, Finding
from argus.analysis.solve import counterexample, value
from argus.analysis.symbolic import SOLVER_TIMEOUT_MS, as_int, solver
from argus.analysis.trace import Obligation

CODES = ["output-unwritten", "output-written-twice"]


def _mentions(e, names: set[str]) -> bool:
    todo = [e]
    while todo:
        x = todo.pop()
        if z3.is_const(x) and x.decl().name() in names:
            return True
        todo.extend(x.children())
    return False


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status = {c: VERIFIED for c in CODES}
    findings: dict[str, list[Finding]] = {c: [] for c in CODES}
    live = [(t, c) for t, c in zip(a.traces, a.contexts) if t.deadlock is None]
    # When every path performs the same stores, it does not matter which path each block takes:
    # check once, under the constraints common to all paths.
    sigs = {_signature(t) for t, _ in live}
    same_stores = len(sigs) == 1 and live
    for trace, ctx in (live[:1] if same_stores else live):
        block_names = {str(b) for b in ctx.block}
        decided = trace.constraints[len(ctx.constraints):]
        store_src = trace
        if same_stores:
            trace = _Base(list(ctx.constraints))
        elif any(_mentions(c, block_names) for c in decided if not isinstance(c, bool)):
            for c in CODES:
                if status[c] == VERIFIED:
                    status[c] = UNKNOWN
            a.notes.append("coverage: blocks take different paths; coverage not proved")
            continue
        base = [c for c in trace.constraints if not _mentions(c, block_names)]
        for out in a.kernel.outputs:
            t = a.kernel.tensor(out)
            stores = [s for s in store_src.stores if s.view.base == out]
            data = _data_dependent(stores, ctx)
            dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in t.dims]
            c = tuple(z3.Int(f"{out}_c{d}") for d in range(len(dims)))
            in_range = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])

            def covers(st, blk, ctx=ctx, c=c):
                sub = list(zip(ctx.block, blk))
                starts = tuple(z3.substitute(as_int(s), *sub) for s in st.view.starts)
                from argus.analysis.trace import View
                v = View(st.view.space, st.view.base, starts, st.view.extents, st.view.transposed, st.view.shape,
                         st.view.dtype)
                if st.view.keep is None:
                    return v.covers(c)
                keep = z3.substitute(_bool(st.view.keep(tuple(v.local(c)))), *sub)
                return z3.And(v.covers(c), keep)

            def in_grid(blk, ctx=ctx):
                return z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(blk, ctx.grid)])

            if data:
                _data_coverage(status, findings, a, ctx, trace, base, block_names, out, stores, c, in_range,
                               covers, in_grid, data)
                continue
            if not _done(status, findings, "output-unwritten", out):
                # For each store, the block that would cover element c (solving start(b) <= c < start(b) + T
                # for starts of the form T * b + offset); c is unwritten if no store's candidate covers it.
                # A wrongly claimed violation is caught by replay; a verified claim is sound either way.
                cands = [_candidate_block(st, ctx, c) for st in stores]
                if any(cb is None for cb in cands):
                    bq = tuple(z3.Int(f"q{d}") for d in range(3))
                    none = z3.ForAll(list(bq), z3.Implies(in_grid(bq), z3.Not(z3.Or(*[covers(s, bq) for s in stores]))))
                else:
                    none = z3.And(*[z3.Not(z3.And(in_grid(cb), covers(st, cb))) for st, cb in zip(stores, cands)])
                if not stores:
                    none = z3.BoolVal(True)
                _record(status, findings, "output-unwritten", base, z3.And(in_range, none), ctx, c, out, trace,
                        f"output '{out}' has elements no block writes", stores[0].span if stores else a.kernel.span)
            if not _done(status, findings, "output-written-twice", out) and stores:
                b1, b2, pairs = _two_writers(stores, covers)
                _record(status, findings, "output-written-twice", base,
                        z3.And(in_range, in_grid(b1), in_grid(b2), z3.Or(*pairs)), ctx, c, out, trace,
                        f"output '{out}' has elements written more than once", stores[0].span)
    return {k: (status[k], findings[k]) for k in CODES}


def _data_dependent(stores, ctx) -> list[str]:
    """Tensors whose contents (uninterpreted functions) decide where a store writes."""
    names = {f.name() for f in ctx.functions.values()}
    found: set[str] = set()
    for st in stores:
        terms = [as_int(x) for x in st.view.starts if not isinstance(x, int)]
        if st.view.keep is not None:
            terms.append(st.view.keep(tuple(z3.Int(f"_keep{d}") for d in range(len(st.view.shape)))))
        todo = list(terms)
        while todo:
            x = todo.pop()
            if z3.is_app(x) and x.decl().name() in names and x.num_args() > 0:
                found.add(x.decl().name())
            todo.extend(x.children())
    return sorted(found)


def _bool(v):
    return z3.BoolVal(v) if isinstance(v, bool) else v


def _data_coverage(status, findings, a, ctx, trace, base, block_names, out, stores, c, in_range, covers, in_grid,
                   data) -> None:
    """Coverage of an output whose written elements depend on tensor contents (a host schedule).

    Every block satisfies the kernel's assumes, so the constraints that mention the block ids are
    instantiated for the blocks the query talks about, and the quantified assumes
    (assume(lambda i: ..., over=N): the schedule contract) at the element's coordinates and at its
    position inside each block's tile. "Written twice" asks for two distinct blocks writing one
    element; "unwritten" for an element that none of the candidate blocks writes, the candidates for a
    data-dependent block id being the tensor reads of the instantiated contract (e.g. row_tile[r]).
    Without a contract that settles it, the answer is a claim that replay must confirm."""
    per_block = [x for x in trace.constraints if not isinstance(x, bool) and _mentions(x, block_names)]
    fns = {f.name() for f in ctx.functions.values()}

    def facts(blk, stores_for_local) -> list:
        sub = list(zip(ctx.block, blk))
        out_f = [z3.substitute(x, *sub) for x in per_block]
        vals = list(c)
        for st in stores_for_local:
            starts = [z3.substitute(as_int(x), *sub) for x in st.view.starts]
            vals += [c[ax] - s0 for ax, (s0, e) in enumerate(zip(starts, st.view.extents)) if e is not None]
        for q in ctx.quantified:
            for v in vals:
                out_f.append(z3.substitute(ctx.instantiate(q, v), *sub))
        return [z3.Implies(in_grid(blk), z3.And(*out_f))] if out_f else []

    if not _done(status, findings, "output-written-twice", out):
        b1, b2, pairs = _two_writers(stores, covers)
        formula = z3.And(in_range, in_grid(b1), in_grid(b2), *facts(b1, stores), *facts(b2, stores), z3.Or(*pairs))
        _record(status, findings, "output-written-twice", base, formula, ctx, c, out, trace,
                f"output '{out}' has elements written more than once", stores[0].span)
    if not _done(status, findings, "output-unwritten", out):
        # global instances of the block-independent contract at the element's coordinates
        glob = []
        for q in ctx.quantified:
            for v in c:
                f = ctx.instantiate(q, v)
                if not _mentions(f, block_names):
                    glob.append(f)
        fns = {f.name() for f in ctx.functions.values()}  # after instantiating: the contract may read more
        reads = []
        todo = list(glob)
        while todo:
            x = todo.pop()
            if z3.is_app(x) and x.decl().name() in fns and x.num_args() > 0 and x.sort() == z3.IntSort() \
                    and not any(x.eq(y) for y in reads):
                reads.append(x)
            todo.extend(x.children())
        cands_per_axis = []
        for b in ctx.block:
            opts = []
            for st in stores:
                for ax, (start, ext) in enumerate(zip(st.view.starts, st.view.extents)):
                    e = as_int(start)
                    if not _mentions(e, {str(b)}):
                        continue
                    at0 = z3.simplify(z3.substitute(e, (b, z3.IntVal(0))))
                    at1 = z3.simplify(z3.substitute(e, (b, z3.IntVal(1))))
                    step = z3.simplify(at1 - at0)
                    size = ext or 1
                    if z3.is_int_value(step) and step.as_long() == size and not _mentions(at0, block_names):
                        opts.append((c[ax] - at0) / size)
                    else:
                        opts.extend(reads)
            cands_per_axis.append(opts or [z3.IntVal(0)])
        import itertools

        combos = list(itertools.islice(itertools.product(*cands_per_axis), 64))
        none, extra = [], []
        for cb in combos:
            extra += facts(cb, stores)
            none.append(z3.Not(z3.And(in_grid(cb), z3.Or(*[covers(st, cb) for st in stores]))))
        formula = z3.And(in_range, *glob, *extra, *none) if stores else in_range
        _record(status, findings, "output-unwritten", base, formula, ctx, c, out, trace,
                f"output '{out}' has elements no block writes", stores[0].span if stores else a.kernel.span)
    note = (f"coverage of '{out}': the elements a block writes depend on the contents of {', '.join(data)}; "
            "proved from the kernel's assumes instantiated per block")
    if note not in a.notes:
        a.notes.append(note)


class _Base:
    """A stand-in trace holding only the path-independent constraints."""

    def __init__(self, constraints):
        self.constraints = constraints


def _signature(trace) -> tuple:
    return tuple(sorted((s.view.base, str(s.view.starts), s.view.extents, s.masked) for s in trace.stores))


def _candidate_block(st, ctx, c) -> tuple | None:
    """The block whose store `st` would cover element c, when each block id appears in exactly one
    axis start as +-T * b + offset (T the tile extent); None when the starts have another form."""
    blk = []
    for b in ctx.block:
        found = None
        for ax, (start, ext) in enumerate(zip(st.view.starts, st.view.extents)):
            e = as_int(start)
            if not _mentions(e, {str(b)}):
                continue
            size = ext or 1  # an indexed axis (b, h) covers one coordinate per block
            at0 = z3.simplify(z3.substitute(e, (b, z3.IntVal(0))))
            at1 = z3.simplify(z3.substitute(e, (b, z3.IntVal(1))))
            step = z3.simplify(at1 - at0)
            others = {str(x) for x in ctx.block if x is not b}
            if not z3.is_int_value(step) or abs(step.as_long()) != size or _mentions(at0, others):
                return None
            # ascending tiles: b = (c - start(0)) / T; descending (start(0) - T * b, e.g. heavy blocks
            # launched first): b = ceil((start(0) - c) / T)
            found = (c[ax] - at0) / size if step.as_long() > 0 else (at0 - c[ax] + size - 1) / size
            break
        blk.append(found if found is not None else z3.IntVal(0))
    return tuple(blk)


def _done(status, findings, code, out) -> bool:
    return any(f"'{out}'" in f.message for f in findings[code])


def _record(status, findings, code, base, formula, ctx, c, out, trace, msg, span) -> None:
    s = solver(SOLVER_TIMEOUT_MS)
    s.add(*base, formula)
    small = [d <= 512 for d in ctx.dims.values()]
    r = s.check(*small)
    if r == z3.unsat:
        r = s.check()
    if r == z3.unsat:
        return
    if r == z3.unknown:
        if status[code] == VERIFIED:
            status[code] = UNKNOWN
        return
    m = s.model()
    ob = Obligation(code, span, msg, formula, [], {}, {})
    cx = counterexample(m, ctx, ob)
    cx.block = None
    cx.values = {"element": f"{out}[{', '.join(str(value(m, x)) for x in c)}]"}
    cx.values.update(_tensor_values(m, ctx, formula))
    findings[code].append(Finding(code, VIOLATED, msg, span, cx, invariant=CHECKS[code]))
    status[code] = VIOLATED


def _tensor_values(m, ctx, formula, limit: int = 16) -> dict:
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


def _two_writers(stores, covers):
    """Blocks b1, b2 and the ways two writes of one element can happen: two stores (or one store in
    two different blocks) covering it."""
    b1 = tuple(z3.Int(f"p{d}") for d in range(3))
    b2 = tuple(z3.Int(f"r{d}") for d in range(3))
    pairs = []
    for i, s1 in enumerate(stores):
        for j, s2 in enumerate(stores):
            if j < i:
                continue
            distinct = z3.Or(*[x != y for x, y in zip(b1, b2)]) if i == j else z3.BoolVal(True)
            pairs.append(z3.And(distinct, covers(s1, b1), covers(s2, b2)))
    return b1, b2, pairs
