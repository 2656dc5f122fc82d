"""Obligations at output stores: each stored element's data flow against its contract.

The contract of an output element is what the `reference:` block computes it from (see
argus.analysis.reference_terms): the input elements it depends on, which of them are summed, under
which masks. Where the reference cannot be analysed, or the kernel has none, the contract is implied
by axis names instead (the legacy checks): a stored element's origin coordinates on an axis named like
an output axis equal that output coordinate, and an mma accumulator sums its contracted axis exactly
once over the whole axis.

Codes:
- `store-coordinates`: an element is stored at the wrong coordinates (pointwise positions differ);
- `accumulation-coverage`: a summed coordinate is missing or summed twice;
- `reference-footprint`: any other difference from the reference's data flow (another tensor, a
  mask that admits other positions, a head computed differently, ...).
Every store gets obligations for each code in scope, or an Unknown with the reason.
"""

from __future__ import annotations

import dataclasses

import z3

from argus.analysis import terms as T
from argus.analysis.dependencies import UNWRITTEN, Dependencies, tensors_of
from argus.analysis.nan_terms import Flags
from argus.analysis.solving import fix_model, solve
from argus.analysis.symbolic import as_int, solver
from argus.analysis.trace import Obligation, StoreEvent, Trace, Unknown, path_decisions
from argus.analysis.values import origin_keys
from argus.ir import nodes as ir


def add_store_obligations(kernel: ir.Kernel, trace: Trace, ctx, contracts) -> None:
    sites: dict[str, list[StoreEvent]] = {}
    for n, st in enumerate(trace.stores):
        if st.atomic:
            sites.setdefault(st.view.base, []).append(st)
            continue
        idx = tuple(z3.Int(f"o{n}_{d}") for d in range(len(st.view.shape)))
        domain = [c for i, e in zip(idx, st.view.shape) for c in (i >= 0, i < e)]
        written = st.inside(idx)
        coords = tuple(as_int(c) for c in st.view.coords(idx))
        elem = st.value.tags(idx)
        names = {f"element[{d}]": i for d, i in enumerate(idx)}
        contract = contracts.get(st.view.base) if contracts is not None else None
        if contract is not None and not isinstance(contract, str):
            contract.obligations(trace, ctx, st, idx, coords, elem, domain, written, names)
            continue
        reason = contract if isinstance(contract, str) else None
        if reason is not None:
            trace.unknowns.append(Unknown("reference-footprint", st.span, reason))
        # with a reference that is there but not analysed, the axis-name contract is a guess the reference
        # can refute: its findings are claims the replay must reproduce (a stencil reads its neighbours)
        _implicit_store_coordinates(kernel, trace, st, elem, coords, domain, written, names, claim=reason is not None)
        _implicit_coverage(kernel, trace, ctx, st, elem, domain, written, names)
    for out, adds in sites.items():
        _accumulated_obligations(kernel, trace, ctx, out, adds, contracts)


def _accumulated_obligations(kernel, trace, ctx, out: str, adds: list[StoreEvent], contracts) -> None:
    """An output accumulated by atomic adds: the value an element ends with (argus.analysis.atomic_terms)
    against the reference's, seen from the element's place in the first add site's view."""
    from argus.analysis.atomic_terms import accumulated

    contract = contracts.get(out) if contracts is not None else None
    block_names = {str(b) for b in ctx.block}
    why = None
    if contract is None or isinstance(contract, str):
        why = contract or "an output accumulated by atomic adds needs a reference: block"
    elif trace.tiles:
        why = "atomic adds inside a persistent tile loop (the sum over tiles is not modelled)"
    elif any(T.mentions(x, block_names) for x in path_decisions(trace, ctx)):
        why = "blocks take different paths, so the sum over the blocks that add is not one path's"
    elif any(st.view.transposed for st in adds):
        why = "a transposed view of an accumulated output"
    if why is not None:
        for code in ("reference-footprint", "store-coordinates", "accumulation-coverage"):
            trace.unknowns.append(Unknown(code, adds[0].span, f"'{out}' is accumulated by atomic adds: {why}"))
        return
    # every add site observes the elements its view covers (two sites may add to different elements), once
    # per distinct view
    seen: set = set()
    for k, st in enumerate(adds):
        key = (tuple(str(s) for s in st.view.starts), st.view.extents)
        if key in seen:
            continue
        seen.add(key)
        idx = tuple(z3.Int(f"oa_{out}_{k}_{d}") for d in range(len(st.view.shape)))
        domain = [c for i, e in zip(idx, st.view.shape) for c in (i >= 0, i < e)]
        coords = tuple(as_int(c) for c in st.view.coords(idx))
        elem = st.value.tags(idx)
        term = accumulated(out, coords, adds, ctx, f"{out}_{k}")
        names = {f"element[{d}]": i for d, i in enumerate(idx)}
        first = len(trace.obligations)
        contract.obligations(trace, ctx, st, idx, coords, type(elem)(elem.fields, term, elem.origin), domain,
                             st.inside(idx), names)
        # the sum over the adding blocks ranges over blocks whose contributions depend on contents the
        # solver picks per block (which block adds where): its models are claims, violated where the
        # interpreter reproduces them (a correct MoE scatter was flagged on a model no launch produces)
        trace.obligations[first:] = [dataclasses.replace(ob, extra={**ob.extra, "claim": True})
                                     for ob in trace.obligations[first:]]


# ---- the contract implied by axis names (no analysable reference) ----
def _implicit_store_coordinates(kernel, trace, st: StoreEvent, elem, coords, domain, written, names,
                                claim: bool = False) -> None:
    dest = kernel.tensor(st.view.base).dims
    fields = origin_keys(elem.fields)
    bads, want, got = [], {}, {}
    for d, c in zip(dest, coords):
        if not isinstance(d, str):
            continue
        keys = [k for k in fields if _axis_name(kernel, k) == d]
        if not keys:
            continue
        if list(dest).count(d) > 1:
            trace.unknowns.append(Unknown("store-coordinates", st.span, f"output '{st.view.base}' repeats the axis "
                                          f"name {d}: which coordinate its elements come from needs a reference: "
                                          "block"))
            return
        for k in keys:
            bads.append(as_int(fields[k]) != c)
            want[d] = c
            got[f"{k[0]}.{d}"] = fields[k]
    if not bads:
        return
    trace.obligations.append(Obligation(
        "store-coordinates", st.span,
        f"the value stored to {st.view.base}[...] does not come from the coordinates it is stored at",
        z3.And(written, z3.Or(*bads)), domain, names, st.step,
        {f"destination {st.view.base}": want, f"value ({elem.origin})": got},
        {"view": st.view, **({"claim": True} if claim else {})}))


