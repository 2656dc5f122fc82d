"""Where a term is NaN: `-inf - -inf`, `-inf * 0`, `0 / 0` and what they flow into.

The structural flags of argus.analysis.terms say where a value is a masked -inf *as far as the
dependency checks need*: a max reduction is never -inf there (its members are looked at instead). A
NaN needs the exact condition: a running max of scores that are all masked in a step stays -inf, and
`exp2(s - m)` is then `exp2(-inf - -inf)` — NaN in every row whose keys a step masks entirely (a sliding
window whose first kv block lies before a row's window; FA implementations replace such a max by 0).

`Flags(t)` computes, for a term, z3 conditions: `minf` (the value is -inf), `zero` (exactly 0) and
`nan`. A max reduction is -inf where every member in its domain is (a quantifier over its variables,
moved inward past conjuncts that do not mention them); a sum is NaN where a member is. Inputs are
finite. +inf is not modelled: `x - y` with x finite and y -inf is +inf, which is a value here. NaN
propagates through max as the interpreter's does (CUDA's fmaxf drops it; the interpreter is the oracle
a counterexample is replayed on). A comparison with -inf is decided by the -inf flag, so the guard
`select(m == -inf, 0, m)` is understood.
"""

from __future__ import annotations

import z3

from argus.analysis import terms as T


class Flags:
    def __init__(self) -> None:
        self._memo: dict[tuple[str, int], object] = {}
        self._keep: list = []  # the terms memoised by id stay alive

    def nan(self, t: T.Term):
        return self._get("nan", t)

    def minf(self, t: T.Term):
        return self._get("minf", t)

    def zero(self, t: T.Term):
        return self._get("zero", t)

    def _get(self, kind: str, t: T.Term):
        k = (kind, id(t))
        if k not in self._memo:
            self._keep.append(t)
            self._memo[k] = getattr(self, f"_{kind}")(t)
        return self._memo[k]

    # ---- -inf ----
    def _minf(self, t: T.Term):
        if isinstance(t, T.Lit):
            return t.kind == "minf"
        if isinstance(t, T.Atom):
            return False
        if isinstance(t, T.Sel):
            return T.b_if(t.cond, self.minf(t.a), self.minf(t.b))
        if isinstance(t, T.Red):
            body = self.minf(t.body)
            if t.kind == "max":
                return _forall(t.vars, t.domain, body)
            return _exists(t.vars, t.domain, body)  # a sum or min with a -inf member
        if isinstance(t, T.Op):
            a = t.args
            if t.fn == "select" and len(a) == 3:
                return self._select("minf", a)
            ms = [self.minf(x) for x in a]
            if t.fn == "max":
                return T.b_and(*ms)
            if t.fn in ("*", "+", "-", "min"):
                return T.b_or(*ms)
            if t.fn in ("/", "cast"):
                return ms[0]
            if t.fn in ("log", "log2"):
                return self.zero(a[0])
            return False
        return False

    # ---- exact zeros ----
    def _zero(self, t: T.Term):
        if isinstance(t, T.Lit):
            return t.kind == "zero"
        if isinstance(t, T.Atom):
            return T.b_not(t.inside)
        if isinstance(t, T.Sel):
            return T.b_if(t.cond, self.zero(t.a), self.zero(t.b))
        if isinstance(t, T.Red) and t.kind in ("sum", "max", "min"):
            # exact where every member in its domain is (an empty sum too): the row sum of a softmax step
            # whose scores are all masked, the denominator of a 0 / 0
            return _forall(t.vars, t.domain, self.zero(t.body))
        if isinstance(t, T.Op):
            a = t.args
            if t.fn == "select" and len(a) == 3:
                return self._select("zero", a)
            if t.fn in ("exp", "exp2"):
                return self.minf(a[0])
            zs = [self.zero(x) for x in a]
            if t.fn == "*":
                return T.b_or(*zs)
            if t.fn in ("/", "neg", "cast", "abs", "sqrt", "silu", "tanh", "relu", "gelu", "erf"):
                return zs[0]
            if t.fn in ("+", "-", "max", "min"):
                return T.b_and(*zs)
            return False
        return False

    # ---- NaN ----
    def _nan(self, t: T.Term):
        if isinstance(t, (T.Lit, T.Atom)):
            return False
        if isinstance(t, T.Sel):
            return T.b_if(t.cond, self.nan(t.a), self.nan(t.b))
        if isinstance(t, T.Red):
            return _exists(t.vars, t.domain, self.nan(t.body))
        if isinstance(t, T.Op):
            a = t.args
            if t.fn == "select" and len(a) == 3:
                return self._select("nan", a)
            own = T.b_or(*[self.nan(x) for x in a])
            if t.fn == "-" and len(a) == 2:
                own = T.b_or(own, T.b_and(self.minf(a[0]), self.minf(a[1])))
            elif t.fn == "*" and len(a) == 2:
                own = T.b_or(own, T.b_and(self.minf(a[0]), self.zero(a[1])),
                             T.b_and(self.zero(a[0]), self.minf(a[1])))
            elif t.fn == "/" and len(a) == 2:
                own = T.b_or(own, T.b_and(self.minf(a[0]), self.minf(a[1])), T.b_and(self.zero(a[0]), self.zero(a[1])))
            return own
        return False

    def _select(self, kind: str, a: tuple):
        """select(c, x, y) on data: by c's truth where it compares with -inf, else either side (NaN, a
        possible flag) or both (-inf, zero: a flag that must hold)."""
        x, y = self._get(kind, a[1]), self._get(kind, a[2])
        c = self.truth(a[0])
        if c is not None:
            return T.b_if(c, x, y)
        return T.b_or(x, y) if kind == "nan" else T.b_and(x, y)

    def truth(self, c: T.Term):
        """A comparison's truth where one side is the -inf literal (decided by the other's -inf flag)."""
        if not (isinstance(c, T.Op) and c.fn == "cmp" and c.rel and len(c.args) == 2):
            return None
        x, y = c.args
        rel = c.rel
        if isinstance(x, T.Lit) and x.kind == "minf":
            x, y, rel = y, x, _SWAP.get(rel, rel)
        if not (isinstance(y, T.Lit) and y.kind == "minf"):
            return None
        m = self.minf(x)
        return {"==": m, "<=": m, "!=": T.b_not(m), ">": T.b_not(m), ">=": True, "<": False}.get(rel)


