"""Coverage of outputs whose stored positions depend on tensor contents (a host tile schedule, MoE
routing): proved from the kernel's assumes, instantiated per block, and its quantified contract."""

from __future__ import annotations

import itertools

import z3

from argus.analysis import sequences
from argus.analysis import terms as T
from argus.analysis.symbolic import as_int


def data_dependent(stores, ctx) -> list[str]:
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


def data_coverage(cov, a, trace, ctx, out: str, witness_takes_path: bool = False, others=()) -> None:
    """Coverage of an output whose written elements depend on tensor contents (a host schedule).

    Every block satisfies the kernel's assumes, so the constraints that mention the block ids are
    instantiated for the blocks the query talks about, and the quantified assumes
    (assume(lambda i: ..., over=N): the schedule contract) at the element's coordinates and at its
    position inside each block's tile. "Written twice" asks for two distinct blocks writing one
    element; "unwritten" for an element that none of the candidate blocks writes, the candidates for a
    data-dependent block id being the tensor reads of the instantiated contract (e.g. row_tile[r]).
    Without a contract that settles it, the answer is a claim that replay must confirm.

    `witness_takes_path` (another path stores nothing to `out`: `if r0 < r_end:` around the stores): a
    witness writes the element only on this path, so its branch conditions on the block are obligations
    of "unwritten" rather than facts. Otherwise they stay facts: every path makes the same stores, and a
    trip count's choice (n_kv == 1) is not a condition of writing.

    `others`: the other paths (trace, ctx) that store to `out` different elements than this one (which
    path a block takes depends on data: `if load(flag[b]) > 0:`). Each path alone covering the output
    proves nothing about a launch whose blocks take different paths, so the witness of an element may
    take any storing path (its branch conditions are obligations), and two blocks taking different paths
    must not write one element."""
    from argus.analysis.checks.coverage import covers as covers_at
    from argus.analysis.checks.coverage_remap import remap

    stores = [s for s in trace.stores if s.view.base == out]
    data = data_dependent(stores, ctx)
    constraints = trace.constraints
    remapped = None
    exact = _exact(stores, ctx)
    if not exact:
        # a remapped block id (a grouped raster over the schedule): rename the blocks by their index
        # tuples when that is a bijection, so the witnesses below are exact again
        r = remap(stores, constraints, ctx, a.kernel, out)
        if isinstance(r, str):
            remapped = r
        else:
            stores, constraints, ctx = r.stores, r.constraints, r.ctx
            remapped = ""
            exact = _exact(stores, ctx)
    if others:
        witness_takes_path = True
        exact = exact and all(_exact([s for s in t.stores if s.view.base == out], cx) for t, cx in others)
        if remapped == "":  # this path's blocks renamed, the others' not
            for code in ("output-written-twice", "output-unwritten"):
                if not cov.done(code, out):
                    cov.unknown(code, stores[0].span, f"'{out}' is stored at different elements on different paths "
                                "through a remapped tile schedule (not modelled)")
            return
    t = a.kernel.tensor(out)
    dims = [as_int(d) if isinstance(d, int) else ctx.dims[d] for d in t.dims]
    c = tuple(z3.Int(f"{out}_c{d}") for d in range(len(dims)))
    in_range = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])
    block_names = {str(b) for b in ctx.block}
    base = [x for x in constraints if not T.mentions(x, block_names)]

    def covers(st, blk):
        return covers_at(st, blk, ctx, c)

    def in_grid(blk):
        return z3.And(*[z3.And(b >= 0, b < as_int(g)) for b, g in zip(blk, ctx.grid)])

    per_block = [x for x in constraints if not isinstance(x, bool) and T.mentions(x, block_names)]
    # this path's branch conditions on the block (`if r0 < r_end:` around the stores): a witness block
    # writes the element only if it takes the path, which "unwritten" must prove, not assume (asserted
    # with the assumes, a witness taking another path would be counted as writing)
    decisions = [x for x in per_block if x.get_id() not in ctx.assumed] if witness_takes_path else []
    mono = sequences.monotone(ctx, block_names)
    probe = z3.Int("_probe_q")
    global_q = {id(q): not T.mentions(ctx.instantiate(q, probe), block_names) for q in ctx.quantified}
    fns = {f.name() for f in ctx.functions.values()}

    def facts(blk, stores_for_local, with_decisions: bool = True, path=None) -> list:
        pb, pctx = (per_block, ctx) if path is None else path
        sub = list(zip(ctx.block, blk))
        out_f = [z3.substitute(x, *sub) for x in pb if with_decisions or x.get_id() in pctx.assumed]
        # the contract at the element's coordinates, at its position in the block's tile, and at the
        # block's own index (a schedule contract over tiles: tile_expert[u] == row_expert[tile_row[u]])
        vals = list(c) + [b for b in blk if not (z3.is_int_value(b) and b.as_long() == 0)]
        for st in stores_for_local:
            starts = [z3.substitute(as_int(x), *sub) for x in st.view.starts]
            vals += [c[ax] - s0 for ax, (s0, e) in enumerate(zip(starts, st.view.extents)) if e is not None]
        free = []  # instances of a block-independent contract hold at any index, in the grid or not
        for q in pctx.quantified:
            for v in vals:
                inst = pctx.instantiate(q, v)
                free_q = global_q.get(id(q))
                if free_q is None:
                    free_q = global_q[id(q)] = not T.mentions(pctx.instantiate(q, probe), block_names)
                (free if free_q else out_f).append(z3.substitute(inst, *sub))
        return ([z3.Implies(in_grid(blk), z3.And(*out_f))] if out_f else []) + free

    # the other storing paths: (stores, per-block constraints, ctx, branch conditions on the block)
    other = []
    for t_o, c_o in others:
        pb_o = [x for x in t_o.constraints if not isinstance(x, bool) and T.mentions(x, block_names)]
        other.append(([s for s in t_o.stores if s.view.base == out], pb_o, c_o,
                      [x for x in pb_o if x.get_id() not in c_o.assumed]))

    if not cov.done("output-written-twice", out) and stores:
        b1, b2, pairs = _two_writers(stores, covers, len(ctx.block))
        formula = z3.And(in_range, in_grid(b1), in_grid(b2), *facts(b1, stores), *facts(b2, stores), z3.Or(*pairs))
        # a block on this path and another on a path that stores elsewhere: no element of both
        cross = [z3.And(*facts(b2, st_o, path=(pb_o, c_o)),
                        z3.Or(*[z3.And(covers(s1, b1), covers(s2, b2)) for s1 in stores for s2 in st_o]))
                 for st_o, pb_o, c_o, _d in other]
        if cross:
            formula = z3.Or(formula, z3.And(in_range, in_grid(b1), in_grid(b2), *facts(b1, stores), z3.Or(*cross)))
        if mono:
            formula = z3.And(formula, *sequences.order_lemmas(formula, mono))
        cov.record("output-written-twice", base, formula, ctx, c, out,
                   f"output '{out}' has elements written more than once", stores[0].span)
    if not cov.done("output-unwritten", out):
        # global instances of the block-independent contract at the element's coordinates
        glob = []
        for q in ctx.quantified:
            for v in c:
                f = ctx.instantiate(q, v)
                if not T.mentions(f, block_names):
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
        defs = _definitions(ctx, fns)
        cands_per_axis = []
        lemmas: list = []
        deferred: dict[int, list] = {}  # axis -> (start, ext, ax): affine in the block, offset by other blocks
        every = stores + [st for st_o, _p, _c, _d in other for st in st_o]
        for k, b in enumerate(ctx.block):
            opts = []
            for st in every:
                for ax, (start, ext) in enumerate(zip(st.view.starts, st.view.extents)):
                    e = as_int(start)
                    if not T.mentions(e, {str(b)}):
                        continue
                    at0 = z3.simplify(z3.substitute(e, (b, z3.IntVal(0))))
                    at1 = z3.simplify(z3.substitute(e, (b, z3.IntVal(1))))
                    step = z3.simplify(at1 - at0)
                    size = ext or 1
                    seg = sequences.direct_reads(e, b)
                    if z3.is_int_value(step) and step.as_long() == size and not T.mentions(at0, block_names):
                        opts.append((c[ax] - at0) / size)
                    elif z3.is_int_value(step) and step.as_long() == size:
                        deferred.setdefault(k, []).append((at0, size, ax))
                    else:
                        opts.extend(reads)
                        # a start read from a table the contract defines (rows[u] == u * BR): the
                        # definition's affine form names the writer (a candidate; covers() decides)
                        d = _defined(e, defs)
                        if d is not None and not d.eq(e):
                            d0 = z3.simplify(z3.substitute(d, (b, z3.IntVal(0))))
                            dstep = z3.simplify(z3.substitute(d, (b, z3.IntVal(1))) - d0)
                            if z3.is_int_value(dstep) and dstep.as_long() == size and not T.mentions(d0, block_names):
                                opts.append((c[ax] - d0) / size)
                        # a block that reads an offset table at its own index (cu[b]): the segment
                        # holding the element's coordinate names it (sequences.segment_witness)
                        for name in seg:
                            sw = sequences.segment_witness(ctx, name, c[ax], f"{k}_{ax}")
                            if sw is not None:
                                opts.append(sw[0])
                                lemmas.append(sw[1])
            cands_per_axis.append(opts or [z3.IntVal(0)])
        for k in deferred:
            if cands_per_axis[k] == [z3.IntVal(0)]:
                cands_per_axis[k] = [None]  # solved per combination below
        combos = []
        for cb in itertools.islice(itertools.product(*cands_per_axis), 64):
            cb = list(cb)
            for k, items in deferred.items():
                # a start affine in this block and offset by others' (cu[b] + rb * BR): solved once those
                # are chosen
                sub = [(x, v) for j, (x, v) in enumerate(zip(ctx.block, cb)) if j not in deferred]
                at0, size, ax = items[0]
                if cb[k] is None:
                    cb[k] = (c[ax] - z3.substitute(at0, *sub)) / size if sub else (c[ax] - at0) / size
            combos.append(tuple(cb))
        none, extra = [], list(lemmas)
        for cb in combos:
            extra += facts(cb, stores, with_decisions=not witness_takes_path)
            takes = [z3.substitute(x, *zip(ctx.block, cb)) for x in decisions]
            writes = [z3.And(*takes, z3.Or(*[covers(st, cb) for st in stores]))]
            for st_o, pb_o, c_o, d_o in other:  # or the witness takes another storing path
                takes_o = [z3.substitute(x, *zip(ctx.block, cb)) for x in d_o]
                extra.append(z3.Implies(z3.And(*takes_o), z3.And(*facts(cb, st_o, False, (pb_o, c_o)))))
                writes.append(z3.And(*takes_o, z3.Or(*[covers(st, cb) for st in st_o])))
            none.append(z3.Not(z3.And(in_grid(cb), z3.Or(*writes))))
        formula = z3.And(in_range, *glob, *extra, *none) if stores else in_range
        cov.record("output-unwritten", base, formula, ctx, c, out,
                   f"output '{out}' has elements no block writes", stores[0].span if stores else a.kernel.span,
                   claim=not exact)
    note = (f"coverage of '{out}': the elements a block writes depend on the contents of {', '.join(data)}; "
            "proved from the kernel's assumes instantiated per block")
    if remapped == "":
        note += " (blocks renamed by their schedule index tuples: the remapping is a bijection)"
    elif remapped:
        note += f" (witness blocks guessed: {remapped})"
    if note not in a.notes:
        a.notes.append(note)