def _axis_name(kernel, key) -> str | None:
    tensor, axis = key
    dims = kernel.tensor(tensor).dims
    return dims[axis] if axis < len(dims) and isinstance(dims[axis], str) else None


def _implicit_coverage(kernel, trace, ctx, st: StoreEvent, elem, domain, written, names) -> None:
    """Each mma accumulator chain sums its contracted coordinate over the whole axis exactly once."""
    try:
        chains = T.sum_chains(elem.term, top_only=True)
    except T.OpaqueTerm as exc:
        trace.unknowns.append(Unknown("accumulation-coverage", st.span, f"the stored value is not tracked: {exc}"))
        return
    for entries in chains.values():
        steps = [r for r in entries if r.vars and isinstance(r.site, tuple) and r.site[1] == "mma"]
        if not steps:
            continue
        if any(_masked(r.body) for r in steps):
            trace.unknowns.append(Unknown(
                "accumulation-coverage", st.span, "the accumulated terms are masked; which positions must be "
                "summed is given by a reference: block"))
            continue
        idx_of = []
        for r in steps:
            occ = _index_occurrence(r)
            if occ is None:
                break
            idx_of.append(occ)
        if len(idx_of) != len(steps):
            trace.unknowns.append(Unknown("accumulation-coverage", st.span,
                                          "no input coordinate moves with the mma's k index"))
            continue
        targets = {(o.tensor, p) for o, p in idx_of}
        if len(targets) != 1:
            trace.unknowns.append(Unknown("accumulation-coverage", st.span,
                                          "the mma steps of one accumulator contract different tensors or axes"))
            continue
        (tensor, pos), = targets
        d = kernel.tensor(tensor).dims[pos]
        dim = as_int(d) if isinstance(d, int) else ctx.dims[d]
        x = z3.Int(f"cov_{tensor}_{pos}_{len(trace.obligations)}")
        covers = []
        for r, (o, p) in zip(steps, idx_of):
            cov = _covers(r, o, p, x)
            if cov is None:
                trace.unknowns.append(Unknown("accumulation-coverage", st.span, "the contracted coordinate is not "
                                              "an affine function of the tile index"))
                return
            covers.append(cov)
        label = d if isinstance(d, str) else f"axis {pos}"
        dom = [x >= 0, x < dim] + domain + [written]
        trace.obligations.append(Obligation(
            "accumulation-coverage", st.span,
            f"the stored accumulator misses some {label} coordinates (never multiplied in)",
            z3.And(*[z3.Not(c) for c in covers]), dom, {**names, label: x}, st.step, extra={"kind": "missing"}))
        if len(covers) > 1:
            twice = z3.Or(*[z3.And(covers[i], covers[j]) for i in range(len(covers))
                            for j in range(i + 1, len(covers))])
            trace.obligations.append(Obligation(
                "accumulation-coverage", st.span,
                f"the stored accumulator sums some {label} coordinates more than once", twice, dom,
                {**names, label: x}, st.step, extra={"kind": "twice"}))


def _masked(t: T.Term) -> bool:
    """Does the term mask positions (a select to -inf or zero, a running max)? A select between the
    records that may hold a shared element is not a mask."""
    for x in T.subterms(t):
        if (isinstance(x, T.Lit) and x.kind == "minf") or (isinstance(x, T.Red) and x.kind != "sum"):
            return True
        if isinstance(x, T.Sel) and any(isinstance(y, T.Lit) and y.kind in ("minf", "zero") for y in (x.a, x.b)):
            return True
    return False


def _index_occurrence(r: T.Red):
    """The first input element of a step whose coordinates move with the step's own index, and the
    position of the first such coordinate."""
    names = {v.decl().name() for v in r.vars}
    for o in T.occurrences(r.body, uninit_as=None):
        for p, c in enumerate(o.coords):
            if T.mentions(c, names):
                return o, p
    return None


def _covers(r: T.Red, occ: T.Occurrence, pos: int, x):
    """z3 Bool: some member of step r puts coordinate x at `pos` of its index element, alive."""
    sol = solve([(occ.coords[pos], x)], r.vars + occ.bound, _ranges(r))
    if sol is None or any(v not in sol for v in r.vars):
        return None
    sub = [(v, t) for v, t in sol.items()]
    guard = z3.substitute(T.zb(T.b_and(r.domain, occ.guard)), *sub)
    hit = z3.substitute(as_int(occ.coords[pos]), *sub) == x
    return z3.And(guard, hit)


def _ranges(r: T.Red) -> dict:
    return {}


