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

import math

from argus.codegen import exchange, memory
from argus.codegen.cexpr import (
    compute_type,
    ctype,
    from_compute,
    is_narrow_float,
    literal,
    render_layout,
    to_compute,
    wrap_narrow,
)
from argus.codegen.errors import unsupported
from argus.codegen.tiles import TileMap
from argus.dsl.types import DTYPES, I32, ScalarT, TileT
from argus.ir import nodes as ir
from argus.ir.reg_layout import (
    broadcast_keep,
    equivalent,
    operand_layout,
    reduction_plan,
    slice_layout,
    tile_vars,
    transposed_layout,
    unit_keep,
    unit_layout,
)


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


    def preload(self, e: ir.Expr, tm: TileMap) -> dict:
        """Emit what the slot loop of `e` (computed in `tm`) reads from temporaries: its loads (in the
        layout each is read in), its reductions (argus/codegen/exchange.py), and the tiles it reads in a
        layout other than their own (converted); returns (id(node), layout) -> (temporary, computed),
        `computed` when the temporary holds compute-type values."""
        out: dict = {}
        self._preload(e, tm, out, True)
        return out

    def _preload(self, e, tm: TileMap, out: dict, top: bool) -> None:
        if not isinstance(e, ir.Expr) or not isinstance(e.type, TileT):
            return
        lay = tm.layout
        if self.broadcasts(e, lay):  # broadcast into the value (numpy's rules)
            inner = self.broadcast_layout(tuple(e.type.shape), lay)
            if inner is not None:
                self._preload(e, self.tilemap(inner), out, False)
            return
        key = (id(e), lay)
        if key in out:
            return
        if isinstance(e, ir.Load):
            if e.ref.space == "shared" and not top:
                # the verifier models a shared read by the threads of the statement's layout
                raise unsupported("a shared-memory load inside a reduction, broadcast or transpose", e.span,
                                  "load the tile into a variable first")
            t = self.tmp("ld")
            self.line(f"{ctype(e.type.dtype)} {t}[{tm.slots}];")
            memory.load_into(self, t, e, tm)
            out[key] = (t, False)
            return
        if isinstance(e, ir.Var):
            vl = self.scope.layout(e.name)
            if vl is None or vl.kind == "index" or equivalent(vl, lay):
                return
            out[key] = (exchange.convert(self, self.local(e.name), vl, lay, e.type.dtype, False, e.span), True)
            return
        if isinstance(e, ir.Reduce):
            src = self.operand_layout(e.x)
            t, rl = exchange.reduce(self, e, src)
            if equivalent(rl, lay):
                out[key] = (t, True)
            else:
                dt = I32 if e.op in ("argmax", "argmin") else e.type.dtype
                out[key] = (exchange.convert(self, t, rl, lay, dt, True, e.span), True)
            return
        if isinstance(e, ir.Reshape):
            keep = broadcast_keep(tuple(e.x.type.shape), tuple(e.type.shape)) if isinstance(e.x.type, TileT) else None
            if keep is not None and len(lay.shape) == 2 and not self.index_pure(e.x):
                self._preload(e.x, self.tilemap(slice_layout(lay, keep)), out, False)
            return
        if isinstance(e, ir.Transpose):
            self._preload(e.x, self.tilemap(transposed_layout(lay)), out, False)
            return
        if isinstance(e, ir.Mma):
            raise unsupported("an mma inside an expression", e.span, "assign its result to a variable first")
        for f in e.__dataclass_fields__:
            if f in ("span", "type"):
                continue
            v = getattr(e, f)
            for x in v if isinstance(v, tuple) else (v,):
                self._preload(x, tm, out, top)

    def operand_layout(self, x: ir.Expr) -> ir.RegLayout:
        """The layout a reduction's operand is computed in (argus/ir/reg_layout.operand_layout)."""
        return operand_layout(x, self.scope.layout, self.scope.threads)

    def expr_layout(self, e: ir.Expr) -> ir.RegLayout:
        """The register layout of the tiles an elementwise expression reads (they share one)."""
        lays = {self.scope.layout(n) for n in tile_vars(e, set())}
        lays.discard(None)
        lays = {lay for lay in lays if lay.kind != "index"}
        if len(lays) != 1:
            raise unsupported("this expression: it reads register tiles of " +
                              ("no" if not lays else "several different") + " layouts", e.span)
        return lays.pop()

    def ex(self, e: ir.Expr, i: str | int, tm: TileMap, loads: dict, top: bool = False,
           pos: str | int | None = None) -> str:
        """Element `i` of tile expression `e` (in its compute type), or a scalar broadcast.

        `pos`: inside a column broadcast (x[None, :]) of a 1-D index tile, the column being read."""
        if not isinstance(e.type, TileT):
            return self.sx(e)
        dt = e.type.dtype

        def go(x: ir.Expr) -> str:
            return self.ex(x, i, tm, loads, pos=pos)

        def rounded(x: str) -> str:
            if not dt.is_float:
                return wrap_narrow(dt, x)
            if top or not is_narrow_float(dt):
                return x
            return to_compute(dt, from_compute(dt, x))

        if pos is None and self.broadcasts(e, tm.layout):  # broadcast (numpy's rules)
            inner = self.broadcast_layout(tuple(e.type.shape), tm.layout)
            if inner is None:
                raise unsupported(f"a {list(e.type.shape)} tile in a {list(tm.layout.shape)} value", e.span)
            if math.prod(e.type.shape) == 1:
                return self.ex(e, 0, self.tilemap(inner), loads, top)
            keep = unit_keep(tuple(e.type.shape), tuple(tm.layout.shape))
            if keep is None:
                keep = broadcast_keep(tuple(e.type.shape), tuple(tm.layout.shape))
            return self._sliced(e, i, tm, loads, keep)

        def temp(node) -> str | None:
            hit = loads.get((id(node), tm.layout))
            if hit is None:
                return None
            name, computed = hit
            return f"{name}[{i}]" if computed else to_compute(dt, f"{name}[{i}]")

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
            if pos is None and equivalent(lay, tm.layout):
                return to_compute(dt, f"{self.local(e.name)}[{i}]")
            if pos is None and (hit := temp(e)) is not None:
                return hit
            raise unsupported(f"register tile '{e.name}' in a value with another layout", e.span)
        if isinstance(e, ir.Load):
            hit = temp(e)
            if hit is None:
                raise unsupported("a load read in a layout it was not loaded in", e.span)
            return hit
        if isinstance(e, ir.Full):
            if isinstance(e.value, ir.Const) and isinstance(e.value.value, (int, float)):
                # narrow floats compute in f32: an f32 literal (inf and nan spelled as bit patterns)
                return literal(e.value.value, DTYPES["f32"] if is_narrow_float(dt) else dt)
            return f"(({compute_type(dt)})({self.sx(e.value)}))"
        if isinstance(e, ir.Arange):
            return f"({pos if pos is not None else tm.col(i)})"
        if isinstance(e, ir.Tag):
            return self.ex(e.x, i, tm, loads, top, pos)
        if isinstance(e, ir.Reshape):
            return self.broadcast(e, i, tm, loads, pos)
        if isinstance(e, ir.Transpose):
            return self.ex(e.x, i, self.tilemap(transposed_layout(tm.layout)), loads, top, pos)
        if isinstance(e, ir.Reduce):
            hit = loads.get((id(e), tm.layout))
            if hit is None:
                raise unsupported("a reduction read where its result is not held", e.span)
            name, _ = hit
            return f"{name}[{i}]"
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

    @staticmethod
    def broadcasts(e: ir.Expr, lay: ir.RegLayout) -> bool:
        """`e` is read in a value of more elements held in `lay`: a vector in a 2-D value, or one element.
        (A [1, n] or [n, 1] part of a 2-D value is read at the value's slots: its x[None, :] / x[:, None]
        does the slicing.)"""
        shape = tuple(e.type.shape)
        if shape == tuple(lay.shape):
            return False
        if len(shape) < len(lay.shape):
            return True
        elementwise = (ir.Reshape, ir.Bin, ir.Un, ir.Cmp, ir.Select, ir.Math, ir.Tag)
        return (math.prod(shape) == 1 or unit_keep(shape, tuple(lay.shape)) is not None) and \
            not isinstance(e, elementwise)

    def broadcast_layout(self, shape: tuple[int, ...], lay: ir.RegLayout) -> ir.RegLayout | None:
        """The layout a tile of `shape` is read in when it broadcasts into a value held in `lay`: one
        element is held by every thread; a vector by the slice of `lay` along its axis."""
        if math.prod(shape) == 1:
            return ir.RegLayout("blocked", (1,), lay.threads, None, 1)
        unit = unit_keep(tuple(shape), tuple(lay.shape))
        if unit is not None:
            return unit_layout(lay, unit)
        keep = broadcast_keep(tuple(shape), tuple(lay.shape))
        return slice_layout(lay, keep) if keep is not None else None

    def _sliced(self, e: ir.Expr, i, tm: TileMap, loads: dict, keep: int) -> str:
        """A vector `e` ([n], or [R, 1] / [1, C]) read by slot i of a 2-D tile it is broadcast into (along
        axis `keep`): its value in the slice of the tile's layout, at the slice slot holding slot i's index."""
        plan = reduction_plan(tm.layout, 1 - keep)
        inner = self.broadcast_layout(tuple(e.type.shape), tm.layout) if len(e.type.shape) == 2 else \
            slice_layout(tm.layout, keep)
        return self.ex(e, render_layout(plan.slot_map, i), self.tilemap(inner), loads)

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

    def broadcast(self, e: ir.Reshape, i: str | int, tm: TileMap, loads: dict, pos) -> str:
        """x[:, None] / x[None, :] read by slot i of a 2-D tile: the vector's value for the slot's row /
        column, from the slice of the tile's layout (its slot map); an index tile (arange arithmetic)
        is evaluated at the slot's row / column instead."""
        src, dst = e.x.type.shape, e.type.shape
        keep = broadcast_keep(tuple(src), tuple(dst))
        if keep is None or pos is not None or len(tm.layout.shape) != 2:
            raise unsupported(f"reshape {list(src)} -> {list(dst)} of a register tile", e.span,
                              "x[:, None] and x[None, :] of a 1-D tile are supported")
        if self.index_pure(e.x):
            return self.ex(e.x, i, tm, loads, pos=tm.row(i) if keep == 0 else tm.col(i))
        return self._sliced(e.x, i, tm, loads, keep)

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
            return wrap_narrow(e.type.dtype, self.binop(e.op, self.sx(e.a), self.sx(e.b), e.type.dtype, nonneg))
        if isinstance(e, ir.Un):
            return wrap_narrow(e.type.dtype, self.unop(e.op, self.sx(e.a)))
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
        if op == "not":
            return f"(!{a})"
        # -(-2.0f) must not read as the decrement --2.0f
        return f"({op}({a}))" if a.startswith(("-", "+")) else f"({op}{a})"

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
                 "tanh": "tanhf" if f32 else "tanh", "erf": "erff" if f32 else "erf",
                 "abs": "fabsf" if f32 else ("fabs" if dt.is_float else "abs")}
        if fn == "abs" and dt.kind == "uint":
            return f"({args[0]})"  # |x| of an unsigned value is x (CUDA's abs has no unsigned overload)
        if fn in ("sigmoid", "silu", "gelu"):
            self.features.add("activations")
            return f"ag_{fn}(({ct})({args[0]}))"
        if fn not in table:
            raise unsupported(f"{fn}()", None)
        return f"{table[fn]}({args[0]})"
