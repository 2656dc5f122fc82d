"""Expressions in generated code: scalars, and elementwise register-tile values one slot at a time.

Integer `//` and `%` keep Python's floor semantics (ag_floordiv / ag_floormod) unless both operands
are provably non-negative, when C's truncating operators agree and are cheaper. Narrow floats (bf16,
f16, fp8) are computed in float and rounded after every operation, as the interpreter rounds them.
`Expressions` is mixed into the Emitter (argus/codegen/emit.py), whose scope and names it reads.

Beyond elementwise arithmetic on tiles of one layout:

* index tiles (layout "index": arange arithmetic) are never stored; a read evaluates the definition
  in force (scalar parts snapshotted when it ran) with `arange` = the column of the slot being
  computed, or, under `x[:, None]`, its row: `kpos[None, :] < SKV` costs an add and a compare;
* `x[:, None]` of a row vector (layout "rows") read by slot i of an mma-fragment tile is the row
  vector's slot `slot_map(i)` (fragments.slice_fragment), a constant once the slot loop unrolls;
* `op(x, axis=1)` of an mma-fragment tile (`reduce_rows`) goes to a temporary in the rows layout:
  each thread folds its slots into its rows, then `__shfl_xor_sync` over the lanes sharing a row.
"""

from __future__ import annotations

from argus.codegen import memory
from argus.codegen.cexpr import compute_type, ctype, from_compute, is_narrow_float, literal, render_layout, to_compute
from argus.codegen.errors import unsupported
from argus.codegen.tiles import TileMap
from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir
from argus.ir.passes.layouts import _tile_vars as layout_tile_vars
from argus.ir.passes.layouts import rows_reg_layout, rows_slice


def sub_exprs(e):
    """Every expression node under `e` (including e)."""
    if isinstance(e, ir.Expr):
        yield e
        for f in e.__dataclass_fields__:
            if f in ("span", "type"):
                continue
            v = getattr(e, f)
            for x in v if isinstance(v, tuple) else (v,):
                yield from sub_exprs(x)


def _tile_vars(e, out: set[str]) -> set[str]:
    return layout_tile_vars(e, out)


def _elementwise_loads(e):
    """Loads read element for element by `e` (not under a reduction, broadcast or mma operand)."""
    if isinstance(e, ir.Load):
        yield e
    elif isinstance(e, (ir.Reduce, ir.Reshape, ir.Mma)):
        inner = e.acc if isinstance(e, ir.Mma) else None
        if inner is not None:
            yield from _elementwise_loads(inner)
        if any(isinstance(x, ir.Load) for x in sub_exprs(e.x if not isinstance(e, ir.Mma) else e.acc)):
            raise unsupported("a load inside a reduction or broadcast", e.span, "load the tile into a variable first")
    elif isinstance(e, ir.Expr):
        for f in e.__dataclass_fields__:
            if f in ("span", "type"):
                continue
            v = getattr(e, f)
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, ir.Expr):
                    yield from _elementwise_loads(x)


def walk_stmts(body):
    """Every statement, nested bodies (roles included) too."""
    for s in body:
        yield s
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                yield from walk_stmts(getattr(s, f))