# ---- the contract from the reference block ----
class ReferenceContract:
    """One output's reference array (argus.analysis.reference_terms.Arr) as a contract for its stores."""

    def __init__(self, kernel: ir.Kernel, output: str, arr, rt):
        self.k = kernel
        self.output = output
        self.arr = arr
        self.rt = rt
        self.count = 0

    def rank(self, tensor: str) -> int:
        return 0 if tensor == UNWRITTEN else len(self.k.tensor(tensor).dims)

    def obligations(self, trace: Trace, ctx, st: StoreEvent, idx, coords, elem, domain, written, names) -> None:
        ker = elem.term
        try:
            ref = self.arr.elem(coords)
            want = tensors_of(ref)
        except T.OpaqueTerm as exc:
            for code in ("reference-footprint", "store-coordinates", "accumulation-coverage"):
                trace.unknowns.append(Unknown(code, st.span, f"the reference's data flow is not analysed: "
                                              f"{exc.term.reason}"))
            return
        try:
            got = tensors_of(ker)
        except T.OpaqueTerm as exc:
            for code in ("reference-footprint", "store-coordinates", "accumulation-coverage"):
                trace.unknowns.append(Unknown(code, st.span, f"the stored value is not tracked: {exc.term.reason}"))
            return
        self.count += 1
        n = self.count
        cvars = {t: tuple(z3.Int(f"c{n}_{t}_{p}") for p in range(self.rank(t))) for t in got | want}
        deps = Dependencies(cvars)
        base = domain + [written] + self.lemmas(ctx, ref)
        sums = top_sums(ref)
        index_tensors = {t for r in sums for t in summed_tensors(r)}
        masked = {t for r in sums if _masked(r.body) for t in summed_tensors(r)}
        for tensor in sorted(got | want, key=str):
            allpos = frozenset(range(self.rank(tensor)))
            pos = store_positions(ref, tensor, coords) if tensor in want and tensor in got else frozenset()
            if pos and pos != allpos:
                # a value stored at the wrong place reads inputs at other output coordinates (what the
                # element misses at those positions is reported by the full comparison below)
                self._l1(trace, st, deps, ker, ref, tensor, pos, "store-coordinates", base, names, cvars, True)
            if tensor == UNWRITTEN:
                code = "uninitialized-read"
            elif tensor in index_tensors and tensor not in masked:
                code = "accumulation-coverage"
                # a wrong coordinate off the summed axis (another expert's weights, another head) is a
                # data-flow error, not a coverage one: compare those positions on their own first
                summed = summed_positions(ref, tensor)
                rest = allpos - summed - pos
                if rest and tensor in want and tensor in got:
                    self._l1(trace, st, deps, ker, ref, tensor, frozenset(rest), "reference-footprint", base, names,
                             cvars)
            elif pos == allpos and pos:
                code = "store-coordinates"
            else:
                code = "reference-footprint"
            self._l1(trace, st, deps, ker, ref, tensor, allpos, code, base, names, cvars)
        self._multiplicity(trace, st, ker, sums, base, names)
        self._max_fill(trace, st, ker, ref, base, names)
        self._nan(trace, st, ker, ref, base, names)

    def _max_fill(self, trace, st, ker, ref, base, names) -> None:
        """A stored maximum (the element is a max over a reduction, through running maxima): a member
        whose index atom lies outside its tensor is the zero fill, and 0 is a candidate of the max (not
        -inf) unless the kernel masked it. The dependency comparison cannot see it (a zero fill depends
        on nothing). Only where the stored value is the max itself: inside arithmetic (exp(x - max)) the
        shift may cancel, as in a softmax, and the sums' own obligations apply."""
        # an argmax picks its index by the same maximum: a zero fill wins an all-negative row there too
        refs = [r for r in _stored_maxima(ref) if r.kind in ("max", "argmax")]
        kers = [m for r in _stored_maxima(ker) if r.kind in ("max", "argmax") and r.vars for m in _max_members(r)]
        if not refs or not kers:
            return
        if all(_at_least_zero(r.body) for r in refs):
            # the reference's members are never below 0 (max(abs(X))): a member that is 0 at the fill
            # (abs(0)) is no larger than the reference's maximum, so it cannot change it
            kers = [m for m in kers if not _at_least_zero(m.body)]
        bads = []
        for ri, r in enumerate(refs):
            keys = index_atoms(r)
            if not keys:
                continue
            tensors = {t for t, _p, _v in keys}
            for n, m in enumerate(kers):
                atoms = direct_index(m, tensors)
                if atoms is None:
                    continue
                ren = [(v, z3.Int(f"{v.decl().name()}_mx{self.count}_{ri}_{n}")) for v in m.vars]
                outside = [z3.Not(T.zb(atoms[t].inside)) for t, _p, _v in keys]
                bad = z3.And(T.zb(m.domain), z3.Not(T.zb(m.body.minf)), z3.Or(*outside))
                bads.append(z3.substitute(bad, *ren) if ren else bad)
        if bads:
            trace.obligations.append(Obligation(
                "reference-footprint", st.span,
                f"the stored {self.output} element is a maximum over a position outside its input: the zero "
                "fill there is a candidate (a mask to -inf is missing)", z3.Or(*bads), base, dict(names),
                st.step, extra={"kind": "max-fill", "claim": True}))

    def _nan(self, trace, st, ker, ref, base, names) -> None:
        """The stored element is NaN (-inf - -inf, -inf * 0, 0 / 0) only where the reference's is. Asked alone in
        a fresh context (its quantifiers stay out of the site's shared query) and replayed: a claim."""
        flags = Flags()
        bad = T.b_and(flags.nan(ker), T.b_not(flags.nan(ref)))
        if bad is False:
            return
        trace.obligations.append(Obligation(
            "reference-footprint", st.span,
            f"the stored {self.output} element is NaN where its reference is not: -inf - -inf (a running max "
            "still -inf in a step that masks all of a row's scores; replace it by 0 where it is -inf before "
            "exp2(s - m)), -inf * 0, or 0 / 0 (a row sum that is 0 where every score was masked: divide by "
            "select(l > 0, l, 1))", T.zb(bad), base, dict(names), st.step,
            extra={"kind": "nan", "claim": True, "fresh": True}))

    def lemmas(self, ctx, ref) -> list:
        """Facts about reference functions the kernel's own assumptions pin down: expert_of_rows(r) = e
        wherever offs[e] <= r < offs[e + 1] (offs non-decreasing, which the reference's searchsorted
        presumes), instantiated at the experts the kernel reads offs at."""
        out = []
        for fn, offs in getattr(self.rt, "row_experts", []):
            rows = _apps(ref, fn.name())
            experts = [a.arg(0) for a in ctx.applications if a.decl().name() == _base_name(offs)]
            for r in rows:
                for e in experts:
                    lo, hi = offs.value((e,)), offs.value((e + 1,))
                    out.append(z3.Implies(z3.And(lo <= r.arg(0), r.arg(0) < hi), r == e))
        return out

    def _l1(self, trace, st, deps, ker, ref, tensor, positions, code, base, names, cvars, extra_only=False) -> None:
        """The kernel element depends on tensor[c] (at `positions`) exactly when the reference does."""
        c = cvars[tensor]
        dims = () if tensor == UNWRITTEN else self.k.tensor(tensor).dims
        shown = {f"{tensor}.{dims[p]}" if isinstance(dims[p], str) else f"{tensor}.axis{p}": c[p]
                 for p in sorted(positions)}
        what = "unwritten shared memory" if tensor == UNWRITTEN else \
            f"{tensor}[{', '.join(str(dims[p]) if p in positions else '_' for p in range(len(c)))}]"
        k_exact, r_exact = deps.exact(ker, tensor, positions), deps.exact(ref, tensor, positions)
        if k_exact is not False:
            bad = T.b_and(k_exact, T.b_not(deps.under(ref, tensor, positions, free_coords(ker, tensor))))
            if bad is not False:
                trace.obligations.append(Obligation(
                    code, st.span, f"the stored {self.output} element depends on {what} elements its reference "
                    "does not use" if tensor != UNWRITTEN else
                    f"the stored {self.output} element reads shared memory that no copy wrote",
                    T.zb(bad), base, {**names, **shown}, st.step,
                    extra={"kind": "extra", "tensor": tensor, "exact": T.zb(T.b_and(k_exact, T.b_not(r_exact)))},
                    refine=_refiner(T.zb(r_exact), c, positions)))
        if r_exact is not False and not extra_only:
            bad = T.b_and(r_exact, T.b_not(deps.under(ker, tensor, positions, free_coords(ref, tensor))))
            if bad is not False:
                trace.obligations.append(Obligation(
                    code, st.span, f"the stored {self.output} element misses {what} elements its reference "
                    "uses (never read, or masked where the reference keeps them)",
                    T.zb(bad), base, {**names, **shown}, st.step,
                    extra={"kind": "missing", "tensor": tensor, "exact": T.zb(T.b_and(r_exact, T.b_not(k_exact)))},
                    refine=_refiner(T.zb(k_exact), c, positions)))

    def _summed_twice(self, trace, st, ker, sums, base, names) -> None:
        """Terms added with `+` outside any reduction (`acc = load(P[0])`, then `acc = acc + load(P[sp])` over
        a loop of scalar steps: the executor unrolls it into plain additions, no accumulator chain): no two
        of them may read one coordinate a reference sum sums once (split-K's reduce counting slice 0 twice
        verified before 2026-12-06; only the numeric tier caught it)."""
        leaves, todo = [], [ker]
        while todo:
            x = todo.pop()
            if isinstance(x, T.Op) and x.fn == "+":
                todo.extend(x.args)
            elif not isinstance(x, (T.Red, T.Lit)):
                leaves.append(T.red("sum", (), True, x))
        if len(leaves) < 2:
            return
        for ri, r in enumerate(sums):
            keys = index_atoms(r)
            if not keys:
                continue
            tensors = {t for t, _p, _v in keys}
            matched = [(m, hit) for m in leaves if (hit := direct_index(m, tensors)) is not None]
            if len(matched) < 2:
                continue
            x = [z3.Int(f"bare{self.count}_{ri}_{n}") for n in range(len(keys))]
            at = [_member_at(m, keys, x, f"bare{i}") for i, m in enumerate(matched)]
            pairs = [z3.And(at[a][0], at[b][0]) for a in range(len(at)) for b in range(a + 1, len(at))]
            self._twice(trace, st, keys, x, pairs, base, names, "adds some {} coordinate twice (two added "
                        "terms read it)")

    def _twice(self, trace, st, keys, x, pairs, base, names, what: str) -> None:
        label = ", ".join(f"{t}[{p}]" for t, p, _v in keys)
        trace.obligations.append(Obligation(
            "accumulation-coverage", st.span, f"the stored {self.output} element {what.format(label)}",
            z3.Or(*pairs), base, {**names, **{f"{t}[{p}]": xv for (t, p, _v), xv in zip(keys, x)}}, st.step,
            extra={"kind": "twice"}))

    def _pairing(self, r: T.Red, keys, matched, tag: str, summed: frozenset = frozenset()) -> dict:
        """Each kernel member sums the product the reference sums at the same index: the inputs a member
        multiplies (outside nested sums and running maxima) are the reference's at that index, tensor by
        tensor (a routing weight of top-k slot k with the row of slot k, not of slot k + 1). Returns, per
        member (by id), the condition under which it differs from reference sum `r`.

        `summed`: tensors some reference sum reads at a coordinate that moves with its index. A member that
        multiplies one of them while `r`'s term does not read it at all is not a term of `r` (a combine's
        weighted partial w[s] * Op[s] is not a term of the weights' sum w[s], whatever split its weight
        comes from); a tensor no sum moves (a row scale folded into the operand) is still ignored."""
        ref_atoms = _direct_atoms(r.body)
        if not ref_atoms:
            return {}
        ref_tensors = {b.tensor for b in ref_atoms}
        out = {}
        for n, (m, atoms) in enumerate(matched):
            guard, _vs = _member_at((m, atoms), keys, [z3.Int(f"pair{self.count}_{tag}_{n}_{i}")
                                                       for i in range(len(keys))], f"pair{tag}_{n}")
            ren = [(v, z3.Int(f"{v.decl().name()}_pair{tag}_{n}")) for v in m.vars]
            idx = [z3.substitute(as_int(atoms[t].coords[p]), *ren) if ren else as_int(atoms[t].coords[p])
                   for t, p, _v in keys]
            at = [(v, i) for (_t, _p, v), i in zip(keys, idx)]
            bads = []
            for a, when in _direct_atoms_when(m.body):
                same = [b for b in ref_atoms if b.tensor == a.tensor]
                if not same:
                    if a.tensor in summed and a.tensor not in ref_tensors:
                        live = z3.And(T.zb(a.inside), when)
                        bads.append(z3.And(guard, z3.substitute(live, *ren) if ren else live))
                    continue
                ka = [z3.substitute(as_int(c), *ren) if ren else as_int(c) for c in a.coords]
                differs = [z3.Or(*[x != z3.substitute(as_int(y), *at) for x, y in zip(ka, b.coords)]) for b in same]
                # the atom counts where it is read: inside its tile and on the select branch that holds it
                live = z3.And(T.zb(a.inside), when)
                live = z3.substitute(live, *ren) if ren else live
                bads.append(z3.And(guard, live, *differs))
            if bads:
                out[id(m)] = z3.Or(*bads)
        return out

    def _multiplicity(self, trace, st, ker, sums, base, names) -> None:
        """Each reference sum over an index the kernel accumulates step by step: no member of the
        reference's sum is summed twice by the kernel (coverage itself is the dependency check)."""
        try:
            chains = T.sum_chains(ker, top_only=True)
        except T.OpaqueTerm:
            return
        self._summed_twice(trace, st, ker, sums, base, names)
        # accumulators added together (split accumulators acc0 + acc1) share one reference sum; others
        # (a numerator and its denominator) are summed separately
        for group in chain_groups(ker, chains):
            members = [m for cid in group for m in flatten_chain(chains[cid])]
            # per-position accumulators summed afterwards, step by step: for the phantom obligation only
            # (pairing a step's term with the reference's would reject algebraic rewrites such as a
            # variance shifted by the row's first element, whose members multiply X[r, 0])
            stepwise = [m for cid in group for m in accumulator_steps(chains[cid])]
            # a member must sum what some reference sum sums at the same index (with several sums, as in
            # s[:, None] - s[None, :], a member pairs with the one it computes, not with every one)
            pairing: dict = {}
            phantoms: list = []
            summed = frozenset(t for r in sums for t in summed_tensors(r))
            for ri, r in enumerate(sums):
                # a sum whose index reaches its tensors only inside a nested sum (a softmax denominator
                # sum_k exp(sum_d Q[q, d] K[k, d] - m), itself or inside softmax(..) @ V): no pairing, but
                # a member at a key outside K is a zero fill the arithmetic made nonzero (exp(0 - m))
                # unless it is dead
                for n, d in enumerate(_inner_sums(r)):
                    phantoms.extend(_deep_phantoms(d, [*members, *stepwise], f"{self.count}_{ri}n{n}"))
                keys = index_atoms(r)
                if not keys:
                    continue
                tensors = {t for t, _p, _v in keys}
                matched = []
                for m in members:
                    hit = direct_index(m, tensors)
                    if hit is not None:
                        matched.append((m, hit))
                steps = [(m, hit) for m in stepwise if (hit := direct_index(m, tensors)) is not None]
                phantoms.extend(_phantoms(steps, keys, f"{self.count}_{ri}s"))
                if len(matched) < 1:
                    continue
                x = [z3.Int(f"twice{self.count}_{n}") for n in range(len(keys))]
                pairs = []
                # double counting is about members of this sum: a column sum is no member of a row sum (the
                # pairing below still holds every member to some reference sum)
                along = [mh for mh in matched if _sums_along(mh[0], mh[1], keys)]
                for a in range(len(along)):
                    for b in range(a, len(along)):
                        pa = _member_at(along[a], keys, x, "a")
                        pb = _member_at(along[b], keys, x, "b")
                        if pa is None or pb is None:
                            trace.unknowns.append(Unknown("accumulation-coverage", st.span, "a summed coordinate "
                                                          "is not an affine function of the kernel's tile index"))
                            return
                        ga, va = pa
                        gb, vb = pb
                        if a == b:
                            if not va:
                                continue  # one member without an index: once
                            distinct = z3.Or(*[p != q for p, q in zip(va, vb)])
                            pairs.append(z3.And(ga, gb, distinct))
                        else:
                            # two members double count only an element both read, and only where fewer of
                            # the reference's own sums read it (P + P.T counts the diagonal twice as well)
                            ca, cb = _coords_at(along[a], "a"), _coords_at(along[b], "b")
                            same = [p == q for t in ca for p, q in zip(ca[t], cb[t])]
                            pairs.append(z3.And(ga, gb, *same, z3.Not(_reference_reads_twice(sums, tensors, ca,
                                                                                            f"{self.count}_{ri}"))))
                for mid, bad in self._pairing(r, keys, matched, str(ri), summed).items():
                    pairing.setdefault(mid, []).append(bad)
                phantoms.extend(_phantoms(matched, keys, f"{self.count}_{ri}"))
                if not pairs:
                    continue
                self._twice(trace, st, keys, x, pairs, base, names, "sums some {} coordinates more than once")
            if phantoms:
                # "live" is structural (a zero fill times a 0/1 float mask is live but zero): a claim the
                # interpreter must reproduce, else unknown
                trace.obligations.append(Obligation(
                    "reference-footprint", st.span,
                    f"the stored {self.output} element sums a term at a position outside its input (a zero "
                    "fill the arithmetic makes nonzero, e.g. exp(0 - max), or a -inf fill: a mask that admits "
                    "the tail)",
                    z3.Or(*phantoms), base, dict(names), st.step, extra={"kind": "phantom", "claim": True}))
            if pairing:
                trace.obligations.append(Obligation(
                    "reference-footprint", st.span,
                    f"a term the stored {self.output} element sums multiplies other inputs than the reference's "
                    "term at the same index", z3.Or(*[z3.And(*bs) for bs in pairing.values()]), base, dict(names),
                    st.step, extra={"kind": "pairing"}))