def _two_writers(stores, covers, rank: int = 3):
    """Blocks b1, b2 (`rank` ids each) and the ways two writes of one element can happen: two stores (or
    one store in two different blocks) covering it."""
    b1 = tuple(z3.Int(f"p{d}") for d in range(rank))
    b2 = tuple(z3.Int(f"r{d}") for d in range(rank))
    pairs = []
    for i, s1 in enumerate(stores):
        for j, s2 in enumerate(stores):
            if j < i:
                continue
            distinct = z3.Or(*[x != y for x, y in zip(b1, b2)]) if i == j else z3.BoolVal(True)
            pairs.append(z3.And(distinct, covers(s1, b1), covers(s2, b2)))
    return b1, b2, pairs


def _exact(stores, ctx) -> bool:
    """Whether the witness blocks of the unwritten query are exact: along every axis a block id moves,
    the start is affine in it with the store's extent as step, or reads the schedule at the block id
    itself (tile_row[t]: a read of the contract names the writing block). Through a remapping (a
    grouped raster's t = f(block)) a read names f(block), not the block: the candidates are a guess."""
    fns = {f.name() for f in ctx.functions.values()}
    names = {str(b) for b in ctx.block}
    for b in ctx.block:
        for st in stores:
            for start, ext in zip(st.view.starts, st.view.extents):
                e = as_int(start)
                if not T.mentions(e, {str(b)}):
                    continue
                at0 = z3.simplify(z3.substitute(e, (b, z3.IntVal(0))))
                step = z3.simplify(z3.substitute(e, (b, z3.IntVal(1))) - at0)
                affine = z3.is_int_value(step) and step.as_long() == (ext or 1) and not T.mentions(at0, names)
                if not affine and not _direct_index(e, str(b), fns):
                    return False
    return True


