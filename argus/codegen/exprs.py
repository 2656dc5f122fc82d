"""Expressions in generated code: scalars, and elementwise register-tile values one slot at a time.

Integer `//` and `%` keep Python's floor semantics (ag_floordiv / ag_floormod) unless both operands
are provably non-negative, when C's truncating operators agree and are cheaper. Narrow floats (bf16,
f16, fp8) are computed in float and rounded after every operation, as the interpreter rounds them.
`Expressions` is mixed into the Emitter (argus/codegen/emit.py), whose scope and names it reads.
"""

from __future__ import annotations

from argus.codegen import memory
from argus.codegen.cexpr import compute_type, ctype, from_compute, is_narrow_float, literal, to_compute
from argus.codegen.errors import unsupported
from argus.codegen.tiles import TileMap
from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir


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
        """Emit nested loads of `e` into temporaries; returns id(Load) -> temporary."""
        out: dict[int, str] = {}
        for x in sub_exprs(e):
            if isinstance(x, ir.Load) and id(x) not in out:
                t = self.tmp("ld")
                self.line(f"{ctype(x.type.dtype)} {t}[{tm.slots}];")
                memory.load_into(self, t, x, tm)
                out[id(x)] = t
        return out

    def ex(self, e: ir.Expr, i: str, tm: TileMap, loads: dict[int, str], top: bool = False) -> str:
        """Element `i` of tile expression `e` (in its compute type), or a scalar broadcast."""
        if not isinstance(e.type, TileT):
            return self.sx(e)
        dt = e.type.dtype

        def rounded(x: str) -> str:
            if top or not is_narrow_float(dt):
                return x
            return to_compute(dt, from_compute(dt, x))

        if isinstance(e, ir.Var):
            lay = self.scope.layout(e.name)
            if lay is None:
                raise unsupported(f"register tile '{e.name}' here (no layout)", e.span)
            if lay != tm.layout:
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
            return f"({tm.col(i)})"
        if isinstance(e, ir.Tag):
            return self.ex(e.x, i, tm, loads, top)
        if isinstance(e, ir.Bin):
            a, b = self.ex(e.a, i, tm, loads), self.ex(e.b, i, tm, loads)
            return rounded(self.binop(e.op, a, b, dt, nonneg=False))
        if isinstance(e, ir.Un):
            return rounded(self.unop(e.op, self.ex(e.a, i, tm, loads)))
        if isinstance(e, ir.Cmp):
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({self.ex(e.a, i, tm, loads)} {op} {self.ex(e.b, i, tm, loads)})"
        if isinstance(e, ir.Select):
            c, a, b = (self.ex(x, i, tm, loads) for x in (e.cond, e.a, e.b))
            return f"({c} ? {a} : {b})"
        if isinstance(e, ir.Math):
            args = [self.ex(a, i, tm, loads) for a in e.args]
            if e.fn == "cast":
                src = e.args[0].type.dtype
                if dt.is_float or src.is_float:
                    return rounded(f"(({compute_type(dt)})({args[0]}))")
                return f"(({compute_type(dt)})({args[0]}))"
            return rounded(self.math(e.fn, args, dt, nonneg=False))
        raise unsupported(f"{type(e).__name__.lower()} on register tiles", e.span)

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
        table = {"exp": "expf" if f32 else "exp", "exp2": "exp2f" if f32 else "exp2",
                 "log": "logf" if f32 else "log", "log2": "log2f" if f32 else "log2",
                 "sqrt": "sqrtf" if f32 else "sqrt", "rsqrt": "rsqrtf" if f32 else "rsqrt",
                 "abs": "fabsf" if f32 else ("fabs" if dt.is_float else "abs")}
        if fn not in table:
            raise unsupported(f"{fn}()", None)
        return f"{table[fn]}({args[0]})"