def free_coords(t: T.Term, tensor: str, limit: int = 16) -> tuple:
    """Coordinates at which `t` reads `tensor` that mention no variable bound in `t` (hints for solving
    the other side's members: an unrolled loop's pos(t, 3))."""
    from argus.analysis.dependencies import _atoms, _bound_below
    bound = _bound_below(t)
    out, seen = [], set()
    for a in _atoms(t, tensor):
        if any(T.mentions(c, bound) for c in a.coords):
            continue
        key = tuple(z3.simplify(T.zi(c)).get_id() for c in a.coords)
        if key not in seen:
            seen.add(key)
            out.append(a.coords)
        if len(out) >= limit:
            break
    return tuple(out)






def chain_groups(t: T.Term, chains: dict) -> list[list]:
    """Chains whose accumulators are summands of one another's sum (union over `+` nodes, not `-`)."""
    parent = {c: c for c in chains}

    def find(c):
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    def roots(x, seen) -> set:
        if id(x) in seen:
            return set()
        seen.add(id(x))
        if isinstance(x, T.Red) and x.chain in chains:
            return {x.chain}
        if isinstance(x, T.Op) and x.fn in ("+", "-", "*"):
            return set().union(*(roots(a, seen) for a in x.args))
        return set()

    todo, seen = [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Op):
            # split accumulators are added (acc0 + acc1); a difference of sums (s[i] - s[j]) is two sums
            if x.fn == "+":
                rs = [roots(a, set()) for a in x.args]
                flat = [c for r in rs for c in r]
                for c in flat[1:]:
                    parent[find(c)] = find(flat[0])
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
        elif isinstance(x, T.Red):
            todo.append(x.body)
    groups: dict = {}
    for c in chains:
        groups.setdefault(find(c), []).append(c)
    return list(groups.values())


