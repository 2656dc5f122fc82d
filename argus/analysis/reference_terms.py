"""The `reference:` block as data flow: each output element's term (argus.analysis.terms).

An abstract interpreter over the same AST that argus.dsl.reference evaluates in float64. Arrays are
symbolic: a shape (ints or z3 dims) and a function from an element index (z3 integers) to its term.
Tensor arguments are atoms; arithmetic is pointwise Op terms with NumPy broadcasting; `@`, `einsum`,
`sum/max/min/mean(axis=)` and softmax are reductions over fresh bound variables; slicing, `None`,
`.T`, `transpose`, `swapaxes`, `reshape` that splits or merges axes and `repeat` are index maps;
`causal_mask`, `tril`, `triu`, `where` on position conditions are selects; integer tensors used as
indices (`Ys[pos]`, `Wg[We]`) read their contents as uninterpreted functions, as the executor does for
scalar loads. Arrays computed from positions alone (`arange`, comparisons of them) also carry their
value, so they can act as masks and indices.

`topk` is a reduction over its line whose chosen coordinate is an uninterpreted function, which
`take_along_axis` reads at. What it cannot describe (`one_hot`, `where` on data used as an index, a
reshape it cannot map) becomes an Opaque term with the reason: a check that needs it is unknown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import Context, as_int, solver
from argus.dsl import ast
from argus.ir import nodes as ir


class NotAnalysable(Exception):
    """The reference uses something this interpreter does not describe (the contract is unknown)."""

    def __init__(self, message: str, span=None):
        super().__init__(message)
        self.span = span


@dataclass(frozen=True)
class Arr:
    """A symbolic array: element idx -> term, and for position-computed arrays idx -> z3 value."""

    shape: tuple
    elem: Callable[[tuple], T.Term]
    value: Callable[[tuple], object] | None = None
    # a data-dependent index (topk's choice): element idx -> the chosen coordinate as an uninterpreted
    # function of idx. Not a `value`: a where() on it is data, never a position mask.
    choice: Callable[[tuple], object] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _truth(v) -> z3.BoolRef:
    """A position value as a where() condition: numbers are true where nonzero (where(tril(ones(...)), ...))."""
    if isinstance(v, bool) or z3.is_bool(v):
        return T.zb(v)
    return as_int(v) != 0


def _is_one(n) -> bool:
    return isinstance(n, int) and n == 1


def _same(a, b, facts: list | None = None) -> bool:
    """Are two sizes equal: literally, or provably under the kernel's assumptions (H == HKV * GROUP)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if not isinstance(a, int) and not isinstance(b, int) and z3.eq(z3.simplify(as_int(a)), z3.simplify(as_int(b))):
        return True
    if facts is None:
        return False
    s = solver(2000)
    s.add(*facts, as_int(a) != as_int(b))
    return s.check() == z3.unsat