_SWAP = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _split(body, names: set[str]):
    """The conjuncts of `body` that mention `names` and those that do not."""
    parts = body.children() if z3.is_and(body) else [body]
    inner = [p for p in parts if T.mentions(p, names)]
    outer = [p for p in parts if not T.mentions(p, names)]
    return inner, outer


def _exists(vars: tuple, domain, body):
    if body is False:
        return False
    if not vars:
        return T.b_and(domain, body)
    names = {v.decl().name() for v in vars}
    inner, outer = _split(z3.simplify(T.zb(body)), names)
    core = z3.Exists(list(vars), z3.And(T.zb(domain), *inner)) if inner else \
        z3.Exists(list(vars), T.zb(domain))
    return z3.And(core, *outer) if outer else core


def _forall(vars: tuple, domain, body):
    if body is True:
        return True
    if not vars:
        return T.b_or(T.b_not(domain), body)
    if body is False:
        return z3.Not(z3.Exists(list(vars), T.zb(domain)))
    names = {v.decl().name() for v in vars}
    neg = z3.simplify(z3.Not(T.zb(body)))
    inner, outer = _split(neg, names)
    # not (exists v. domain and not body), with the negated body's conjuncts free of v taken out
    core = z3.Exists(list(vars), z3.And(T.zb(domain), *inner)) if inner else z3.Exists(list(vars), T.zb(domain))
    return z3.Not(z3.And(core, *outer)) if outer else z3.Not(core)