def _direct_atoms(t: T.Term) -> list[T.Atom]:
    """Atoms of a sum member's body outside nested reductions and running maxima: what the member is a
    product of (A[i, k] and B[k, j]; P's key row and V's; a routing weight and its gathered row)."""
    out, todo, seen = [], [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom):
            out.append(x)
        elif isinstance(x, T.Op) and x.fn not in ("max", "min"):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
    return out


def _direct_atoms_when(t: T.Term) -> list[tuple[T.Atom, z3.BoolRef]]:
    """_direct_atoms with the select conditions under which each atom is the value (a shared row
    written by one of several copies: the copy of row i holds it only where the row read is i)."""
    conds: dict[int, list] = {}
    atoms: dict[int, T.Atom] = {}
    todo: list = [(t, z3.BoolVal(True))]
    seen: set = set()
    while todo:
        x, when = todo.pop()
        key = (id(x), when.get_id())
        if key in seen:
            continue
        seen.add(key)
        if isinstance(x, T.Atom):
            atoms[id(x)] = x
            conds.setdefault(id(x), []).append(when)
        elif isinstance(x, T.Op) and x.fn not in ("max", "min"):
            todo.extend((a, when) for a in x.args)
        elif isinstance(x, T.Sel):
            c = T.zb(x.cond)
            todo.append((x.a, z3.simplify(z3.And(when, c))))
            todo.append((x.b, z3.simplify(z3.And(when, z3.Not(c)))))
    return [(atoms[k], z3.Or(*cs) if len(cs) > 1 else cs[0]) for k, cs in conds.items()]