class ReferenceTerms:
    def __init__(self, kernel: ir.Kernel, ctx: Context):
        self.k = kernel
        self.ctx = ctx
        self.fresh = 0
        self.env: dict[str, object] = {}
        for t in kernel.tensors:
            self.env[t.name] = self._tensor(t)
        self.env.update(ctx.dims)
        self.env.update(kernel.param_dict)
        for s in kernel.scalars:
            # an integer argument is the kernel's own symbol (a bound in `arange(N) < n_valid`, an offset):
            # the reference's masks and indices then use the value the kernel's do; a float one is a value
            sym = ctx.scalars.get(s.name)
            self.env[s.name] = sym if sym is not None and z3.is_int(sym) else ("scalar", s.name)
        self.env["inf"] = math.inf
        self.env["pi"] = math.pi

    # ---- leaves ----
    def _tensor(self, t: ir.TensorDecl) -> Arr:
        shape = tuple(d if isinstance(d, int) else self.ctx.dims[d] for d in t.dims)
        name, dtype = t.name, t.dtype

        def elem(idx):
            return T.atom(name, idx, True)
        value = None
        if not dtype.is_float:
            def value(idx):  # integer tensors index others: their contents, as the executor reads them
                return self.ctx.tensor_value(name, dtype, tuple(as_int(i) for i in idx))
        return Arr(shape, elem, value)

    def var(self, prefix: str) -> z3.ArithRef:
        self.fresh += 1
        return z3.Int(f"ref_{prefix}{self.fresh}")

    # ---- the block ----
    def run(self, stmts: tuple[ast.Stmt, ...]) -> dict[str, object]:
        for s in stmts:
            if not isinstance(s, ast.Assign):
                raise NotAnalysable("only assignments", s.span)
            v = self.eval(s.value)
            if len(s.targets) == 1:
                self.env[s.targets[0].id] = v
            else:
                for t, x in zip(s.targets, v):
                    self.env[t.id] = x
        return self.env

    def eval(self, e: ast.Expr):
        m = getattr(self, "_" + type(e).__name__, None)
        if m is None:
            raise NotAnalysable(f"{type(e).__name__} in a reference block", e.span)
        return m(e)

    def _Const(self, e: ast.Const):
        return e.value

    def _Name(self, e: ast.Name):
        if e.id not in self.env:
            raise NotAnalysable(f"undefined name '{e.id}'", e.span)
        return self.env[e.id]

    def _TupleExpr(self, e: ast.TupleExpr):
        return tuple(self.eval(x) for x in e.elts)

    def _IfExp(self, e: ast.IfExp):
        c = self.eval(e.cond)
        if isinstance(c, (bool, int)):
            return self.eval(e.then) if c else self.eval(e.orelse)
        raise NotAnalysable("a conditional expression on runtime values", e.span)

    def _UnaryOp(self, e: ast.UnaryOp):
        v = self.eval(e.operand)
        if e.op == "-":
            if isinstance(v, Arr):
                return self.pointwise("neg", [v], lambda a: -a)
            return -v if not isinstance(v, tuple) else ("scalar", "-" + v[1])
        if e.op == "not":
            if isinstance(v, Arr):
                return self.pointwise("not", [v], lambda a: z3.Not(T.zb(a)))
            return not v
        raise NotAnalysable(f"unary {e.op}", e.span)

    def _BoolOp(self, e: ast.BoolOp):
        a, b = self.eval(e.left), self.eval(e.right)
        if isinstance(a, Arr) or isinstance(b, Arr):
            f = z3.And if e.op == "and" else z3.Or
            return self.pointwise(e.op, [self.arr(a), self.arr(b)], lambda x, y: f(T.zb(x), T.zb(y)))
        if isinstance(a, bool) and isinstance(b, bool):
            return (a and b) if e.op == "and" else (a or b)
        raise NotAnalysable(f"'{e.op}' on runtime values", e.span)

    def _Compare(self, e: ast.Compare):
        a, b = self.eval(e.left), self.eval(e.right)
        ops = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, "<": lambda x, y: x < y,
               "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}
        f = ops[e.op]
        if isinstance(a, Arr) or isinstance(b, Arr):
            return self.pointwise("cmp", [self.arr(a), self.arr(b)], lambda x, y: f(as_int(x), as_int(y)))
        if _plain(a) and _plain(b):
            return f(a, b)
        return f(_num(a), _num(b))

    def _BinOp(self, e: ast.BinOp):
        a, b = self.eval(e.left), self.eval(e.right)
        if e.op == "@":
            return self.matmul(self.arr(a), self.arr(b), e.span)
        if e.op in ("&", "|", "^"):
            # elementwise logic of masks (numpy's & | ^ on booleans): a predicate when both sides are
            name = {"&": "and", "|": "or", "^": "xor"}[e.op]
            f = {"&": z3.And, "|": z3.Or, "^": z3.Xor}[e.op]
            if isinstance(a, Arr) or isinstance(b, Arr):
                arrs = [self.arr(a), self.arr(b)]
                # a positional predicate only when both sides are masks (on integers & is bitwise)
                masks = all(_is_mask(x) for x in arrs)
                if masks:
                    return self.pointwise(name, arrs, lambda x, y: f(T.zb(x), T.zb(y)))
                gated = self._mask_and_data(arrs) if e.op == "&" else None
                return gated if gated is not None else self.pointwise(name, arrs)
            if isinstance(a, bool) and isinstance(b, bool):
                return {"&": a and b, "|": a or b, "^": a != b}[e.op]
            raise NotAnalysable(f"'{e.op}' on runtime values", e.span)
        if isinstance(a, Arr) or isinstance(b, Arr):
            fn = {"+": "+", "-": "-", "*": "*", "/": "/", "//": "floordiv", "%": "mod", "**": "pow"}[e.op]
            vf = {"+": lambda x, y: as_int(x) + as_int(y), "-": lambda x, y: as_int(x) - as_int(y),
                  "*": lambda x, y: as_int(x) * as_int(y), "//": lambda x, y: as_int(x) / as_int(y),
                  "%": lambda x, y: as_int(x) % as_int(y)}.get(e.op)
            return self.pointwise(fn, [self.arr(a), self.arr(b)], vf)
        return _scalar_op(e.op, a, b, e.span)

    def _Attribute(self, e: ast.Attribute):
        v = self.eval(e.value)
        if e.attr == "T":
            a = self.arr(v)
            return self.permute(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))
        if e.attr == "shape":
            return self.arr(v).shape
        raise NotAnalysable(f"attribute .{e.attr}", e.span)

    def _Subscript(self, e: ast.Subscript):
        base = self.eval(e.value)
        if isinstance(base, tuple):  # x.shape[0]
            (i,) = e.items
            return base[self.eval(i)]
        return self.index(self.arr(base), e.items, e.span)

    def _Call(self, e: ast.Call):
        name = e.func_name or ""
        args = [self.eval(a) for a in e.args]
        kwargs = {k.name: self.eval(k.value) for k in e.kwargs}
        f = getattr(self, "fn_" + name, None)
        if f is None:
            return self.opaque_array(args, f"{name}() is not analysed for data flow", e.span)
        return f(*args, span=e.span, **kwargs)

    # ---- arrays ----
    def arr(self, v) -> Arr:
        if isinstance(v, Arr):
            return v
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "scalar":
            return Arr((), lambda idx: T.VALUE)
        if isinstance(v, (bool, int, float)) or isinstance(v, z3.ExprRef):
            lit = T.lit_for(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else T.VALUE
            # a constant compared with position-computed values (in_split > 0.5) keeps them a mask
            known = (isinstance(v, float) and math.isfinite(v)) or isinstance(v, (bool, int)) or \
                (isinstance(v, z3.ExprRef) and (z3.is_int(v) or z3.is_bool(v)))
            const = z3.RealVal(v) if isinstance(v, float) and known else v
            return Arr((), lambda idx: lit, (lambda idx: const) if known else None)
        raise NotAnalysable(f"{type(v).__name__} where an array was expected")

    def broadcast(self, arrs: list[Arr]) -> tuple:
        n = max(a.ndim for a in arrs)
        shape = []
        for d in range(n):
            sizes = [a.shape[a.ndim - n + d] for a in arrs if a.ndim - n + d >= 0]
            big = [s for s in sizes if not _is_one(s)]
            if not big:
                shape.append(1)
                continue
            if any(not _same(big[0], s, self.ctx.constraints) for s in big[1:]):
                raise NotAnalysable(f"cannot broadcast sizes {sizes} (are they the same runtime dimension?)")
            shape.append(big[0])
        return tuple(shape)

    @staticmethod
    def sub(a: Arr, idx: tuple) -> tuple:
        n = len(idx)
        off = n - a.ndim
        return tuple(0 if _is_one(s) else idx[off + k] for k, s in enumerate(a.shape))

    def pointwise(self, fn: str, arrs: list[Arr], vf=None) -> Arr:
        shape = self.broadcast(arrs)

        def elem(idx):
            ts = [a.elem(self.sub(a, idx)) for a in arrs]
            if fn in ("cmp", "and", "or", "not", "floordiv", "mod"):
                return T.op(fn, *ts)
            return T.op(fn, *ts)
        value = None
        if vf is not None and all(a.value is not None for a in arrs):
            def value(idx):
                return vf(*[a.value(self.sub(a, idx)) for a in arrs])
        return Arr(shape, elem, value)

    def unary(self, fn: str, x) -> Arr:
        a = self.arr(x)
        return Arr(a.shape, lambda idx: T.op(fn, a.elem(idx)))

    def permute(self, a: Arr, perm: tuple[int, ...]) -> Arr:
        shape = tuple(a.shape[p] for p in perm)

        def src(idx):
            out = [None] * a.ndim
            for k, p in enumerate(perm):
                out[p] = idx[k]
            return tuple(out)
        value = (lambda idx: a.value(src(idx))) if a.value is not None else None
        return Arr(shape, lambda idx: a.elem(src(idx)), value)

    def reduce(self, kind: str, a: Arr, axis, keepdims: bool = False, site: str = "") -> Arr:
        if axis is None:
            axes = tuple(range(a.ndim))
        else:
            axes = tuple(sorted(ax % a.ndim for ax in (axis if isinstance(axis, tuple) else (axis,))))
        keep = [d for d in range(a.ndim) if d not in axes]
        shape = tuple(1 if d in axes else a.shape[d] for d in range(a.ndim)) if keepdims else \
            tuple(a.shape[d] for d in keep)

        def elem(idx):
            vs = [self.var(kind) for _ in axes]
            full, it, vit = [], iter(idx), iter(vs)
            for d in range(a.ndim):
                if d in axes:
                    full.append(next(vit))
                    if keepdims:
                        next(it)
                else:
                    full.append(next(it))
            dom = z3.And(*[z3.And(v >= 0, v < as_int(a.shape[d])) for v, d in zip(vs, axes)])
            return T.red(kind, tuple(vs), dom, a.elem(tuple(full)), site or f"{kind}(axis={axis})")
        return Arr(shape, elem)

    def matmul(self, a: Arr, b: Arr, span=None) -> Arr:
        if a.ndim == 0 or b.ndim == 0:
            raise NotAnalysable("matmul of a scalar", span)
        if a.ndim == 1 or b.ndim == 1:  # NumPy: a vector is a row (left) or a column (right), then dropped
            a2 = a if a.ndim > 1 else Arr((1,) + a.shape, lambda idx, a=a: a.elem(idx[1:]))
            b2 = b if b.ndim > 1 else Arr(b.shape + (1,), lambda idx, b=b: b.elem(idx[:-1]))
            r = self.matmul(a2, b2, span)
            drop = ([r.ndim - 2] if a.ndim == 1 else []) + ([r.ndim - 1] if b.ndim == 1 else [])

            def elem(idx, r=r, drop=drop):
                full = list(idx)
                for d in drop:
                    full.insert(d, z3.IntVal(0))
                return r.elem(tuple(full))
            return Arr(tuple(n for d, n in enumerate(r.shape) if d not in drop), elem)
        batch = self.broadcast([Arr(a.shape[:-2], a.elem), Arr(b.shape[:-2], b.elem)])
        n = a.shape[-1]
        shape = batch + (a.shape[-2], b.shape[-1])

        def elem(idx):
            k = self.var("k")
            bi = idx[:-2]
            ai = tuple(self.sub(Arr(a.shape[:-2], a.elem), bi)) + (idx[-2], k)
            bj = tuple(self.sub(Arr(b.shape[:-2], b.elem), bi)) + (k, idx[-1])
            return T.red("sum", (k,), z3.And(k >= 0, k < as_int(n)), T.op("*", a.elem(ai), b.elem(bj)), "matmul")
        return Arr(shape, elem)

    def index(self, a: Arr, items, span) -> Arr:
        """NumPy basic indexing (ints, slices, None) and integer-array gathers (the array's contents as
        coordinates)."""
        items = list(items)
        n_real = sum(1 for i in items if not (isinstance(i, ast.Const) and i.value is None))
        if n_real > a.ndim:
            raise NotAnalysable("too many indices", span)
        items += [ast.Slice(span, None, None, None)] * (a.ndim - n_real)
        plan = []  # per item: ("new",) | ("int", v) | ("slice", start, size) | ("gather", Arr)
        for it in items:
            if isinstance(it, ast.Const) and it.value is None:
                plan.append(("new",))
            elif isinstance(it, ast.Slice):
                plan.append(None)  # filled below once the axis is known
            else:
                v = self.eval(it)
                if isinstance(v, Arr):
                    if v.value is None:
                        raise NotAnalysable("an index array computed from data", span)
                    plan.append(("gather", v))
                else:
                    plan.append(("int", v))
        out_shape, axis = [], 0
        gathers = [p for p in plan if p and p[0] == "gather"]
        gshape = self.broadcast([g[1] for g in gathers]) if gathers else ()
        placed_gather = False
        for k, it in enumerate(items):
            p = plan[k]
            if p and p[0] == "new":
                out_shape.append(1)
                continue
            size = a.shape[axis]
            if p is None:
                start, stop = it.start, it.stop
                s0 = 0 if start is None else self.eval(start)
                ln = None if it.length is None else self.eval(it.length)
                # X[a : +n] is X[a : a + n], as the float64 evaluator reads it
                s1 = (size if stop is None else self.eval(stop)) if ln is None else _scalar_op("+", s0, ln, span)
                from_end = (isinstance(s0, int) and s0 < 0, isinstance(s1, int) and s1 < 0)
                if from_end[0]:  # NumPy: a negative bound counts from the end
                    s0 = _scalar_op("+", size, s0, span)
                if from_end[1]:
                    s1 = _scalar_op("+", size, s1, span)
                if _plain(s0) and _plain(s1) and _plain(size):  # NumPy clamps both bounds into the axis
                    s0, s1 = min(max(s0, 0), size), min(max(s1, 0), size)
                    ext = max(s1, s0) - s0
                else:  # runtime sizes: the bounds must stay inside, or NumPy's clamp would change the shape
                    self._inside(s0, 0, size, span)
                    self._inside(s1, s0, size, span)
                    # a length keeps its own term (shapes compare as terms) when both bounds count the same way
                    ext = ln if ln is not None and from_end[0] == from_end[1] else _scalar_op("-", s1, s0, span)
                plan[k] = ("slice", s0, ext)
                out_shape.append(ext)
            elif p[0] == "gather":
                if not placed_gather:
                    out_shape.extend(gshape)
                    placed_gather = True
            axis += 1
        shape = tuple(out_shape)

        def src(idx):
            out, i = [], 0
            gidx = None
            for p in plan:
                if p[0] == "new":
                    i += 1
                elif p[0] == "int":
                    out.append(as_int(p[1]) if not isinstance(p[1], int) else p[1])
                elif p[0] == "slice":
                    out.append(as_int(p[1]) + idx[i] if not (isinstance(p[1], int) and p[1] == 0) else idx[i])
                    i += 1
                else:
                    if gidx is None:
                        gidx = tuple(idx[i:i + len(gshape)])
                        i += len(gshape)
                    g = p[1]
                    out.append(g.value(self.sub(g, gidx)))
            return tuple(out)
        value = (lambda idx: a.value(src(idx))) if a.value is not None else None
        return Arr(shape, lambda idx: a.elem(src(idx)), value)

    def _inside(self, v, lo, hi, span) -> None:
        """lo <= v <= hi under the kernel's constraints (dims' ranges, its assumes), or not analysable: a
        slice bound past its axis is clamped by NumPy, which the terms would not follow."""
        if _plain(v) and _plain(lo) and _plain(hi):
            if lo <= v <= hi:
                return
        elif not any(isinstance(x, (tuple, float)) for x in (v, lo, hi)):
            gaps = [z3.simplify(as_int(b) - as_int(a)) for a, b in ((lo, v), (v, hi))]
            if all(z3.is_int_value(g) and g.as_long() >= 0 for g in gaps):  # X[:, 1:N], X[:, :N - 1]
                return
            s = solver(2000)
            s.add(*self.ctx.constraints, z3.Not(z3.And(as_int(lo) <= as_int(v), as_int(v) <= as_int(hi))))
            if s.check() == z3.unsat:
                return
        raise NotAnalysable(f"a slice bound that may fall outside its axis (NumPy clamps it there; {v} not "
                            f"provably within {lo}..{hi}: assume the dims that keep it inside)", span)

    def opaque_array(self, args, reason: str, span) -> Arr:
        shapes = [x.shape for x in args if isinstance(x, Arr)]
        shape = shapes[0] if shapes else ()
        t = T.opaque(reason, span)
        return Arr(shape, lambda idx: t)

    # ---- functions (the names argus.dsl.reference allows) ----
    def fn_exp(self, x, span=None):
        return self.unary("exp", x)

    def fn_exp2(self, x, span=None):
        return self.unary("exp2", x)

    def fn_log(self, x, span=None):
        return self.unary("log", x) if isinstance(x, Arr) else ("scalar", "log")

    def fn_log2(self, x, span=None):
        return self.unary("log2", x) if isinstance(x, Arr) else ("scalar", "log2")

    def fn_rsqrt(self, x, span=None):
        if isinstance(x, Arr):
            return self.unary("rsqrt", x)
        if isinstance(x, (int, float)):
            return 1.0 / math.sqrt(x)
        return ("scalar", "rsqrt")

    def fn_sqrt(self, x, span=None):
        if isinstance(x, Arr):
            return self.unary("sqrt", x)
        if isinstance(x, (int, float)):
            return math.sqrt(x)
        return ("scalar", "sqrt")

    def fn_abs(self, x, span=None):
        a = self.arr(x)
        out = self.unary("abs", a)
        if a.value is not None:  # |i - j| of positions stays a position (a band mask compares it)
            def value(idx):
                v = as_int(a.value(idx))
                return z3.If(v < 0, -v, v)
            return Arr(out.shape, out.elem, value)
        return out

    def fn_tanh(self, x, span=None):
        return self.unary("tanh", x)

    def fn_silu(self, x, span=None):
        return self.unary("silu", x)

    def fn_sigmoid(self, x, span=None):
        return self.unary("sigmoid", x)

    def fn_erf(self, x, span=None):
        return self.unary("erf", x)

    def fn_gelu(self, x, span=None):
        return self.unary("gelu", x)

    def fn_argmax(self, x, axis=None, span=None):
        return self.reduce("argmax", self.arr(x), axis)

    def fn_float(self, x, span=None):
        return float(x) if isinstance(x, (int, float)) else ("scalar", "float")

    def fn_int(self, x, span=None):
        return int(x) if isinstance(x, (int, float)) else x

    def fn_max(self, x, axis=None, keepdims=False, span=None):
        return self.reduce("max", self.arr(x), axis, keepdims)

    def fn_min(self, x, axis=None, keepdims=False, span=None):
        return self.reduce("min", self.arr(x), axis, keepdims)

    def fn_sum(self, x, axis=None, keepdims=False, span=None):
        return self.reduce("sum", self.arr(x), axis, keepdims)

    def fn_mean(self, x, axis=None, keepdims=False, span=None):
        return self.reduce("sum", self.arr(x), axis, keepdims)  # a mean is a scaled sum: same data flow

    def fn_maximum(self, a, b, span=None):
        return self.pointwise("max", [self.arr(a), self.arr(b)], lambda x, y: _pick(x, y, False))

    def fn_minimum(self, a, b, span=None):
        # of positions too: a clamped index (X[minimum(i, N - 1)]) is still an index computed from positions
        return self.pointwise("min", [self.arr(a), self.arr(b)], lambda x, y: _pick(x, y, True))

    def _mask_and_data(self, arrs: list) -> Arr | None:
        """`mask & cond` with one side a predicate on values (positions, an integer tensor's contents) and
        the other a condition on data: false wherever the mask is, the data condition elsewhere -- the
        executor's rule for the same `&` in a kernel (argus.analysis.tiles), so both sides agree that
        the mask's tensor is read as a value, not as data."""
        kinds = [_is_mask(x) for x in arrs]
        if kinds.count(True) != 1 or any(x.value is not None for x, m in zip(arrs, kinds) if not m):
            return None
        mask, data = (arrs[0], arrs[1]) if kinds[0] else (arrs[1], arrs[0])

        def elem(idx):
            return T.sel(T.zb(mask.value(self.sub(mask, idx))), data.elem(self.sub(data, idx)), T.ZERO)
        return Arr(self.broadcast(arrs), elem)

    def fn_where(self, c, a, b, span=None):
        c, a, b = self.arr(c), self.arr(a), self.arr(b)
        shape = self.broadcast([c, a, b])
        if c.value is None:
            def delem(idx):
                ct, guard = c.elem(self.sub(c, idx)), []
                while isinstance(ct, T.Sel) and isinstance(ct.b, T.Lit) and ct.b.kind == "zero":
                    guard.append(ct.cond)  # a data condition under a mask (false outside it), as in kernels
                    ct = ct.a
                tb = b.elem(self.sub(b, idx))
                inner = T.op("select", ct, a.elem(self.sub(a, idx)), tb)
                return T.sel(z3.And(*[T.zb(g) for g in guard]), inner, tb) if guard else inner
            return Arr(shape, delem)

        def elem(idx):
            ct = c.elem(self.sub(c, idx))
            if _summed_data(ct):  # a condition on contents a sum runs over (a count): data, as in kernels
                return T.op("select", ct, a.elem(self.sub(a, idx)), b.elem(self.sub(b, idx)))
            return T.sel(_truth(c.value(self.sub(c, idx))), a.elem(self.sub(a, idx)), b.elem(self.sub(b, idx)))
        return Arr(shape, elem)

    def fn_transpose(self, x, axes=None, span=None):
        a = self.arr(x)
        perm = tuple(axes) if axes is not None else tuple(reversed(range(a.ndim)))
        return self.permute(a, perm)

    def fn_swapaxes(self, x, a1, a2, span=None):
        a = self.arr(x)
        perm = list(range(a.ndim))
        a1, a2 = a1 % a.ndim, a2 % a.ndim
        perm[a1], perm[a2] = perm[a2], perm[a1]
        return self.permute(a, tuple(perm))

    def fn_reshape(self, x, shape, span=None):
        a = self.arr(x)
        shape = tuple(shape) if isinstance(shape, tuple) else (shape,)
        return self._reshape(a, shape, span)

    def _reshape(self, a: Arr, shape: tuple, span) -> Arr:
        """Reshapes that only insert / drop unit axes, or split / merge axes with concrete sizes. A position
        array stays one (reshape(arange(S), (S, 1)) > arange(S) is a mask, as arange(S)[:, None] is)."""
        src = [s for s in a.shape if not _is_one(s)]
        dst = [s for s in shape if not _is_one(s)]
        if len(src) == len(dst) and all(_same(x, y, self.ctx.constraints) for x, y in zip(src, dst)):
            def where(idx):
                it = iter([i for i, s in zip(idx, shape) if not _is_one(s)])
                return tuple(0 if _is_one(s) else next(it) for s in a.shape)
        elif all(isinstance(s, int) for s in a.shape) and all(isinstance(s, int) for s in shape):
            def where(idx):
                flat = z3.IntVal(0)
                for i, s in zip(idx, shape):
                    flat = flat * s + as_int(i)
                full = []
                for s in reversed(a.shape):
                    full.append(flat % s)
                    flat = flat / s
                return tuple(reversed(full))
        else:
            raise NotAnalysable("a reshape of runtime-sized axes other than inserting unit axes", span)
        value = (lambda idx: a.value(where(idx))) if a.value is not None else None
        return Arr(tuple(shape), lambda idx: a.elem(where(idx)), value)

    def fn_arange(self, n, span=None):
        return Arr((n,), lambda idx: T.VALUE, lambda idx: idx[0])

    def fn_zeros(self, shape, span=None):
        return self._full(shape, T.ZERO, 0)

    def fn_ones(self, shape, span=None):
        return self._full(shape, T.VALUE, 1)

    def fn_full(self, shape, value, span=None):
        return self._full(shape, T.lit_for(value) if isinstance(value, (int, float)) else T.VALUE,
                          value if isinstance(value, int) else None)

    def _full(self, shape, lit, value) -> Arr:
        shape = tuple(shape) if isinstance(shape, tuple) else (shape,)
        return Arr(shape, lambda idx: lit, (lambda idx: value) if value is not None else None)

    def fn_softmax(self, x, axis=-1, span=None):
        a = self.arr(x)
        ax = axis % a.ndim
        mx = self.reduce("max", a, ax, keepdims=True, site="softmax max")
        e = self.pointwise("exp", [self.pointwise("-", [a, mx])])
        e = Arr(e.shape, lambda idx: T.op("exp", T.op("-", a.elem(idx), mx.elem(self.sub(mx, idx)))))
        s = self.reduce("sum", e, ax, keepdims=True, site="softmax sum")
        return self.pointwise("/", [e, s])

    def fn_repeat(self, x, reps, axis=None, span=None):
        a = self.arr(x)
        if axis is None or not isinstance(reps, int) and not isinstance(reps, z3.ExprRef):
            raise NotAnalysable("repeat without an axis or with per-element counts", span)
        ax = axis % a.ndim
        shape = tuple(_scalar_op("*", s, reps, span) if d == ax else s for d, s in enumerate(a.shape))

        def src(idx):
            return tuple(as_int(i) / as_int(reps) if d == ax else i for d, i in enumerate(idx))
        return Arr(shape, lambda idx: a.elem(src(idx)), (lambda idx: a.value(src(idx))) if a.value else None)

    def fn_concatenate(self, parts, axis=0, span=None):
        """Arrays joined along `axis`: an element is the part whose range along the axis holds its
        coordinate there (a select on the position), read at the coordinate less the part's start."""
        if not isinstance(parts, tuple) or not parts:
            raise NotAnalysable("concatenate of something other than a tuple of arrays", span)
        arrs = [self.arr(x) for x in parts]
        nd = arrs[0].ndim
        if any(a.ndim != nd for a in arrs) or not isinstance(axis, int):
            raise NotAnalysable("concatenate of arrays of different ranks (or a computed axis)", span)
        ax = axis % nd
        starts, total = [], 0
        for a in arrs:
            starts.append(total)
            total = _scalar_op("+", total, a.shape[ax], span)
        shape = tuple(total if d == ax else n for d, n in enumerate(arrs[0].shape))

        def at(a: Arr, start, idx):
            return tuple(as_int(i) - as_int(start) if d == ax else i for d, i in enumerate(idx))

        def elem(idx):
            out = arrs[-1].elem(at(arrs[-1], starts[-1], idx))
            for a, st in zip(arrs[-2::-1], starts[-2::-1]):
                out = T.sel(as_int(idx[ax]) < as_int(st) + as_int(a.shape[ax]), a.elem(at(a, st, idx)), out)
            return out
        value = None
        if all(a.value is not None for a in arrs):
            def value(idx):
                out = arrs[-1].value(at(arrs[-1], starts[-1], idx))
                for a, st in zip(arrs[-2::-1], starts[-2::-1]):
                    out = z3.If(as_int(idx[ax]) < as_int(st) + as_int(a.shape[ax]), a.value(at(a, st, idx)), out)
                return out
        return Arr(shape, elem, value)

    def fn_cumsum(self, x, axis=None, span=None):
        """Inclusive prefix sums along `axis`: element j sums the line's coordinates 0..j."""
        a = self.arr(x)
        if axis is None or not isinstance(axis, int):
            raise NotAnalysable("cumsum without an axis (over the flattened array)", span)
        ax = axis % a.ndim

        def elem(idx):
            v = self.var("cumsum")
            full = tuple(v if d == ax else i for d, i in enumerate(idx))
            return T.red("sum", (v,), z3.And(v >= 0, v <= as_int(idx[ax])), a.elem(full), f"cumsum(axis={axis})")
        return Arr(a.shape, elem)

    def fn_einsum(self, spec, *ops, span=None):
        if not isinstance(spec, str) or "->" not in spec:
            raise NotAnalysable("einsum needs an explicit '->' output", span)
        lhs, out = spec.replace(" ", "").split("->")
        ins = lhs.split(",")
        if len(ins) != len(ops) or "." in spec:
            raise NotAnalysable("einsum operands do not match the subscripts (or use '...')", span)
        arrs = [self.arr(o) for o in ops]
        sizes: dict[str, object] = {}
        for sub_, a in zip(ins, arrs):
            if len(sub_) != a.ndim:
                raise NotAnalysable(f"einsum subscripts '{sub_}' do not match an operand of rank {a.ndim}", span)
            for c, s in zip(sub_, a.shape):
                if c in sizes and not _same(sizes[c], s, self.ctx.constraints) and not _is_one(s) \
                        and not _is_one(sizes[c]):
                    raise NotAnalysable(f"einsum letter '{c}' has two sizes", span)
                if c not in sizes or _is_one(sizes[c]):
                    sizes[c] = s
        summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
        shape = tuple(sizes[c] for c in out)

        def elem(idx):
            env = dict(zip(out, idx))
            vs = {c: self.var(c) for c in summed}
            env.update(vs)
            factors = []
            for sub_, a in zip(ins, arrs):
                factors.append(a.elem(tuple(0 if _is_one(s) else env[c] for c, s in zip(sub_, a.shape))))
            body = factors[0] if len(factors) == 1 else T.op("*", *factors)
            if not summed:
                return body
            dom = z3.And(*[z3.And(vs[c] >= 0, vs[c] < as_int(sizes[c])) for c in summed])
            return T.red("sum", tuple(vs[c] for c in summed), dom, body, f"einsum {spec}")
        return Arr(shape, elem)

    def fn_matmul(self, a, b, span=None):
        return self.matmul(self.arr(a), self.arr(b), span)

    def fn_causal_mask(self, sq, sk, span=None):
        """-inf where the key position is past the query position (queries aligned to the end)."""
        def mask(idx):
            q, k = idx
            return as_int(k) > as_int(q) + as_int(sk) - as_int(sq)
        return Arr((sq, sk), lambda idx: T.sel(mask(idx), T.MINF, T.ZERO))

    def _tri(self, x, k, upper: bool) -> Arr:
        a = self.arr(x)

        def keep(idx):
            r, c = as_int(idx[-2]), as_int(idx[-1])
            return c >= r + k if upper else c <= r + k
        value = None
        if a.value is not None:  # triu(ones((S, S)), 1) > 0 is a position mask, as causal_mask is
            def value(idx):
                v = a.value(idx)
                if isinstance(v, bool) or z3.is_bool(v):
                    return z3.And(keep(idx), T.zb(v))
                return z3.If(keep(idx), as_int(v), 0)
        return Arr(a.shape, lambda idx: T.sel(keep(idx), a.elem(idx), T.ZERO), value)

    def fn_tril(self, x, k=0, span=None):
        return self._tri(x, k, False)

    def fn_triu(self, x, k=0, span=None):
        return self._tri(x, k, True)

    def fn_expert_of_rows(self, offs, m, span=None):
        """Row r's expert: the e with offs[e] <= r < offs[e + 1] (offs non-decreasing, as the reference's
        searchsorted requires). A function of offs the footprint check instantiates where it needs it."""
        if not isinstance(offs, Arr) or offs.value is None:
            raise NotAnalysable("expert_of_rows of computed offsets", span)
        self.fresh += 1
        fn = z3.Function(f"expert_of_rows{self.fresh}", z3.IntSort(), z3.IntSort())  # one per call (cu_q, cu_k)
        self.row_experts = [*getattr(self, "row_experts", []), (fn, offs)]
        t = offs.elem((z3.IntVal(0),))
        if isinstance(t, T.Atom):  # offsets read straight from a tensor: the solver's segment lemma applies
            self.ctx.segments[fn.name()] = t.tensor
        return Arr((m,), lambda idx: T.VALUE, lambda idx: fn(as_int(idx[0])))

    def fn_topk(self, x, k, axis=-1, span=None):
        """topk(x, k, axis)[..., s]: the coordinate along `axis` of the s-th largest element of that line
        of x. Its value depends on the whole line (a selection by value, like argmax), so each element's
        term is a reduction over the line; which coordinate it picks is an uninterpreted function of the
        element's index (`choice`), what take_along_axis reads at. Which one it picks is the numeric
        tier's business (the float64 reference against the interpreter), not the data flow's."""
        a = self.arr(x)
        if not isinstance(k, int):
            raise NotAnalysable("topk with a k that is not a constant", span)
        ax = axis % a.ndim
        self.fresh += 1
        fn = z3.Function(f"ref_topk{self.fresh}", *[z3.IntSort()] * a.ndim, z3.IntSort())
        line = self.reduce("topk", a, ax)
        shape = a.shape[:ax] + (k,) + a.shape[ax + 1:]

        def elem(idx):
            return line.elem(tuple(idx[:ax]) + tuple(idx[ax + 1:]))

        def choice(idx):
            return fn(*[as_int(i) for i in idx])
        return Arr(shape, elem, None, choice)

    def fn_take_along_axis(self, x, idx, axis=None, span=None):
        """take_along_axis(x, idx, axis)[..., s] = x[..., idx[..., s], ...]: the element at the chosen
        coordinate, and (when the index is computed from data) everything the index depends on."""
        a, ix = self.arr(x), self.arr(idx)
        if axis is None or ix.ndim != a.ndim:
            raise NotAnalysable("take_along_axis needs an axis and an index of the same rank", span)
        ax = axis % a.ndim
        pick = ix.choice or ix.value
        if pick is None:
            raise NotAnalysable("take_along_axis with indices read from data", span)
        shape = tuple(ix.shape[d] if d == ax else a.shape[d] for d in range(a.ndim))

        def elem(i):
            j = [i[d] if d != ax else pick(tuple(i)) for d in range(a.ndim)]
            at = a.elem(tuple(self.sub(a, tuple(j))))
            if ix.choice is None:
                return at
            # a topk choice lies on its line (the function is otherwise free)
            on_line = z3.And(j[ax] >= 0, j[ax] < as_int(a.shape[ax]))
            return T.op("gather", ix.elem(tuple(i)), T.sel(on_line, at, T.ZERO))
        return Arr(shape, elem)

    def fn_one_hot(self, idx, n, span=None):
        """one_hot(idx, n)[..., j] = (idx[...] == j): a mask when idx is computed from positions or read at
        the output's own coordinates; data (a comparison of the index's contents, as a kernel's
        `x == arange(...)` is) where the index is read at a coordinate a sum runs over (a histogram)."""
        a = self.arr(idx)
        if a.value is None:
            raise NotAnalysable("one_hot of indices computed from data", span)

        def elem(ix):
            t = a.elem(tuple(ix[:-1]))
            if _summed_data(t):
                return T.op("cmp", t, T.VALUE)
            return T.sel(as_int(a.value(tuple(ix[:-1]))) == as_int(ix[-1]), T.VALUE, T.ZERO)
        return Arr(a.shape + (n,), elem, lambda ix: z3.If(as_int(a.value(tuple(ix[:-1]))) == as_int(ix[-1]), 1, 0))


def _pick(x, y, smaller: bool):
    """min / max of two position values (ints, or reals where either side is a float constant)."""
    x, y = as_int(x), as_int(y)
    if x.sort() != y.sort():
        x, y = (z3.ToReal(v) if z3.is_int(v) else v for v in (x, y))
    return z3.If(x <= y, x, y) if smaller else z3.If(x >= y, x, y)


def _plain(v) -> bool:
    return isinstance(v, (bool, int, float))


def _num(v):
    if isinstance(v, tuple):
        raise NotAnalysable("a comparison of scalar arguments")
    return as_int(v) if not isinstance(v, float) else v


def _summed_data(t: T.Term) -> bool:
    """A term reading a tensor at a coordinate that moves with a reduction or contraction index (the
    `ref_*` variables of ReferenceTerms.var): the kernel reads such contents per element, as data."""
    return any(isinstance(x, T.Atom) and any(_mentions_ref_var(c) for c in x.coords)
               for x in T.subterms(t, reductions=False))


def _mentions_ref_var(e) -> bool:
    todo = [e] if isinstance(e, z3.ExprRef) else []
    while todo:
        x = todo.pop()
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED and str(x).startswith("ref_"):
            return True
        todo.extend(x.children())
    return False


def _is_mask(x: Arr) -> bool:
    """A predicate whose value is known (positions, an integer tensor's contents), not data."""
    return x.value is not None and _is_bool(x.value(tuple(z3.Int(f"_p{k}") for k in range(x.ndim))))


def _is_bool(v) -> bool:
    return isinstance(v, bool) or (isinstance(v, z3.ExprRef) and z3.is_bool(v))


def _scalar_op(op: str, a, b, span):
    if _plain(a) and _plain(b):
        import operator
        return {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
                "//": operator.floordiv, "%": operator.mod, "**": operator.pow}[op](a, b)
    if isinstance(a, tuple) or isinstance(b, tuple) or isinstance(a, float) or isinstance(b, float):
        return ("scalar", f"{op}")  # float arithmetic of scalar arguments: a value, no data flow
    a, b = as_int(a), as_int(b)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a / b, "%": a % b}.get(op) if op != "/" else ("scalar", "/")


def reference_arrays(kernel: ir.Kernel, ctx: Context) -> tuple[dict[str, object], ReferenceTerms]:
    """Evaluate the reference block; raises NotAnalysable with the reason."""
    rt = ReferenceTerms(kernel, ctx)
    env = rt.run(kernel.reference)
    return env, rt


_LETTERS = re.compile(r"^[a-z]+$")
