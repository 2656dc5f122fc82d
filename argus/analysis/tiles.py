"""Register-tile expressions in the symbolic executor: each rule builds the SymTile of one IR node.

Mixed into `Executor`, which supplies the environment (`self.agent.env`), scalar evaluation, shared
memory reads (`read_shared`), global tags (`global_tags`) and the trace the obligations go to.
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import Unsupported, as_int, simplify_int, to_bool, zdiv, zmod
from argus.analysis.trace import Obligation, Unknown, View
from argus.analysis.values import (
    ElemTags,
    SymTile,
    broadcast_index,
    combine,
    element_key,
    invariant_fields,
    memo,
    merge_fields,
    merge_if,
    origin_keys,
    unary,
)
from argus.dsl.types import TileT
from argus.ir import nodes as ir


class TileRules:
    # ---- entry ----
    def value(self, e: ir.Expr):
        if not isinstance(e.type, TileT):
            return self.scalar(e)
        m = getattr(self, "_v_" + type(e).__name__, None)
        if m is None:
            raise Unsupported(f"{type(e).__name__} on tiles", e.span)
        return m(e)

    def fresh_var(self, prefix: str) -> z3.ArithRef:
        self.fresh_id += 1
        return z3.Int(f"{prefix}{self.fresh_id}")

    # ---- leaves ----
    def _v_Var(self, e: ir.Var):
        v = self.agent.env.get(e.name)
        if not isinstance(v, SymTile):
            raise Unsupported(f"'{e.name}' has no tile value here", e.span)
        return v

    def _v_Full(self, e: ir.Full):
        v = self.scalar(e.value)
        if isinstance(e.value, ir.Const):
            term = T.lit_for(e.value.value)
        elif _is_neg_inf(e.value, e.type.dtype):
            term = T.MINF
        else:
            term = self._scalar_term(e.value)
        tags = ElemTags({}, term, "")
        value = (lambda idx: v) if isinstance(v, int) or (not isinstance(v, bool) and z3.is_int(v)) else None
        # a zero fill starts an accumulator chain (acc = zeros(...); acc = acc + x / mma(..., acc))
        chain = T.new_chain() if term is T.ZERO else None
        return SymTile(e.type.shape, lambda idx: tags, None, chain, value)

    def _v_Arange(self, e: ir.Arange):
        tags = ElemTags({}, T.VALUE, "")
        return SymTile(e.type.shape, lambda idx: tags, None, None, lambda idx: idx[0])

    def _v_Load(self, e: ir.Load):
        v = self.view(e.ref, e.span)
        if v.space == "global":
            self.trace.global_accesses.append((v, e.masked, "read", e.span, self.step_snapshot(),
                                               self.copy_threads(v)))
            return SymTile(v.shape, self.global_tags(v), value=self.global_values(v))
        return SymTile(v.shape, self.read_shared(v, e.span, False))

    def global_values(self, v: View):
        """An integer tensor's tile carries its contents, as its scalar loads and the reference's reads
        do (one uninterpreted function per tensor), so `select(keep != 0, x, 0)` on a loaded mask is the
        reference's `where(keep != 0, X, 0)`; an element past the tensor's end reads as the fill, 0.
        Float tiles carry none: a select on them stays a select on data."""
        t = self.k.tensor(v.base)
        if t.dtype.is_float:
            return None
        dims = [as_int(d) if isinstance(d, int) else self.ctx.dims[d] for d in t.dims]

        def value(idx):
            c = tuple(as_int(x) for x in v.coords(idx))
            inside = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)])
            return z3.If(inside, self.ctx.tensor_value(v.base, t.dtype, c), 0)
        return value

    def operand(self, x, span) -> tuple[SymTile, View | None]:
        if isinstance(x, ir.Ref):
            v = self.view(x, span)
            if v.space == "global":
                return SymTile(v.shape, self.global_tags(v)), v
            return SymTile(v.shape, self.read_shared(v, span, True)), v
        return self.value(x), None

    def _scalar_term(self, x: ir.Expr) -> T.Term:
        """The data-flow term of a scalar used in tile arithmetic."""
        if isinstance(x, ir.Var) and f"{x.name}#tags" in self.agent.env:
            return self.agent.env[f"{x.name}#tags"].term
        if isinstance(x, ir.Load):
            return self.scalar_load_tags(x).term
        if isinstance(x, ir.Const):
            return T.lit_for(x.value)
        tags = self.scalar_tags(x)
        return tags.term if tags is not None else T.VALUE

    def scalar_tags(self, x: ir.Expr) -> ElemTags | None:
        """The tags of a scalar computed from scalar reads of tensors (`max(load(len[r]), 1)`,
        `1.0 / load(s[e])`): the reads' origins through the arithmetic, so the value depends on the
        elements it was read from. None for a scalar that reads no tensor (index arithmetic, constants)."""
        if isinstance(x.type, TileT):
            return None
        if isinstance(x, ir.Var):
            return self.agent.env.get(f"{x.name}#tags")
        if isinstance(x, ir.Load):
            return self.scalar_load_tags(x)
        if isinstance(x, (ir.Bin, ir.Math, ir.Un, ir.Cmp, ir.Select)):
            subs = list(x.args) if isinstance(x, ir.Math) else \
                [y for y in (getattr(x, "cond", None), x.a, x.b if not isinstance(x, ir.Un) else None) if y is not None]
            got = [self.scalar_tags(y) for y in subs]
            if all(t is None for t in got):
                return None
            fill = x.type.dtype if isinstance(x, ir.Select) else None
            tags = [t if t is not None else ElemTags({}, T.MINF if _is_neg_inf(y, fill) else self._scalar_term(y), "")
                    for y, t in zip(subs, got)]
            if isinstance(x, ir.Select):
                c = to_bool(self.scalar(x.cond))
                a, b = tags[1], tags[2]
                return ElemTags(merge_fields(a.fields, b.fields), T.sel(c, a.term, b.term), a.origin or b.origin)
            if isinstance(x, ir.Cmp):
                return ElemTags(merge_fields(tags[0].fields, tags[1].fields), T.cmp(x.op, tags[0].term, tags[1].term),
                                tags[0].origin or tags[1].origin)
            if isinstance(x, ir.Un):
                return unary(tags[0], "neg" if x.op == "-" else x.op)
            if isinstance(x, ir.Math) and x.fn not in ("min", "max"):
                return unary(tags[0], x.fn)
            return combine(tags[0], tags[1], x.fn if isinstance(x, ir.Math) else x.op)
        return None

    def _operands(self, exprs, fill=None) -> list[SymTile]:
        """Each operand as a SymTile (scalars become constant tiles of rank 0); `fill`: the dtype a select
        picks its operands into (an integer tile's minimum is its -inf there, see _is_neg_inf)."""
        out = []
        for x in exprs:
            v = self.value(x)
            if isinstance(v, SymTile):
                out.append(v)
                continue
            if isinstance(x, ir.Var) and f"{x.name}#tags" in self.agent.env:
                tags = self.agent.env[f"{x.name}#tags"]  # a scalar read from a tensor: its origin
            elif isinstance(x, ir.Load):
                tags = self.scalar_load_tags(x)
            elif (got := self.scalar_tags(x)) is not None:
                tags = got  # a scalar computed from tensor reads: their origins
            else:
                tags = ElemTags({}, T.MINF if _is_neg_inf(x, fill) else self._scalar_term(x), "")
            val = v if (isinstance(v, (int, bool)) or z3.is_int(v) or z3.is_bool(v)) else None
            out.append(SymTile((), lambda idx, t=tags: t, None, None,
                               (lambda idx, c=val: c) if val is not None else None))
        return out

    # ---- elementwise ----
    def _elementwise(self, operands: list[SymTile], shape, tag_fn, value_fn, fn: str = "") -> SymTile:
        """Broadcast operands to `shape`; tags by `tag_fn(list of ElemTags)`, values by `value_fn`."""
        n = len(shape)

        def tags(idx):
            return tag_fn([t.tags(broadcast_index(t, idx, n)) for t in operands])
        value = None
        if value_fn is not None and operands and all(t.value is not None for t in operands):
            def value(idx):
                return value_fn([t.value(broadcast_index(t, idx, n)) for t in operands])
        tiles = [t for t in operands if t.shape]
        layout = next((t.layout for t in tiles if t.layout is not None), None)
        chained = [t for t in operands if t.chain is not None]
        chain = None
        if len(chained) == 1 and fn in ("+", "*", "/", "-", "cast"):
            chain = chained[0].chain
            if fn == "+":
                # acc + x: x is one more summand of the accumulator (a step of the chain)
                other = [t for t in operands if t is not chained[0]]
                if other:
                    acc_first = operands[0] is chained[0]

                    def tags(idx, c=chained[0], o=other[0], acc_first=acc_first):  # noqa: F811
                        ta, to = c.tags(broadcast_index(c, idx, n)), o.tags(broadcast_index(o, idx, n))
                        entry = T.red("sum", (), True, to.term, None,
                                      (c.chain, element_key(broadcast_index(c, idx, n))))
                        f = merge_fields(ta.fields, to.fields) if acc_first else merge_fields(to.fields, ta.fields)
                        return ElemTags(f, T.op("+", ta.term, entry), ta.origin or to.origin)
        return SymTile(shape, memo(tags), layout, chain, value)

    def _v_Math(self, e: ir.Math):
        ops = self._operands(e.args)
        if e.fn in ("min", "max"):
            def vf(vs):
                a, b = as_int(vs[0]), as_int(vs[1])
                return z3.If(a <= b, a, b) if e.fn == "min" else z3.If(a >= b, a, b)
            return self._elementwise(ops, e.type.shape, lambda ts: combine(ts[0], ts[1], e.fn), vf, e.fn)
        tiles = [o for o in ops if o.shape] or ops[:1]
        out = self._elementwise(tiles, e.type.shape, lambda ts: unary(ts[0], e.fn),
                                (lambda vs: vs[0]) if e.fn == "cast" else None, e.fn)
        if e.fn == "cast" and out.value is not None and out.chain is None:
            # a positional mask cast to a number is 1 where it holds and a structural 0 elsewhere, so
            # x * cast(cols < N, f32) masks like select(cols < N, x, 0.0) does; a condition on an integer
            # tensor's contents (a histogram's x == bin) is data, and keeps its tags
            content = self._content_valued(out)

            def mtags(idx, out=out):
                c = out.value(idx)
                if (isinstance(c, bool) or z3.is_bool(c)) and not content:
                    t = out.tags(idx)
                    return ElemTags(t.fields, T.sel(c, T.VALUE, T.ZERO), t.origin)
                return out.tags(idx)
            return SymTile(out.shape, memo(mtags), out.layout, None, out.value)
        return out

    def _content_valued(self, t: SymTile) -> bool:
        """A tile whose value reads an integer tensor's contents element by element (`x == bins` with x
        loaded from a tile of X: data, though it has a value). A bound loaded once for the whole tile
        (`cols < load(lens[r])`) keeps the tile a position mask, as MoE row masks are."""
        if t.value is None:
            return False
        probes = tuple(z3.Int(f"probe_{i}") for i in range(len(t.shape)))
        return bool(T.applied_names(t.value(probes), set(self.ctx.functions), {p.decl().name() for p in probes}))

    def _v_Bin(self, e: ir.Bin):
        ops = self._operands((e.a, e.b))
        op = e.op
        positive = op in ("//", "%") and not e.type.dtype.is_float and self._tile_divisor(e, ops[1])

        def vf(vs):
            a, b = vs
            if z3.is_bool(a) or z3.is_bool(b) or isinstance(a, bool):
                return {"&": z3.And, "|": z3.Or}.get(op, lambda x, y: None)(_bool(a), _bool(b))
            return {"+": lambda: as_int(a) + b, "-": lambda: as_int(a) - b, "*": lambda: as_int(a) * b,
                    "//": lambda: zdiv(a, b, positive), "%": lambda: zmod(a, b, positive)}.get(op, lambda: None)()
        data_ops = [t.value is None for t in ops]
        if len(ops) == 2 and not any(data_ops):
            # both carry values: one read from an integer tensor's contents beside a pure position mask
            # (`(x == bins) & valid`) is the data side (two content conditions stay as they are, as the
            # reference's where((keep != 0) & ...) reads them)
            data_ops = [self._content_valued(t) for t in ops]
        if op == "&" and e.type.dtype.kind == "bool" and len(ops) == 2 and data_ops.count(True) == 1:
            # a data condition and a positional mask (`(x > lo) & (cols < N)`, `(x == bins) & valid` on an
            # integer tensor's contents): false wherever the mask is, so a select on it takes its other side
            # there (the tail is masked, not data)
            pos, data = (ops[0], ops[1]) if not data_ops[0] else (ops[1], ops[0])
            n = len(e.type.shape)
            false = ElemTags({}, T.ZERO, "")

            def mtags(idx, pos=pos, data=data):
                c = pos.value(broadcast_index(pos, idx, n))
                c = _bool(c) if not isinstance(c, bool) else c
                return merge_if(c, data.tags(broadcast_index(data, idx, n)), false)
            tiles = [t for t in ops if t.shape]
            layout = next((t.layout for t in tiles if t.layout is not None), None)
            return SymTile(e.type.shape, memo(mtags), layout, None, None)
        return self._elementwise(ops, e.type.shape, lambda ts: combine(ts[0], ts[1], op), vf, op)

    def _tile_divisor(self, e: ir.Bin, d: SymTile) -> bool:
        """An integer tile divided by `d`: True where every element of d is positive. A scalar divisor is
        the executor's (_on_divisor); a positional tile (arange-based) is obliged non-zero at a fresh
        element; a divisor read from data is beyond the values the verifier models: the check is unknown."""
        if d.value is None:
            self.trace.unknowns.append(Unknown("division-by-zero", e.span, "an integer division by a tile read from "
                                               "data (the verifier does not model its values)"))
            return False
        if not d.shape:
            v = d.value(())
            return v > 0 if isinstance(v, int) else self._on_divisor(e, v)
        idx = self.fresh_idx(d.shape, "div")
        v = as_int(d.value(idx))
        if isinstance(v, int) or z3.is_int_value(z3.simplify(v)):
            return simplify_int(v) > 0
        self.trace.obligations.append(Obligation(
            "division-by-zero", e.span, "an element of the divisor tile may be zero (integer division and "
            "remainder by zero are undefined on the GPU)", v == 0, self.idx_domain(idx, d.shape),
            self.idx_vars(idx, "element"), self.step_snapshot()))
        return False

    def _v_Cmp(self, e: ir.Cmp):
        ops = self._operands((e.a, e.b))

        def vf(vs):
            a, b = as_int(vs[0]), as_int(vs[1])
            return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}.get(e.op)
        def tags(ts):
            a, b = ts
            return ElemTags(merge_fields(a.fields, b.fields), T.cmp(e.op, a.term, b.term), a.origin or b.origin)
        return self._elementwise(ops, e.type.shape, tags, vf)

    def _v_Un(self, e: ir.Un):
        ops = self._operands((e.a,))
        vf = (lambda vs: -vs[0]) if e.op == "-" else (lambda vs: z3.Not(_bool(vs[0]))) if e.op == "not" else None
        return self._elementwise(ops, e.type.shape, lambda ts: unary(ts[0], "neg" if e.op == "-" else e.op), vf)

    def _v_Select(self, e: ir.Select):
        cond, a, b = self._operands((e.cond, e.a, e.b), e.type.dtype)
        n = len(e.type.shape)
        tiles = [t for t in (a, b) if t.shape]
        layout = next((t.layout for t in tiles if t.layout is not None), None)
        chain = tiles[0].chain if len(tiles) == 1 else None
        if cond.value is not None:
            # a mask computed from positions: each element takes exactly one side's tags
            def tags(idx):
                c = cond.value(broadcast_index(cond, idx, n))
                c = _bool(c) if not isinstance(c, bool) else c
                return merge_if(c, a.tags(broadcast_index(a, idx, n)), b.tags(broadcast_index(b, idx, n)))
            value = None
            if a.value is not None and b.value is not None:
                def value(idx):
                    return z3.If(_bool(cond.value(broadcast_index(cond, idx, n))),
                                 as_int(a.value(broadcast_index(a, idx, n))),
                                 as_int(b.value(broadcast_index(b, idx, n))))
            return SymTile(e.type.shape, memo(tags), layout, chain, value)

        # a condition on data: the element depends on the condition and both sides
        def dtags(idx):
            tc, ta, tb = (t.tags(broadcast_index(t, idx, n)) for t in (cond, a, b))
            ct, guard = tc.term, []
            while isinstance(ct, T.Sel) and isinstance(ct.b, T.Lit) and ct.b.kind == "zero":
                guard.append(ct.cond)  # a data condition under a positional mask (false outside it)
                ct = ct.a
            inner = ElemTags(merge_fields(ta.fields, tb.fields), T.op("select", ct, ta.term, tb.term),
                             ta.origin or tb.origin)
            return merge_if(z3.And(*[_bool(g) for g in guard]), inner, tb) if guard else inner
        return SymTile(e.type.shape, memo(dtags), layout, None, None)

    def _v_Reduce(self, e: ir.Reduce):
        x = self.value(e.x)
        ax = e.axis
        extent = x.shape[ax]
        var = self.fresh_var("red")

        def at(idx, k):
            full = list(idx[: len(x.shape) - 1])
            full.insert(ax, k)
            return x.tags(tuple(full))

        @memo
        def fn(idx):
            member = at(idx, var)
            # a field that differs along the reduced axis (the key position of a row max) is dropped
            fields = invariant_fields(member.fields, var)
            term = T.red(e.op, (var,), z3.And(var >= 0, var < extent), member.term, (e.span, f"{e.op}(axis={ax})"),
                         T.new_chain() if e.op == "sum" else None)
            return ElemTags(fields, term, member.origin)
        return SymTile(e.type.shape, fn, x.layout, None)

    def _v_Reshape(self, e: ir.Reshape):
        x = self.value(e.x)
        src_shape = x.shape

        def src(idx):
            vals = [idx[d] for d in range(len(idx)) if e.type.shape[d] != 1]
            while len(vals) < len(src_shape):
                vals.append(0)
            return tuple(vals[: len(src_shape)])
        value = (lambda idx: x.value(src(idx))) if x.value is not None else None
        return SymTile(e.type.shape, lambda idx: x.tags(src(idx)), x.layout, x.chain, value)

    def _v_Transpose(self, e: ir.Transpose):
        x = self.value(e.x)
        value = (lambda idx: x.value(tuple(idx)[::-1])) if x.value is not None else None
        return SymTile(e.type.shape, lambda idx: x.tags(tuple(idx)[::-1]), x.layout, x.chain, value)

    def _v_Shfl(self, e: ir.Shfl):
        # the value comes from another lane, whose element the verifier does not track
        reason = "shfl_xor moves values between lanes; the verifier does not model which element arrives"
        tags = ElemTags({}, T.opaque(reason, e.span), "shfl_xor")
        x = self.value(e.x)
        return SymTile(x.shape, lambda idx: tags, x.layout, None)

    def _v_Tag(self, e: ir.Tag):
        x = self.value(e.x)
        extra = []
        for name, v in e.fields:
            if isinstance(v, ir.Lambda):
                extra.append((name, v, None))
            else:
                extra.append((name, None, self.scalar(v)))
        env = dict(self.agent.env)
        from argus.analysis.symbolic import Evaluator

        def fn(idx):
            t = x.tags(idx)
            fields = dict(t.fields)
            for name, lam, val in extra:
                if lam is None:
                    fields[name] = as_int(val)
                else:
                    fields[name] = as_int(Evaluator(self.ctx, {**env, **dict(zip(lam.params, idx))}).scalar(lam.body))
            return ElemTags(fields, t.term, t.origin)
        return SymTile(x.shape, fn, x.layout, x.chain, x.value)

    # ---- mma ----
    def _v_Mma(self, e: ir.Mma):
        a, av = self.operand(e.a, e.span)
        b, bv = self.operand(e.b, e.span)
        acc = self.value(e.acc)
        self.trace.mmas.append((e, av, bv, a, b, self.step_snapshot()))
        m, kdim = a.shape
        n = b.shape[1]
        i, kk, j = self.fresh_var("i"), self.fresh_var("k"), self.fresh_var("j")
        ta, tb = a.tags((i, kk)), b.tags((kk, j))
        dom = [i >= 0, i < m, kk >= 0, kk < kdim, j >= 0, j < n]
        step = self.step_snapshot()
        self._contraction_obligation(e, ta, tb, kk, dom, step, av, bv, i, j)
        uninit = T.b_or(ta.uninit, tb.uninit)
        self.trace.obligations.append(Obligation(
            "uninitialized-read", e.span, "mma reads shared memory that no landed copy has written",
            T.zb(uninit), dom, {"row i": i, "k": kk, "col j": j}, step, {}, {"operand_views": (av, bv)}))
        # accumulator: each element keeps the origin coordinates of its row of A and column of B
        row_fields = origin_keys(invariant_fields(ta.fields, kk))
        col_fields = origin_keys(invariant_fields(tb.fields, kk))
        before = acc.tags((i, j))
        bad = [as_int(before.fields[f]) != as_int(v) for f, v in {**row_fields, **col_fields}.items()
               if f in before.fields]
        if bad:
            live = z3.And(z3.Not(T.zb(ta.zero)), z3.Not(T.zb(tb.zero)))
            self.trace.obligations.append(Obligation(
                "mma-accumulator", e.span,
                "the accumulator element does not belong to the row of A / column of B it is updated with",
                z3.And(live, z3.Or(*bad)), dom, {"row i": i, "col j": j}, step,
                {"accumulator": self.named(origin_keys(before.fields)),
                 "A row / B col": self.named({**row_fields, **col_fields})}))
        chain = acc.chain if acc.chain is not None else T.new_chain()
        a_tags, b_tags = a.tags, b.tags

        @memo
        def out(idx):
            r, c = idx
            kv = self.fresh_var("kk")
            xa, xb = a_tags((r, kv)), b_tags((kv, c))
            body = T.op("*", xa.term, xb.term)
            term = T.red("sum", (kv,), z3.And(kv >= 0, kv < kdim), body, (e.span, "mma", step),
                         (chain, element_key(idx)))
            prev = acc.tags(idx)
            f = merge_fields(invariant_fields(xa.fields, kv), invariant_fields(xb.fields, kv))
            f = {k: v for k, v in f.items() if isinstance(k, tuple)}
            return ElemTags(f, T.op("+", prev.term, term), "mma")
        return SymTile(e.type.shape, out, e.layout, chain)

    def _contraction_obligation(self, e, ta, tb, kk, dom, step, av, bv, i, j) -> None:
        """Positional: the coordinates of A's inputs that move with k equal those of B's inputs."""
        name = {kk.decl().name()}
        try:
            occ_a = [o for o in T.occurrences(ta.term, uninit_as=None) if any(T.mentions(c, name) for c in o.coords)]
            occ_b = [o for o in T.occurrences(tb.term, uninit_as=None) if any(T.mentions(c, name) for c in o.coords)]
        except T.OpaqueTerm as exc:
            self.trace.unknowns.append(Unknown("mma-contraction", e.span, f"an operand is not tracked: {exc}"))
            return
        if not occ_a or not occ_b:
            return  # nothing from an input tensor is contracted on one side: no coordinates to compare
        bads = []
        for oa in occ_a:
            xa = [c for c in oa.coords if T.mentions(c, name)]
            for ob in occ_b:
                xb = [c for c in ob.coords if T.mentions(c, name)]
                if len(xa) != len(xb):
                    self.trace.unknowns.append(Unknown(
                        "mma-contraction", e.span, f"{oa.tensor} and {ob.tensor} move with k along "
                        f"{len(xa)} and {len(xb)} axes: which coordinates are contracted is not clear"))
                    return
                mism = z3.Or(*[as_int(p) != as_int(q) for p, q in zip(xa, xb)])
                bads.append(z3.And(T.zb(oa.guard), T.zb(ob.guard), mism, *_domains(oa.bound + ob.bound)))
        ca, cb = occ_a[0], occ_b[0]
        ka = [c for c in ca.coords if T.mentions(c, name)]
        kb = [c for c in cb.coords if T.mentions(c, name)]
        self.trace.obligations.append(Obligation(
            "mma-contraction", e.span,
            f"mma contracts {ca.tensor} and {cb.tensor} elements from different coordinates",
            z3.Or(*bads), dom, {"row i": i, "k": kk, "col j": j}, step,
            {f"A ({ta.origin})": {f"{ca.tensor}[k-axis {n}]": x for n, x in enumerate(ka)},
             f"B ({tb.origin})": {f"{cb.tensor}[k-axis {n}]": x for n, x in enumerate(kb)}},
            {"operand_views": (av, bv)}))


def _domains(bound: tuple) -> list:
    """Bound variables of reductions met on an occurrence's path are constrained by its guard; nothing
    else to add (kept as a hook for non-guarded ranges)."""
    return []


def _is_neg_inf(e, dtype=None) -> bool:
    """-inf, or (a fill selected into a signed integer tile of `dtype`) that type's minimum: no element of
    the tile is below it, so as a maximum's candidate it is what -inf is to floats."""
    if isinstance(e, ir.Const):
        if dtype is not None and dtype.kind == "int" and isinstance(e.value, int) and not isinstance(e.value, bool):
            return e.value <= -(2 ** (dtype.bits - 1))
        return isinstance(e.value, float) and e.value == float("-inf")
    if isinstance(e, ir.Un) and e.op == "-" and isinstance(e.a, ir.Const):
        return isinstance(e.a.value, float) and e.a.value == float("inf")
    return False


def _bool(v):
    return z3.BoolVal(v) if isinstance(v, bool) else v