def _refiner(exact_other, c, positions):
    """Confirm a model of an approximated query: with every free variable fixed to the model's value,
    does the other side really not depend on c? If it does, exclude this coordinate and element."""
    def refine(m):
        s = solver(4000)
        s.add(fix_model(exact_other, m))
        r = s.check()
        if r == z3.unsat:
            return None  # the other side really lacks it: a real violation
        if r == z3.unknown:
            return False
        pins = [c[p] == m.eval(c[p], model_completion=True) for p in sorted(positions)]
        return z3.Not(z3.And(*pins)) if pins else False
    return refine


def _base_name(arr) -> str:
    t = arr.elem((z3.IntVal(0),))
    return t.tensor if isinstance(t, T.Atom) else ""


def _apps(t: T.Term, name: str) -> list:
    """z3 applications of function `name` in the coordinates and guards of a term."""
    out, seen = [], set()
    todo_t, seen_t = [t], set()
    exprs = []
    while todo_t:
        x = todo_t.pop()
        if id(x) in seen_t:
            continue
        seen_t.add(id(x))
        if isinstance(x, T.Atom):
            exprs.extend(x.coords)
        elif isinstance(x, T.Op):
            todo_t.extend(x.args)
        elif isinstance(x, T.Sel):
            exprs.append(x.cond)
            todo_t.extend((x.a, x.b))
        elif isinstance(x, T.Red):
            exprs.append(x.domain)
            todo_t.append(x.body)
    todo = [e for e in exprs if isinstance(e, z3.ExprRef)]
    while todo:
        e = todo.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().name() == name and e.num_args() > 0:
            out.append(e)
        todo.extend(e.children())
    return out


def top_sums(ref: T.Term) -> list[T.Red]:
    """The reference's sums not nested in another reduction (the einsum / matmul of an output)."""
    out, todo, seen = [], [ref], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Red):
            if x.kind == "sum" and x.vars:
                out.append(x)
        elif isinstance(x, T.Op):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
    return out


def index_atoms(r: T.Red, nested: bool = False) -> list[tuple[str, int, object]]:
    """(tensor, position, var): atoms of r's body, outside nested reductions (with `nested`: only those
    inside nested sums, K[k, d] of sum_d Q[q, d] K[k, d]), whose coordinate at position is one of r's
    variables (plus a term free of them): what r sums over."""
    names = {v.decl().name(): v for v in r.vars}
    found: dict = {}
    todo, seen = [(r.body, False)], set()
    while todo:
        x, deep = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom) and deep == nested:
            for p, c in enumerate(x.coords):
                for name, v in names.items():
                    if name in found:
                        continue
                    lin = solve([(c, z3.Int("_probe"))], (v,))
                    if lin is not None and T.mentions(c, {name}) and not T.mentions(c, set(names) - {name}):
                        found[name] = (x.tensor, p, v)
        elif isinstance(x, T.Op):
            todo.extend((a, deep) for a in x.args)
        elif isinstance(x, T.Sel):
            todo.extend(((x.a, deep), (x.b, deep)))
        elif nested and isinstance(x, T.Red) and x.kind == "sum":
            todo.append((x.body, True))
    return [found[n] for n in names if n in found]


def summed_positions(ref: T.Term, tensor: str) -> frozenset:
    """Positions of `tensor` whose coordinate moves with a reduction variable in some reference atom."""
    from argus.analysis.dependencies import _bound_below

    bound = _bound_below(ref)
    out = set()
    for a in _atoms_of(ref, tensor):
        out |= {p for p, c in enumerate(a.coords) if T.mentions(c, bound)}
    return frozenset(out)