class Expressions:
    """Rendering of IR expressions; the Emitter provides k, scope, cname, local(), tmp(), line()."""

    # ---- which integers are non-negative ------------------------------------------------------------
    def _nonneg_names(self) -> set[str]:
        """Names whose every value is >= 0 (so // and % can use C's truncating operators)."""
        lets: dict[str, list[ir.Expr]] = {}
        loops: dict[str, list[tuple[ir.Expr, ir.Expr]]] = {}
        for s in walk_stmts(self.k.body):
            if isinstance(s, ir.Let) and isinstance(s.value.type, ScalarT):
                lets.setdefault(s.name, []).append(s.value)
            elif isinstance(s, ir.Let):
                lets.setdefault(s.name, []).append(None)
            elif isinstance(s, ir.For):
                loops.setdefault(s.var, []).append((s.start, s.step))
        known = set(self.k.dims) | set(lets) | set(loops)
        changed = True
        while changed:
            changed = False
            for name in list(known):
                ok = all(v is not None and self.is_nonneg(v, known) for v in lets.get(name, [])) and all(
                    self.is_nonneg(a, known) and self.is_positive_step(b) for a, b in loops.get(name, []))
                if not ok:
                    known.discard(name)
                    changed = True
        return known

    @staticmethod
    def is_positive_step(e: ir.Expr) -> bool:
        return (isinstance(e, ir.Const) and isinstance(e.value, int) and e.value > 0) or \
            (isinstance(e, ir.Special) and e.kind == "num_blocks")

    def is_nonneg(self, e: ir.Expr, known: set[str] | None = None) -> bool:
        known = self.nonneg if known is None else known
        if isinstance(e, ir.Const):
            return isinstance(e.value, (int, float)) and e.value >= 0
        if isinstance(e, ir.Var):
            return e.name in known
        if isinstance(e, ir.Special):
            return True
        if isinstance(e, ir.Bin):
            if e.op == "%":  # Python's remainder takes the divisor's sign
                return self.is_nonneg(e.b, known)
            if e.op in ("+", "*", "//", "/", ">>", "&", "|", "^", "**"):
                return self.is_nonneg(e.a, known) and self.is_nonneg(e.b, known)
            return False
        if isinstance(e, ir.Math):
            if e.fn in ("cdiv", "min", "max", "exp", "exp2", "sqrt", "abs"):
                if e.fn in ("max",):
                    return any(self.is_nonneg(a, known) for a in e.args)
                if e.fn in ("abs", "exp", "exp2", "sqrt"):
                    return True
                return all(self.is_nonneg(a, known) for a in e.args)
            if e.fn == "cast":
                return self.is_nonneg(e.args[0], known)
        if isinstance(e, ir.Select):
            return self.is_nonneg(e.a, known) and self.is_nonneg(e.b, known)
        return False


    def preload(self, e: ir.Expr, tm: TileMap) -> dict[int, str]:
        """Emit what the slot loop of `e` reads from temporaries: its loads (in `tm`), then its row
        reductions (innermost first); returns id(node) -> temporary."""
        out: dict[int, str] = {}
        for x in _elementwise_loads(e):
            if id(x) not in out:
                t = self.tmp("ld")
                self.line(f"{ctype(x.type.dtype)} {t}[{tm.slots}];")
                memory.load_into(self, t, x, tm)
                out[id(x)] = t
        for x in reversed(list(sub_exprs(e))):
            if isinstance(x, ir.Reduce) and id(x) not in out:
                out[id(x)] = self.reduce_rows(x, out)
        return out

    def expr_layout(self, e: ir.Expr) -> ir.RegLayout:
        """The register layout of the tiles an elementwise expression reads (they share one)."""
        lays = {self.scope.layout(n) for n in _tile_vars(e, set())}
        lays.discard(None)
        lays = {lay for lay in lays if lay.kind != "index"}
        if len(lays) != 1:
            raise unsupported("this expression: it reads register tiles of " +
                              ("no" if not lays else "several different") + " layouts", e.span)
        return lays.pop()

    def reduce_rows(self, r: ir.Reduce, temps: dict[int, str]) -> str:
        """`op(x, axis=1)` of an mma-fragment tile into a row-slice temporary: each thread reduces its
        own slots of each of its rows, then combines with the lanes sharing the row (shfl.xor)."""
        if len(r.x.type.shape) != 2 or r.axis != 1:
            raise unsupported("a reduction of a register tile other than along the rows of a 2-D tile", r.span)
        src = self.expr_layout(r.x)
        try:
            sl = rows_slice(src)
        except ValueError as exc:
            raise unsupported(f"this row reduction: {exc}", r.span) from None
        rows = rows_reg_layout(src)
        if rows is None:
            raise unsupported("this row reduction: the rows are spread over several warps", r.span)
        stm = self.tilemap(src)
        dt = r.type.dtype
        ct = compute_type(dt)
        ident = {"sum": literal(0, dt), "max": literal(float("-inf") if dt.is_float else -(2**31), dt),
                 "min": literal(float("inf") if dt.is_float else 2**31 - 1, dt)}[r.op]

        def combine(a: str, b: str) -> str:
            return f"{a} + {b}" if r.op == "sum" else self.math(r.op, [a, b], dt, nonneg=False)

        t = self.tmp("red")
        n = sl.fragment.slots
        self.line(f"// {r.op}(axis=1): {stm.slots} slots per thread onto {n} rows, then lanes "
                  f"{'^'.join(map(str, sl.lanes)) or '(none)'}")
        self.line(f"{ct} {t}[{n}];")
        self.line("#pragma unroll")
        self.line(f"for (int ag_r = 0; ag_r < {n}; ++ag_r) {t}[ag_r] = {ident};")
        self.line("#pragma unroll")
        self.open(f"for (int ag_s = 0; ag_s < {stm.slots}; ++ag_s)")
        slot = render_layout(sl.slot_map, "ag_s")
        self.line(f"{t}[{slot}] = {combine(f'{t}[{slot}]', self.ex(r.x, 'ag_s', stm, temps))};")
        self.close()
        if sl.lanes:
            self.line("#pragma unroll")
            self.open(f"for (int ag_r = 0; ag_r < {n}; ++ag_r)")
            for m in sl.lanes:
                self.line(f"{t}[ag_r] = {combine(f'{t}[ag_r]', f'__shfl_xor_sync(0xffffffffu, {t}[ag_r], {m})')};")
            self.close()
        self.red_layout[id(r)] = rows
        return t

    def ex(self, e: ir.Expr, i: str | int, tm: TileMap, loads: dict[int, str], top: bool = False,
           pos: str | int | None = None) -> str:
        """Element `i` of tile expression `e` (in its compute type), or a scalar broadcast.

        `pos`: inside a column broadcast (x[None, :]) of a 1-D index tile, the column being read."""
        if not isinstance(e.type, TileT):
            return self.sx(e)
        dt = e.type.dtype

        def go(x: ir.Expr) -> str:
            return self.ex(x, i, tm, loads, pos=pos)

        def rounded(x: str) -> str:
            if top or not is_narrow_float(dt):
                return x
            return to_compute(dt, from_compute(dt, x))

        if isinstance(e, ir.Var):
            lay = self.scope.layout(e.name)
            if lay is not None and lay.kind == "index":
                d = self.index_def.get(e.name)
                if d is None and e.name in self.index_ambiguous:
                    raise unsupported(f"index tile '{e.name}' here: which definition is in force depends on a "
                                      "branch or a loop's trip count", e.span, "define it where it is read")
                if d is None:
                    raise unsupported(f"index tile '{e.name}' here (read before its definition)", e.span)
                return self.ex(d, i, tm, loads, top, pos)
            if lay is None:
                raise unsupported(f"register tile '{e.name}' here (no layout)", e.span)
            if lay != tm.layout or pos is not None:
                raise unsupported(f"register tile '{e.name}' in a value with another layout", e.span,
                                  "converting between register layouts goes through shared memory: copy it there")
            return to_compute(dt, f"{self.local(e.name)}[{i}]")
        if isinstance(e, ir.Load):
            return to_compute(dt, f"{loads[id(e)]}[{i}]")
        if isinstance(e, ir.Full):
            if isinstance(e.value, ir.Const) and isinstance(e.value.value, (int, float)):
                return literal(e.value.value, dt) if not is_narrow_float(dt) else f"{float(e.value.value)!r}f"
            return f"(({compute_type(dt)})({self.sx(e.value)}))"
        if isinstance(e, ir.Arange):
            return f"({pos if pos is not None else tm.col(i)})"
        if isinstance(e, ir.Tag):
            return self.ex(e.x, i, tm, loads, top, pos)
        if isinstance(e, ir.Reshape):
            return self.broadcast(e, i, tm, loads, pos)
        if isinstance(e, ir.Reduce):
            if id(e) not in loads or self.red_layout.get(id(e)) != tm.layout:
                raise unsupported("a row reduction used where its rows are not this thread's", e.span)
            return f"{loads[id(e)]}[{i}]"
        if isinstance(e, ir.Bin):
            a, b = go(e.a), go(e.b)
            return rounded(self.binop(e.op, a, b, dt, nonneg=False))
        if isinstance(e, ir.Un):
            return rounded(self.unop(e.op, go(e.a)))
        if isinstance(e, ir.Cmp):
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({go(e.a)} {op} {go(e.b)})"
        if isinstance(e, ir.Select):
            c, a, b = (go(x) for x in (e.cond, e.a, e.b))
            return f"({c} ? {a} : {b})"
        if isinstance(e, ir.Math):
            args = [go(a) for a in e.args]
            if e.fn == "cast":
                src = e.args[0].type.dtype
                if dt.is_float or src.is_float:
                    return rounded(f"(({compute_type(dt)})({args[0]}))")
                return f"(({compute_type(dt)})({args[0]}))"
            return rounded(self.math(e.fn, args, dt, nonneg=False))
        raise unsupported(f"{type(e).__name__.lower()} on register tiles", e.span)

    def index_pure(self, e: ir.Expr) -> bool:
        """A tile computed from arange, constants and scalars only (no registers): any thread can
        evaluate any element of it from the element's position."""
        if not isinstance(e.type, TileT):
            return True
        if isinstance(e, (ir.Arange, ir.Full)):
            return True
        if isinstance(e, ir.Var):
            lay = self.scope.layout(e.name)
            return lay is not None and lay.kind == "index"
        if isinstance(e, ir.Tag):
            return self.index_pure(e.x)
        if isinstance(e, (ir.Bin, ir.Cmp)):
            return self.index_pure(e.a) and self.index_pure(e.b)
        if isinstance(e, ir.Un):
            return self.index_pure(e.a)
        if isinstance(e, ir.Select):
            return all(self.index_pure(x) for x in (e.cond, e.a, e.b))
        if isinstance(e, ir.Math):
            return all(self.index_pure(x) for x in e.args)
        return False

    def index_range(self, e: ir.Expr) -> tuple[str, str] | None:
        """C expressions bounding an integer index tile over all its elements (lo, hi), or None: arange(n)
        spans 0..n-1, scalars are themselves, + and - combine bounds, * scales by a constant >= 0."""
        if e.type.dtype.kind != "int":  # signed integers only: an unsigned difference would wrap
            return None
        if not isinstance(e.type, TileT):
            return self.sx(e), self.sx(e)
        if isinstance(e, ir.Arange):
            return "0", str(e.type.shape[0] - 1)
        if isinstance(e, ir.Var):
            d = self.index_def.get(e.name)
            lay = self.scope.layout(e.name)
            return self.index_range(d) if d is not None and lay is not None and lay.kind == "index" else None
        if isinstance(e, (ir.Tag, ir.Reshape)):
            return self.index_range(e.x)
        if isinstance(e, ir.Full):
            return self.sx(e.value), self.sx(e.value)
        if isinstance(e, ir.Bin) and e.op in ("+", "-", "*"):
            a, b = self.index_range(e.a), self.index_range(e.b)
            if a is None or b is None:
                return None
            if e.op == "+":
                return f"({a[0]} + {b[0]})", f"({a[1]} + {b[1]})"
            if e.op == "-":
                return f"({a[0]} - {b[1]})", f"({a[1]} - {b[0]})"
            for x, r in ((e.a, b), (e.b, a)):
                if isinstance(x, ir.Const) and isinstance(x.value, int) and x.value >= 0:
                    return f"({x.value} * {r[0]})", f"({x.value} * {r[1]})"
        return None

    def all_true(self, cond: ir.Expr) -> str | None:
        """A scalar C condition under which the index-tile condition `cond` holds at every element, or
        None when the bounds do not decide it (comparisons of integer index tiles, and `and` of those)."""
        while isinstance(cond, ir.Tag):
            cond = cond.x
        if cond.op in ("and", "&") if isinstance(cond, (ir.Cmp, ir.Bin)) else False:
            a, b = self.all_true(cond.a), self.all_true(cond.b)
            return None if a is None or b is None else f"({a} && {b})"
        if not isinstance(cond, ir.Cmp):
            return None
        ra, rb = self.index_range(cond.a), self.index_range(cond.b)
        if ra is None or rb is None:
            return None
        # a < b everywhere iff max(a) < min(b); a > b everywhere iff min(a) > max(b)
        return {"<": f"({ra[1]} < {rb[0]})", "<=": f"({ra[1]} <= {rb[0]})",
                ">": f"({ra[0]} > {rb[1]})", ">=": f"({ra[0]} >= {rb[1]})"}.get(cond.op)

    def broadcast(self, e: ir.Reshape, i: str | int, tm: TileMap, loads: dict[int, str], pos) -> str:
        """x[:, None] read by slot i of a 2-D tile: the row vector's value for the slot's row, from the
        row slice of the tile's fragment (slot map of fragments.slice_fragment); x[None, :] of an index
        tile: its value at the slot's column."""
        src, dst = e.x.type.shape, e.type.shape
        if len(src) == 1 and len(dst) == 2 and dst == (src[0], 1) and pos is None and len(tm.layout.shape) == 2 \
                and self.index_pure(e.x):
            return self.ex(e.x, i, tm, loads, pos=tm.row(i))  # (r0 + arange(BM))[:, None]: the slot's row
        if len(src) == 1 and len(dst) == 2 and dst == (src[0], 1) and pos is None and len(tm.layout.shape) == 2:
            rows = rows_reg_layout(tm.layout)
            if rows is None:
                raise unsupported("a row broadcast (x[:, None]) into a tile whose rows are not held whole by "
                                  "one warp (or warpgroup)", e.span)
            return self.ex(e.x, render_layout(rows_slice(tm.layout).slot_map, i), self.tilemap(rows), loads)
        if len(src) == 1 and len(dst) == 2 and dst == (1, src[0]) and pos is None and len(tm.layout.shape) == 2:
            return self.ex(e.x, i, tm, loads, pos=tm.col(i))
        raise unsupported(f"reshape {list(src)} -> {list(dst)} of a register tile", e.span,
                          "x[:, None] of a row vector and x[None, :] of an index tile (arange) are supported")

    # ---- scalars ----------------------------------------------------------------------------------
    def sx(self, e: ir.Expr) -> str:
        """A scalar expression in C."""
        if isinstance(e, ir.Const):
            if isinstance(e.value, bool):
                return "true" if e.value else "false"
            return literal(e.value, e.type.dtype) if isinstance(e.type, ScalarT) else str(e.value)
        if isinstance(e, ir.Var):
            if isinstance(e.type, TileT):
                raise unsupported(f"register tile '{e.name}' where a scalar is needed", e.span)
            return self.local(e.name) if e.name not in self.cname else self.cname[e.name]
        if isinstance(e, ir.Special):
            t = self.scope.tid
            return {"block_id": f"(int)blockIdx.{'xyz'[e.axis]}", "num_blocks": f"(int)gridDim.{'xyz'[e.axis]}",
                    "thread_id": t, "warp_id": f"({t} >> 5)", "lane_id": "(ag_tid & 31)",
                    "warpgroup_id": f"({t} >> 7)"}[e.kind]
        if isinstance(e, ir.Bin):
            nonneg = self.is_nonneg(e.a) and self.is_nonneg(e.b)
            return self.binop(e.op, self.sx(e.a), self.sx(e.b), e.type.dtype, nonneg)
        if isinstance(e, ir.Un):
            return self.unop(e.op, self.sx(e.a))
        if isinstance(e, ir.Cmp):
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({self.sx(e.a)} {op} {self.sx(e.b)})"
        if isinstance(e, ir.Select):
            return f"({self.sx(e.cond)} ? {self.sx(e.a)} : {self.sx(e.b)})"
        if isinstance(e, ir.Math):
            if e.fn == "cast":
                dt = e.type.dtype
                v = f"(({compute_type(dt)})({self.sx(e.args[0])}))"
                return to_compute(dt, from_compute(dt, v)) if is_narrow_float(dt) else v
            nonneg = all(self.is_nonneg(a) for a in e.args)
            return self.math(e.fn, [self.sx(a) for a in e.args], e.type.dtype, nonneg)
        if isinstance(e, ir.Load) and e.ref is not None and e.ref.space == "global" and \
                all(x is None for x in e.ref.extents):
            # load(T[i, j]): one element, the same in every thread (routing metadata, schedules). The
            # pointer is `const __restrict__`, so this is a read-only-path load; out of range is a fault,
            # as in the interpreter.
            terms = []
            for ax, st in enumerate(e.ref.starts):
                s = self.stride(e.ref.base, ax)
                terms.append(f"(long long)({self.sx(st)})" + ("" if s == "1" else f" * {s}"))
            return to_compute(e.type.dtype, f"{self.cname[e.ref.base]}[{' + '.join(terms)}]")
        raise unsupported(f"{type(e).__name__.lower()} as a scalar", e.span)

    def binop(self, op: str, a: str, b: str, dt, nonneg: bool) -> str:
        ct = compute_type(dt)
        if op in ("//", "%") and dt.is_float:
            return f"floorf({a} / {b})" if op == "//" else f"({a} - floorf({a} / {b}) * {b})"
        if op == "//":
            return f"({a} / {b})" if nonneg else f"ag_floordiv<{ct}>({a}, {b})"
        if op == "%":
            return f"({a} % {b})" if nonneg else f"ag_floormod<{ct}>({a}, {b})"
        if op == "/":
            return f"(({ct})({a}) / ({ct})({b}))"
        if op == "**":
            return f"(({ct})pow((double)({a}), (double)({b})))"
        return f"({a} {op} {b})"

    @staticmethod
    def unop(op: str, a: str) -> str:
        return f"(!{a})" if op == "not" else f"({op}{a})"

    def math(self, fn: str, args: list[str], dt, nonneg: bool) -> str:
        ct = compute_type(dt)
        if fn == "cdiv":
            a, b = args
            return f"(({a} + {b} - 1) / {b})" if nonneg else f"ag_cdiv<{ct}>({a}, {b})"
        if fn in ("min", "max"):
            return f"{fn}(({ct})({args[0]}), ({ct})({args[1]}))"
        f32 = ct == "float"
        if fn == "exp2" and f32:  # one MUFU.EX2 (exp2f adds a subnormal-range fix-up around it)
            self.features.add("ex2")
            return f"ag_exp2f({args[0]})"
        table = {"exp": "expf" if f32 else "exp", "exp2": "exp2f" if f32 else "exp2",
                 "log": "logf" if f32 else "log", "log2": "log2f" if f32 else "log2",
                 "sqrt": "sqrtf" if f32 else "sqrt", "rsqrt": "rsqrtf" if f32 else "rsqrt",
                 "abs": "fabsf" if f32 else ("fabs" if dt.is_float else "abs")}
        if fn not in table:
            raise unsupported(f"{fn}()", None)
        return f"{table[fn]}({args[0]})"