def _direct_index(e, block: str, fns: set[str]) -> bool:
    """Whether every occurrence of the block id in `e` is a whole argument of a tensor read."""
    if z3.is_app(e) and e.decl().name() in fns:
        return all(str(x) == block or _direct_index(x, block, fns) for x in e.children())
    if z3.is_const(e) and str(e) == block:
        return False
    return all(_direct_index(x, block, fns) for x in e.children())


def _definitions(ctx, fns: set[str]) -> dict:
    """Tables the quantified contract defines pointwise: name -> (index variable, its value), from
    conjuncts `load(F[u]) == g(u)` of `assume(lambda u: ..., over=N)` with g free of F."""
    u = z3.Int("_def_u")
    defs = {}
    for q in ctx.quantified:
        f = ctx.instantiate(q, u)
        body = f.arg(1) if z3.is_implies(f) else f
        for x in body.children() if z3.is_and(body) else [body]:
            if not z3.is_eq(x):
                continue
            for lhs, rhs in ((x.arg(0), x.arg(1)), (x.arg(1), x.arg(0))):
                name = lhs.decl().name() if z3.is_app(lhs) else None
                if name in fns and lhs.num_args() == 1 and lhs.arg(0).eq(u) and not _reads(rhs, name):
                    defs.setdefault(name, (u, rhs))
    return defs


def _reads(e, name: str) -> bool:
    return (z3.is_app(e) and e.decl().name() == name) or any(_reads(x, name) for x in e.children())


def _defined(e, defs: dict):
    """`e` with each read of a defined table replaced by its definition at the read's index."""
    if not defs:
        return None
    if z3.is_app(e) and e.decl().name() in defs and e.num_args() == 1:
        u, rhs = defs[e.decl().name()]
        return z3.substitute(rhs, (u, _defined(e.arg(0), defs)))
    if z3.is_app(e) and e.num_args() > 0:
        return e.decl()(*[_defined(x, defs) for x in e.children()])
    return e