def summed_tensors(r: T.Red) -> set[str]:
    """Tensors read by r's body (outside nested reductions) at a coordinate that moves with r's index."""
    names = {v.decl().name() for v in r.vars}
    out, todo, seen = set(), [r.body], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom):
            if any(T.mentions(c, names) for c in x.coords):
                out.add(x.tensor)
        elif isinstance(x, T.Op):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
    return out


def store_positions(ref: T.Term, tensor: str, coords: tuple) -> frozenset:
    """Positions of `tensor` whose coordinate is exactly one of the output coordinates in every
    reference atom of it (C[i, j] from A[i, :] and B[:, j]): where a wrong store location shows."""
    out = None
    for a in _atoms_of(ref, tensor):
        pos = {p for p, c in enumerate(a.coords) if any(z3.eq(z3.simplify(T.zi(c)), z3.simplify(T.zi(o)))
                                                        for o in coords)}
        out = pos if out is None else out & pos
    return frozenset(out or ())


def _atoms_of(t: T.Term, tensor: str) -> list[T.Atom]:
    from argus.analysis.dependencies import _atoms
    return _atoms(t, tensor)


def flatten_chain(entries: list[T.Red]) -> list[T.Red]:
    """The members of one accumulator: mma steps, and for `acc + x` entries, x's own sum if it is one."""
    out = []
    for r in entries:
        if not r.vars and isinstance(r.body, T.Red) and r.body.kind == "sum":
            out.append(r.body)
        else:
            out.append(r)
    return out


def accumulator_steps(entries: list[T.Red]) -> list[T.Red]:
    """A sum over positions of a per-position accumulator (`acc = acc + x_j` over an unrolled loop, then
    `sum(acc, axis=1)`) is the sum of its steps' sums: each step's term as a member over the positions,
    so a step whose term is live outside its input (0 - shift in a tail) is a phantom."""
    return [T.red("sum", r.vars, r.domain, x.body, site=r.site)
            for r in entries if r.vars for x in _accumulated_steps(r.body) or ()]


def _accumulated_steps(t: T.Term) -> list[T.Red] | None:
    """The steps of one accumulator chain t = ((0 + s_0) + s_1) + ... (entries without variables, of one
    chain); None if t is anything else, or a single step."""
    steps: list[T.Red] = []
    todo = [t]
    while todo:
        x = todo.pop()
        if isinstance(x, T.Op) and x.fn == "+":
            todo.extend(x.args)
        elif isinstance(x, T.Red) and x.kind == "sum" and not x.vars and x.chain is not None:
            steps.append(x)
        elif not (isinstance(x, T.Lit) and x.kind == "zero"):  # the zero the accumulator starts from
            return None
    if len(steps) < 2 or len({x.chain for x in steps}) != 1:
        return None
    return steps


def direct_index(m: T.Red, tensors: set[str], nested: bool = False):
    """The atoms of `tensors` that identify member m of a sum: in m's body outside nested reductions
    and running maxima (a later step's normaliser reads earlier steps' inputs), preferring atoms whose
    coordinates move with m's own variables. None if a tensor has none."""
    names = {v.decl().name() for v in m.vars}
    atoms: dict = {}
    todo, seen = [m.body], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Atom) and x.tensor in tensors:
            moves = bool(names) and any(T.mentions(c, names) for c in x.coords)
            prev = atoms.get(x.tensor)
            if prev is None or (moves and not prev[1]):
                atoms[x.tensor] = (x, moves)
        elif isinstance(x, T.Op) and x.fn not in ("max", "min"):
            todo.extend(x.args)
        elif isinstance(x, T.Sel):
            todo.extend((x.a, x.b))
        elif nested and isinstance(x, T.Red) and x.kind == "sum":
            todo.append(x.body)  # an mma's products: K[kk, d] of the scores of key kk
    if nested:  # only atoms that move with m's own variables identify the member's key
        atoms = {t: a for t, a in atoms.items() if a[1]}
    return {t: a for t, (a, _moves) in atoms.items()} if set(atoms) == tensors else None


def _max_members(r: T.Red) -> list[T.Red]:
    """A max reduction whose body is itself a max of several terms (a running elementwise max over loop
    steps, max(mx, load(X[.., j * BC : +BC])), reduced along the row after the loop) as one reduction per
    term, each over r's variables: a zero fill in any step's tile is a candidate of the stored max."""
    out, todo = [], [r.body]
    while todo:
        x = todo.pop()
        if isinstance(x, T.Op) and x.fn == r.kind:
            todo.extend(x.args)
        elif not isinstance(x, T.Lit):  # the running max's -inf start is no member
            out.append(x)
    if len(out) == 1 and out[0] is r.body:
        return [r]
    return [dataclasses.replace(r, body=b) for b in out]


def _stored_maxima(t: T.Term) -> list[T.Red]:
    """The max / min reductions a value is, through running maxima (max(m, max(x, axis=1)))."""
    out, todo, seen = [], [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, T.Red) and x.kind in ("max", "min", "argmax"):
            out.append(x)
        elif isinstance(x, T.Op) and x.fn in ("max", "min"):
            todo.extend(x.args)
    return out


def _inner_sums(r: T.Red) -> list[T.Red]:
    """r itself when its index reaches its tensors only through a nested sum, and the sums inside r's body
    that do not move with r's variables (a softmax's denominator inside softmax(S) @ V)."""
    out = [r] if not index_atoms(r) else []
    names = {v.decl().name() for v in r.vars}
    for x in T.subterms(r.body, reductions=False):
        # a normaliser: nothing in it moves with r's index (the scores' own sum over d does)
        if isinstance(x, T.Red) and x.kind == "sum" and x.vars and not T.mentions(T.zb(x.domain), names) \
                and not _moves(x, names):
            out.append(x)
    return out


