"""Useful FLOPs of a `reference:` block at given dims, from shapes alone (nothing is allocated).

The block is walked with abstract values: a shape (sizes, each with the dim name it came from when
known) and a *density*, the fraction of its elements that a causal mask leaves live. Matrix products
count 2·(product of every index's size): `@`, `matmul` and `einsum` (so attention's
`einsum("bhqd,bhkd->bhqk", Q, K)` counts B·H·SQ·SKV·D multiply-adds). Fancy indexing keeps the
indexed rows: `Wg[We]` with `We` of M rows is an [M, HID, F] operand, so a routed MoE product counts
its routed rows, not every expert's weights. `causal_mask(SQ, SKV)` carries the exact share of live
(query, key) pairs; a product whose indices span both masked dims is scaled by that share (FA's
convention: causal attention does about half the work). Grouped-query `repeat(K, G, axis=1)` keeps the
query-head count, so FLOPs follow the query heads while bytes (workload.min_bytes) follow the kv heads.
Anything the walker cannot size contributes nothing: the count is a lower bound, never a guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from argus.dsl import ast

Size = tuple[int, str | None]  # (extent, dim name when known)


@dataclass(frozen=True)
class Val:
    shape: tuple[Size, ...]
    density: float = 1.0
    masked: tuple[str, ...] = ()  # the dims a causal mask relates (density applies across them)
    sources: tuple[int, ...] = ()  # the products this value comes from (a mask applied later scales them)


class _Unknown(Exception):
    pass


def _scalar(e: ast.Expr, env: dict[str, object]) -> object:
    """A scalar expression over dims and params (for IfExp conditions and call arguments)."""
    if isinstance(e, ast.Const):
        return e.value
    if isinstance(e, ast.Name):
        v = env.get(e.id)
        if isinstance(v, Val) or v is None:
            raise _Unknown(e.id)
        return v
    if isinstance(e, ast.UnaryOp):
        v = _scalar(e.operand, env)
        return (not v) if e.op == "not" else -v  # type: ignore[operator]
    if isinstance(e, ast.BinOp):
        a, b = _scalar(e.left, env), _scalar(e.right, env)
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
               "//": lambda: a // b, "%": lambda: a % b, "**": lambda: a ** b}
        if e.op not in ops:
            raise _Unknown(e.op)
        return ops[e.op]()  # type: ignore[operator]
    if isinstance(e, ast.Compare):
        a, b = _scalar(e.left, env), _scalar(e.right, env)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]  # type: ignore
    if isinstance(e, ast.BoolOp):
        a, b = _scalar(e.left, env), _scalar(e.right, env)
        return (a and b) if e.op == "and" else (a or b)
    if isinstance(e, ast.IfExp):
        return _scalar(e.then, env) if _scalar(e.cond, env) else _scalar(e.orelse, env)
    if isinstance(e, ast.Call) and e.func_name in ("sqrt", "float", "int") and len(e.args) == 1:
        v = _scalar(e.args[0], env)
        return math.sqrt(v) if e.func_name == "sqrt" else (float(v) if e.func_name == "float" else int(v))  # type: ignore
    raise _Unknown(type(e).__name__)


def causal_density(sq: int, sk: int) -> float:
    """Share of (query, key) pairs a causal mask keeps, queries aligned to the end of the keys."""
    if sq <= 0 or sk <= 0:
        return 1.0
    live = sq * sk - sq * (sq - 1) // 2 if sk >= sq else sk * (sk + 1) // 2
    return live / (sq * sk)


def _broadcast(a: tuple[Size, ...], b: tuple[Size, ...]) -> tuple[Size, ...]:
    n = max(len(a), len(b))
    a = ((1, None),) * (n - len(a)) + a
    b = ((1, None),) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x[0] == 1:
            out.append(y)
        elif y[0] == 1 or x[0] == y[0]:
            out.append(x if x[1] else y)
        else:
            raise _Unknown("shapes do not broadcast")
    return tuple(out)


class Counter:
    def __init__(self, env: dict[str, object]):
        self.env = env
        self.products: list[list] = []  # [flops, dim names spanned, masked already]
        self.peak = 0  # elements of the largest intermediate value

    @property
    def flops(self) -> float:
        return sum(p[0] for p in self.products)

    def record(self, flops: float, names: set[str], masked: bool) -> int:
        self.products.append([flops, names, masked])
        return len(self.products) - 1

    def merge(self, a: object, b: object) -> object:
        """Elementwise combination: broadcast shapes; a mask meeting the result of a product scales that
        product (its masked-out outputs are never computed by a kernel that skips masked blocks)."""
        if isinstance(a, Val) and isinstance(b, Val):
            keep = a if a.density <= b.density else b
            for mask, other in ((a, b), (b, a)):
                if mask.masked:
                    for i in other.sources:
                        p = self.products[i]
                        if not p[2] and set(mask.masked) <= p[1]:
                            p[0] *= mask.density
                            p[2] = True
            return Val(_broadcast(a.shape, b.shape), keep.density, keep.masked, a.sources + b.sources)
        if isinstance(a, Val):
            return a
        if isinstance(b, Val):
            return b
        return None

    def product(self, sizes: dict[str, Size], operands: list[Val]) -> tuple[int, ...]:
        """Records 2·∏ sizes, scaled by the density of a masked operand whose masked dims it spans."""
        total = 2.0 * math.prod(s for s, _ in sizes.values())
        names = {n for _, n in sizes.values() if n}
        dens = [v.density for v in operands if v.masked and set(v.masked) <= names]
        return (self.record(total * (min(dens) if dens else 1.0), names, bool(dens)),)

    def val(self, e: ast.Expr) -> object:
        v = self._val(e)
        if isinstance(v, Val):  # the largest array the block materialises (a gathered Wg[We] is one)
            self.peak = max(self.peak, math.prod(x for x, _ in v.shape))
        return v

    def _val(self, e: ast.Expr) -> object:
        env = self.env
        if isinstance(e, ast.Name):
            v = env.get(e.id)
            if v is None:
                raise _Unknown(e.id)
            return v
        if isinstance(e, ast.Const):
            return e.value
        if isinstance(e, ast.Attribute):
            v = self.val(e.value)
            if e.attr == "T" and isinstance(v, Val):
                return Val(v.shape[:-2] + v.shape[-2:][::-1], v.density, v.masked, v.sources)
            raise _Unknown(e.attr)
        if isinstance(e, ast.IfExp):
            return self.val(e.then) if _scalar(e.cond, env) else self.val(e.orelse)
        if isinstance(e, ast.UnaryOp):
            return self.val(e.operand)
        if isinstance(e, (ast.Compare, ast.BoolOp)):
            return self.merge(self.val(e.left), self.val(e.right))
        if isinstance(e, ast.BinOp):
            a, b = self.val(e.left), self.val(e.right)
            if e.op == "@":
                return self.matmul(a, b)
            return self.merge(a, b) if isinstance(a, Val) or isinstance(b, Val) else _scalar(e, env)
        if isinstance(e, ast.Subscript):
            return self.subscript(e)
        if isinstance(e, ast.Call):
            return self.call(e)
        raise _Unknown(type(e).__name__)

    def matmul(self, a: object, b: object) -> Val:
        if not (isinstance(a, Val) and isinstance(b, Val)) or len(a.shape) < 2 or len(b.shape) < 2:
            raise _Unknown("matmul operands")
        batch = _broadcast(a.shape[:-2], b.shape[:-2])
        sizes = {f"b{i}": s for i, s in enumerate(batch)}
        sizes.update(m=a.shape[-2], k=a.shape[-1], n=b.shape[-1])
        src = self.product(sizes, [a, b])
        return Val(batch + (a.shape[-2], b.shape[-1]), sources=src)

    def subscript(self, e: ast.Subscript) -> object:
        v = self.val(e.value)
        if not isinstance(v, Val):
            raise _Unknown("subscript of a scalar")
        out: list[Size] = []
        rest = list(v.shape)
        for item in e.items:
            if isinstance(item, ast.Const) and item.value is None:
                out.append((1, None))
                continue
            if not rest:
                raise _Unknown("too many indices")
            axis = rest.pop(0)
            if isinstance(item, ast.Slice):
                if item.start is None and item.stop is None and item.length is None:
                    out.append(axis)
                elif item.length is not None:
                    out.append((int(_scalar(item.length, self.env)), None))  # type: ignore[arg-type]
                else:
                    lo = 0 if item.start is None else int(_scalar(item.start, self.env))  # type: ignore[arg-type]
                    hi = axis[0] if item.stop is None else int(_scalar(item.stop, self.env))  # type: ignore[arg-type]
                    out.append((max(0, min(hi, axis[0]) - lo), None))
                continue
            idx = self.val(item)
            if isinstance(idx, Val):
                out.extend(idx.shape)  # fancy indexing: the index array's shape replaces the axis
            # an integer index drops the axis
        return Val(tuple(out) + tuple(rest), v.density, v.masked, v.sources)

    def call(self, e: ast.Call) -> object:
        fn = e.func_name or ""
        args = e.args
        kw = {k.name: k.value for k in e.kwargs}
        if fn == "einsum":
            return self.einsum(e)
        if fn == "matmul" and len(args) == 2:
            return self.matmul(self.val(args[0]), self.val(args[1]))
        if fn == "causal_mask" and len(args) == 2:
            sq, sk = (int(_scalar(a, self.env)) for a in args)  # type: ignore[arg-type]
            names = tuple(a.id for a in args if isinstance(a, ast.Name))
            return Val(((sq, names[0] if names else None), (sk, names[1] if len(names) > 1 else None)),
                       causal_density(sq, sk), names if len(names) == 2 else ())
        if fn == "repeat" and len(args) >= 2:
            v = self.val(args[0])
            reps = int(_scalar(args[1], self.env))  # type: ignore[arg-type]
            axis = int(_scalar(kw.get("axis", args[2] if len(args) > 2 else ast.Const(e.span, 0)), self.env))  # type: ignore
            if not isinstance(v, Val):
                raise _Unknown("repeat of a scalar")
            shape = list(v.shape)
            shape[axis] = (shape[axis][0] * reps, None)
            return Val(tuple(shape), v.density, v.masked)
        if fn in ("sum", "max", "min", "mean") and args:
            v = self.val(args[0])
            ax = kw.get("axis", args[1] if len(args) > 1 else None)
            if not isinstance(v, Val):
                return v
            if ax is None:
                return 0.0
            a = int(_scalar(ax, self.env))  # type: ignore[arg-type]
            shape = list(v.shape)
            del shape[a]
            return Val(tuple(shape))
        if fn in ("topk",) and len(args) >= 2:
            v = self.val(args[0])
            k = int(_scalar(args[1], self.env))  # type: ignore[arg-type]
            if isinstance(v, Val):
                return Val(v.shape[:-1] + ((k, None),))
        if fn == "take_along_axis" and len(args) >= 2:
            return self.val(args[1])
        if fn in ("expert_of_rows",) and len(args) == 2:
            return Val(((int(_scalar(args[1], self.env)), args[1].id if isinstance(args[1], ast.Name) else None),))  # type: ignore
        if fn in ("sqrt", "float", "int") and args and not isinstance(self.val(args[0]), Val):
            return _scalar(e, self.env)
        # elementwise (exp, silu, softmax, where, maximum, ...): the broadcast of the array arguments
        vals = [self.val(a) for a in args]
        out: object = None
        for v in vals:
            out = self.merge(out, v) if out is not None else v
        if isinstance(out, Val):
            return out
        raise _Unknown(fn)

    def einsum(self, e: ast.Call) -> Val:
        spec = e.args[0] if e.args else None
        if not isinstance(spec, ast.Const) or not isinstance(spec.value, str):
            raise _Unknown("einsum subscripts")
        text = spec.value.replace(" ", "")
        lhs, _, rhs = text.partition("->")
        terms = lhs.split(",")
        ops = [self.val(a) for a in e.args[1:]]
        if len(terms) != len(ops) or not all(isinstance(v, Val) for v in ops):
            raise _Unknown("einsum operands")
        sizes: dict[str, Size] = {}
        for t, v in zip(terms, ops):
            assert isinstance(v, Val)
            if "." in t or len(t) != len(v.shape):
                raise _Unknown("einsum ellipsis or rank")
            for letter, s in zip(t, v.shape):
                prev = sizes.get(letter)
                if prev is None or prev[0] == 1 or (prev[1] is None and s[0] == prev[0]):
                    sizes[letter] = s
        if not rhs:
            rhs = "".join(sorted(c for c in sizes if lhs.count(c) == 1))
        src = self.product(sizes, [v for v in ops if isinstance(v, Val)]) if len(ops) >= 2 else ()
        return Val(tuple(sizes[c] for c in rhs if re.match(r"\w", c)), sources=src)


def reference_flops(reference: tuple[ast.Stmt, ...], shapes: dict[str, tuple[Size, ...]],
                    scalars: dict[str, object]) -> float:
    """Useful FLOPs of the block: `shapes` maps tensor names to their (size, dim name) tuples;
    `scalars` holds dims and params."""
    return reference_work(reference, shapes, scalars)[0]


def reference_work(reference: tuple[ast.Stmt, ...], shapes: dict[str, tuple[Size, ...]],
                   scalars: dict[str, object]) -> tuple[float, int]:
    """(useful FLOPs, elements of the largest intermediate array) of the block."""
    env: dict[str, object] = dict(scalars)
    env.update({n: Val(s) for n, s in shapes.items()})
    c = Counter(env)
    for s in reference:
        if not isinstance(s, ast.Assign):
            continue
        try:
            v = c.val(s.value)
        except (_Unknown, ValueError, TypeError, KeyError, IndexError, ZeroDivisionError):
            v = None
        if len(s.targets) == 1 and v is not None:
            env[s.targets[0].id] = v
        else:
            for t in s.targets:
                env.pop(t.id, None)
    return c.flops, c.peak