def _deep_phantoms(r: T.Red, members: list, tag: str) -> list:
    deep = index_atoms(r, nested=True)
    if not deep:
        return []
    tensors = {t for t, _p, _v in deep}
    # only members that exponentiate a nested sum: there a sum of zero fills (0, a score of a zero key)
    # becomes nonzero (exp(0 - m)); elsewhere it stays 0 (abs(acc) of a zero column), though the term's
    # flags count every sum as live data
    hits = [(m, hit) for m in members if _exp_of_sum(m.body)
            and (hit := direct_index(m, tensors, nested=True)) is not None]
    return _phantoms(hits, deep, tag, axis_only=True)


def _exp_of_sum(t: T.Term) -> bool:
    return any(isinstance(x, T.Op) and x.fn in ("exp", "exp2")
               and any(isinstance(y, T.Red) and y.kind == "sum" for y in T.subterms(x))
               for x in T.subterms(t, reductions=False))


def _moves(t: T.Term, names: set[str]) -> bool:
    """Some atom coordinate or selection condition in t mentions one of `names`."""
    for x in T.subterms(t):
        if isinstance(x, T.Atom) and any(T.mentions(c, names) for c in x.coords):
            return True
        if isinstance(x, T.Sel) and T.mentions(T.zb(x.cond), names):
            return True
    return False


def _axis_inside(atom: T.Atom, p: int):
    """The part of atom.inside about coordinate p (inside is one conjunct per axis); the whole when its
    shape is not that. A nested sum's own variables sit in the other axes' conjuncts, unconstrained here."""
    inside = T.zb(atom.inside)
    if z3.is_and(inside) and inside.num_args() == len(atom.coords):
        return inside.arg(p)
    return inside


def _phantoms(matched, keys, tag, axis_only: bool = False) -> list:
    """Members of a sum that carry data (or -inf) although their index atom lies outside its tensor: the
    masked access read the zero fill, and the member's arithmetic made it nonzero (exp(0 - max), (0 - mean)^2),
    so the kernel sums a term at an index the reference's sum does not have. The dependency comparison
    cannot see it (a zero fill depends on nothing), and _member_at pairs only members inside."""
    out = []
    for n, (m, atoms) in enumerate(matched):
        ren = [(v, z3.Int(f"{v.decl().name()}_ph{tag}_{n}")) for v in m.vars]
        outside = [z3.Not(_axis_inside(atoms[t], p) if axis_only else T.zb(atoms[t].inside)) for t, p, _v in keys]
        # -inf there too (a tail masked to -inf, or picked by an index past the end, then summed): the
        # reference's sum has no member at that index, and -inf is no zero
        bad = z3.And(T.zb(m.domain), z3.Or(T.zb(m.body.live), T.zb(m.body.minf)), z3.Or(*outside))
        bad = z3.substitute(bad, *ren) if ren else bad
        if not z3.is_false(z3.simplify(bad)):
            out.append(bad)
    return out


def _coords_at(matched, tag: str) -> dict:
    """The coordinates of a member's identifying atoms, its variables renamed as _member_at renames them."""
    m, atoms = matched
    ren = [(v, z3.Int(f"{v.decl().name()}_{tag}")) for v in m.vars]
    return {t: [z3.substitute(as_int(c), *ren) if ren else as_int(c) for c in a.coords] for t, a in atoms.items()}


def _reference_reads_twice(sums, tensors: set, coords: dict, tag: str):
    """Whether two of the reference's sums read the element at `coords` (tensor -> coordinates)."""
    hits = []
    if len(sums) < 2:
        return z3.BoolVal(False)
    for n, r in enumerate(sums):
        atoms = direct_index(r, tensors)
        if atoms is None:
            continue
        ren = [(v, z3.Int(f"{v.decl().name()}_rt{tag}_{n}")) for v in r.vars]
        conds = [_renamed(T.zb(r.domain), ren)]
        for t, want in coords.items():
            got = [_renamed(as_int(c), ren) for c in atoms[t].coords]
            if len(got) != len(want):
                break
            conds.extend(g == w for g, w in zip(got, want))
        else:
            # the sum's own variables are bound here: the formula sits under a negation
            hits.append(z3.Exists([v2 for _v, v2 in ren], z3.And(*conds)) if ren else z3.And(*conds))
    return z3.Sum(*[z3.If(h, 1, 0) for h in hits]) >= 2 if len(hits) >= 2 else z3.BoolVal(False)


def _renamed(e, ren: list):
    return z3.substitute(e, *ren) if ren else e


def _sums_along(m: T.Red, atoms: dict, keys) -> bool:
    """Whether member m sums along r's keys: a member with variables of its own must move its coordinate at
    each key position with them (a column sum sum_k X[k, j] is not a member of the row sum sum_k X[i, k],
    though both read X). A member without variables (one unrolled step) counts wherever it reads."""
    if not m.vars:
        return True
    names = {v.decl().name() for v in m.vars}
    return all(p < len(atoms[t].coords) and T.mentions(atoms[t].coords[p], names) for t, p, _v in keys)


def _member_at(matched, keys, x, tag):
    """(guard, member variables renamed apart) of a member whose index atoms sit at x."""
    m, atoms = matched
    ren = [(v, z3.Int(f"{v.decl().name()}_{tag}")) for v in m.vars]
    conds = [z3.substitute(T.zb(m.domain), *ren) if ren else T.zb(m.domain)]
    live = T.zb(m.body.live)
    conds.append(z3.substitute(live, *ren) if ren else live)
    for (t, p, _v), xv in zip(keys, x):
        c = as_int(atoms[t].coords[p])
        conds.append((z3.substitute(c, *ren) if ren else c) == xv)
        inside = T.zb(atoms[t].inside)
        conds.append(z3.substitute(inside, *ren) if ren else inside)
    return z3.And(*conds), [v2 for _v, v2 in ren]


def _at_least_zero(t) -> bool:
    """A term that is >= 0 wherever it is defined and 0 at a zero fill: abs(...), through casts and position
    selects between such terms and zeros."""
    if isinstance(t, T.Op):
        if t.fn == "abs":
            return True
        if t.fn in ("cast", "float") and len(t.args) == 1:
            return _at_least_zero(t.args[0])
        return False
    if isinstance(t, T.Sel):
        return all(x is not None and (x.zero or _at_least_zero(x)) for x in (t.a, t.b))
    return False
