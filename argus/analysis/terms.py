"""Data-flow terms: what each element of a value is computed from.

Every element the verifier tracks (a register tile element, a shared-memory element, a reference-block
array element) has a *term*: an expression tree over input tensor elements whose coordinates are z3
integers. The same term language describes the kernel (built by the symbolic executor) and its
`reference:` block (built by argus.analysis.reference_terms), so the reference-footprint check can
compare them:

- `Atom(T, coords)` is element T[coords] of an input tensor; `inside` says whether coords lie in T (a
  masked access outside reads a zero fill, which contributes nothing).
- `Lit` is data that depends on no input: zero, -inf, another constant, or unwritten shared memory.
- `Op(fn, args)` is a pointwise function (arithmetic, exp, casts, ...).
- `Sel(cond, a, b)` selects by a condition on positions (masks): a where cond holds, else b.
- `Red(kind, vars, domain, body)` reduces `body` over the integer variables `vars` where `domain` holds
  (an mma step sums over its K tile, `max(x, axis=1)` over a row, `einsum` over its summed letters).
- `Opaque(reason)` is a value the verifier cannot describe: any check that needs it answers unknown.

Flags follow the element's value: `zero` (the element is a structural zero: a zero fill, exp(-inf), a
product with a zero), `minf` (a masked -inf score) and `uninit` (it reads shared memory no copy wrote).
An element whose value is a structural zero or -inf depends on nothing: `occurrences` enumerates the
tensor elements a term really depends on, each with the bound variables and the guard under which it
does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import z3
from z3 import z3core
from z3.z3core import Z3_get_bool_value, Z3_mk_and, Z3_mk_not, Z3_mk_or

Bool = object  # a z3 BoolRef or a Python bool


# ---- booleans that stay Python bools when they can ----
_BOOL_VALUE = Z3_get_bool_value.__defaults__[0].f  # the C function itself, without z3core's error check


def _lit(x) -> int:
    """1 for z3 true, -1 for z3 false, 0 otherwise (one C call: z3.is_true walks the Python wrapper)."""
    return _BOOL_VALUE(x.ctx.ref(), x.as_ast()) if isinstance(x, z3.BoolRef) else 0


def b_and(*xs) -> Bool:
    out = []
    for x in xs:
        if x is False or _lit(x) == -1:
            return False
        if x is True or _lit(x) == 1:
            continue
        out.append(x)
    if not out:
        return True
    return out[0] if len(out) == 1 else mk_bool(Z3_mk_and, out)


def b_or(*xs) -> Bool:
    out = []
    for x in xs:
        if x is True or _lit(x) == 1:
            return True
        if x is False or _lit(x) == -1:
            continue
        out.append(x)
    if not out:
        return False
    return out[0] if len(out) == 1 else mk_bool(Z3_mk_or, out)


def b_not(x) -> Bool:
    if isinstance(x, bool):
        return not x
    if isinstance(x, z3.BoolRef):
        return z3.BoolRef(Z3_mk_not(x.ctx.ref(), x.as_ast()), x.ctx)
    return z3.Not(x)


def mk_bool(maker, xs: list) -> z3.BoolRef:
    """z3.And / z3.Or straight through the C API: the terms build hundreds of thousands of these, and the
    Python wrapper's argument checks cost ten times the node itself. Anything but plain BoolRefs of one
    context (a probe, a Python bool that slipped through) takes the checked path."""
    ctx = xs[0].ctx if isinstance(xs[0], z3.BoolRef) else None
    if ctx is None or any(not isinstance(x, z3.BoolRef) or x.ctx is not ctx for x in xs):
        return z3.And(*xs) if maker is Z3_mk_and else z3.Or(*xs)
    arr = (z3.Ast * len(xs))()
    for i, x in enumerate(xs):
        arr[i] = x.as_ast()
    return z3.BoolRef(maker(ctx.ref(), len(xs), arr), ctx)


def b_if(c, a, b) -> Bool:
    if c is True:
        return a
    if c is False:
        return b
    if isinstance(a, bool) and isinstance(b, bool):
        if a == b:
            return a
        return c if a else b_not(c)
    return z3.If(c, zb(a), zb(b))


def zb(x) -> z3.BoolRef:
    return z3.BoolVal(x) if isinstance(x, bool) else x


def zi(x) -> z3.ArithRef:
    if isinstance(x, bool):
        return z3.IntVal(int(x))
    if isinstance(x, int):
        return z3.IntVal(x)
    return x


# ---- terms ----
@dataclass(frozen=True, eq=False)
class Term:
    zero: Bool = field(default=False, kw_only=True)
    minf: Bool = field(default=False, kw_only=True)
    uninit: Bool = field(default=False, kw_only=True)

    @property
    def live(self) -> Bool:
        """The element carries data (not a structural zero, not a masked -inf)."""
        return b_and(b_not(self.zero), b_not(self.minf))


@dataclass(frozen=True, eq=False)
class Atom(Term):
    tensor: str = ""
    coords: tuple = ()
    inside: Bool = True


@dataclass(frozen=True, eq=False)
class Lit(Term):
    kind: str = "value"  # "zero" | "minf" | "value" | "uninit"


@dataclass(frozen=True, eq=False)
class Op(Term):
    fn: str = ""
    args: tuple = ()
    rel: str = ""  # a comparison's relation ("cmp" only): a comparison with -inf is decided by a flag


@dataclass(frozen=True, eq=False)
class Sel(Term):
    cond: Bool = True
    a: Term | None = None
    b: Term | None = None


@dataclass(frozen=True, eq=False)
class Red(Term):
    """A reduction of `body` over `vars` where `domain` holds; `chain` groups the sum reductions that are
    summands of one accumulator (the steps of an mma loop), `site` says where it was made."""

    kind: str = "sum"  # "sum" | "max" | "min"
    vars: tuple = ()
    domain: Bool = True
    body: Term | None = None
    site: object = None
    chain: object = None  # hashable: (accumulator chain, element) of the sum this is a step of


@dataclass(frozen=True, eq=False)
class Opaque(Term):
    reason: str = ""
    span: object = None


ZERO = Lit(kind="zero", zero=True)
MINF = Lit(kind="minf", minf=True)
VALUE = Lit(kind="value")
UNINIT = Lit(kind="uninit", uninit=True)


def atom(tensor: str, coords: tuple, inside: Bool = True) -> Atom:
    return Atom(tensor=tensor, coords=tuple(zi(c) for c in coords), inside=inside, zero=b_not(inside))


def lit_for(value) -> Lit:
    """The literal for a constant value (0 is a structural zero, -inf a masked score)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == 0:
            return ZERO
        if value == float("-inf"):
            return MINF
    return VALUE


# How each pointwise function moves the zero / -inf flags (the value's structure, not its arithmetic).
def op(fn: str, *args: Term) -> Term:
    zs = [a.zero for a in args]
    ms = [a.minf for a in args]
    un = b_or(*[a.uninit for a in args])
    if fn in ("*",):
        zero, minf = b_or(*zs), b_or(*ms)
    elif fn == "/":
        zero, minf = zs[0], ms[0]
    elif fn in ("max",):
        zero, minf = b_and(*zs), b_and(*ms)
    elif fn in ("min",):
        zero, minf = b_and(*zs), b_or(*ms)
    elif fn in ("+", "-"):
        zero, minf = b_and(*zs), b_or(*ms)
    elif fn in ("exp", "exp2"):
        zero, minf = ms[0], False
    elif fn in ("log", "log2"):
        zero, minf = False, zs[0]
    elif fn in ("neg", "cast", "abs", "sqrt", "silu", "tanh", "relu", "gelu", "erf"):
        zero, minf = zs[0], (ms[0] if fn in ("cast",) else False)
    elif fn in ("sigmoid",):
        zero, minf = False, False
    elif fn == "select" and len(args) == 3:
        # select(c, a, b) on data: zero (-inf) where both sides are, or where c is structurally false (a
        # comparison of two zero fills, 0 > 0) and b is
        zero = b_or(b_and(zs[1], zs[2]), b_and(zs[0], zs[2]))
        minf = b_or(b_and(ms[1], ms[2]), b_and(zs[0], ms[2]))
    else:  # comparisons, rsqrt, ...: data, no structural flags
        zero, minf = False, False
    if fn == "cast" and len(args) == 1:
        return args[0]  # a cast changes precision, not data flow
    return Op(fn=fn, args=tuple(args), zero=zero, minf=minf, uninit=un)


def cmp(rel: str, a: Term, b: Term) -> Term:
    """A comparison of data as a 0/1 value: structurally 0 (false) where both sides are structural zeros
    and the relation is strict (a masked tail compared with 0: `x > 0` reads 0 > 0), else data."""
    t = op("cmp", a, b)
    zero = b_and(a.zero, b.zero) if rel in ("<", ">", "!=") else t.zero
    return Op(fn="cmp", args=t.args, zero=zero, minf=False, uninit=t.uninit, rel=rel)


def sel(cond: Bool, a: Term, b: Term) -> Term:
    if cond is True or (isinstance(cond, z3.BoolRef) and z3.is_true(cond)):
        return a
    if cond is False or (isinstance(cond, z3.BoolRef) and z3.is_false(cond)):
        return b
    return Sel(cond=cond, a=a, b=b, zero=b_if(cond, a.zero, b.zero), minf=b_if(cond, a.minf, b.minf),
               uninit=b_if(cond, a.uninit, b.uninit))


def red(kind: str, vars: tuple, domain: Bool, body: Term, site=None, chain=None) -> Term:
    """A reduction. A sum is treated as live data (an all-zero sum is not tracked as a structural zero)
    and a max is -inf only when every member is; both are conservative for the dependency checks,
    which look at the members."""
    return Red(kind=kind, vars=tuple(vars), domain=domain, body=body, site=site, chain=chain)


def opaque(reason: str, span=None) -> Opaque:
    return Opaque(reason=reason, span=span)


_chains = itertools.count(1)


def new_chain() -> int:
    return next(_chains)


# ---- walking ----
class OpaqueTerm(Exception):
    """A term the caller needs to look into is Opaque: the dependent check is unknown."""

    def __init__(self, t: Opaque):
        super().__init__(t.reason)
        self.term = t


@dataclass(frozen=True)
class Occurrence:
    """Under `guard` (over the free variables and `bound`), the element depends on tensor[coords]."""

    tensor: str
    coords: tuple
    bound: tuple
    guard: Bool
    reds: tuple  # the enclosing reductions, outermost first


def occurrences(t: Term, *, tensors: set[str] | None = None, uninit_as: str | None = "<unwritten>") -> list[Occurrence]:
    """The tensor elements `t` depends on. Opaque sub-terms raise OpaqueTerm. Unwritten shared memory
    is reported as an occurrence of the pseudo-tensor `uninit_as` (None: skipped)."""
    out: list[Occurrence] = []
    seen: set = set()

    def visit(x: Term, bound: tuple, guard: Bool, reds: tuple) -> None:
        guard = b_and(guard, x.live)
        if guard is False:
            return
        key = (id(x), tuple(v.get_id() for v in bound), guard.get_id() if isinstance(guard, z3.ExprRef) else guard)
        if key in seen:
            return
        seen.add(key)
        if isinstance(x, Atom):
            if tensors is None or x.tensor in tensors:
                out.append(Occurrence(x.tensor, x.coords, bound, b_and(guard, x.inside), reds))
        elif isinstance(x, Lit):
            if x.kind == "uninit" and uninit_as is not None and (tensors is None or uninit_as in tensors):
                out.append(Occurrence(uninit_as, (), bound, guard, reds))
        elif isinstance(x, Op):
            for a in x.args:
                visit(a, bound, guard, reds)
        elif isinstance(x, Sel):
            visit(x.a, bound, b_and(guard, x.cond), reds)
            visit(x.b, bound, b_and(guard, b_not(x.cond)), reds)
        elif isinstance(x, Red):
            visit(x.body, bound + x.vars, b_and(guard, x.domain), reds + (x,))
        elif isinstance(x, Opaque):
            raise OpaqueTerm(x)
        else:  # pragma: no cover - a new Term kind must be handled here
            raise TypeError(type(x).__name__)

    visit(t, (), True, ())
    return out


def subterms(t: Term, reductions: bool = True):
    """Every sub-term reachable from `t` (ignoring guards), each once; into reduction bodies unless told not."""
    todo, seen = [t], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        if isinstance(x, Op):
            todo.extend(x.args)
        elif isinstance(x, Sel):
            todo.extend((x.a, x.b))
        elif isinstance(x, Red) and reductions:
            todo.append(x.body)


def opaque_in(t: Term) -> Opaque | None:
    """The first Opaque sub-term reachable in `t`, if any (ignoring guards)."""
    return next((x for x in subterms(t) if isinstance(x, Opaque)), None)


def sum_chains(t: Term, top_only: bool = False) -> dict[object, list[Red]]:
    """Sum reductions grouped by accumulator chain (reductions without a chain are their own). With
    `top_only`, only those not nested in another reduction's body (the stored value's own sums)."""
    out: dict[object, list[Red]] = {}
    todo, seen = [(t, False)], set()
    while todo:
        x, nested = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Red):
            if x.kind == "sum" and not (top_only and nested):
                out.setdefault(x.chain if x.chain is not None else -id(x), []).append(x)
            # a chain entry's own body (acc + x wraps x) is not a nesting level
            todo.append((x.body, nested or bool(x.vars) or x.kind != "sum"))
        elif isinstance(x, Op):
            todo.extend((a, nested) for a in x.args)
        elif isinstance(x, Sel):
            todo.extend(((x.a, nested), (x.b, nested)))
    return out


def _raw(fn):
    return fn.__defaults__[0].f  # the C function z3core's wrapper calls, without its error check


_ID, _KIND = _raw(z3core.Z3_get_ast_id), _raw(z3core.Z3_get_ast_kind)
_NARGS, _ARG = _raw(z3core.Z3_get_app_num_args), _raw(z3core.Z3_get_app_arg)
_DECL, _DKIND = _raw(z3core.Z3_get_app_decl), _raw(z3core.Z3_get_decl_kind)
_DNAME, _SYMSTR = _raw(z3core.Z3_get_decl_name), _raw(z3core.Z3_get_symbol_string)
_BODY = _raw(z3core.Z3_get_quantifier_body)
_NO_NAMES: frozenset = frozenset()


class NodeTable:
    """Summaries of Z3 nodes keyed by node id, with the roots that keep those ids alive (the nodes below a
    root are borrowed from it). Ids are per context and a new context reuses them, so there is one table a
    context: the main one's, and the last other one's (a query asked in a fresh context); at most `cap`
    entries a table."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.tables: dict[int, tuple[dict, list]] = {}

    def of(self, e: z3.ExprRef) -> tuple[dict, list]:
        key = e.ctx.ref().value
        got = self.tables.get(key)
        if got is None:
            if len(self.tables) >= 2:  # keep the main context's table; its roots keep that context alive
                main = z3.main_ctx().ref().value
                self.tables = {k: v for k, v in self.tables.items() if k == main}
            got = self.tables[key] = ({}, [])
        elif len(got[0]) >= self.cap:
            got[0].clear()
            got[1].clear()
        return got


# node id -> the names of the uninterpreted constants below it
NAMES = NodeTable(400_000)


def const_names(e) -> frozenset:
    """The names of the uninterpreted constants in z3 term `e` (a walk of Z3's C structures, each node
    summarised once across calls: terms share large subterms and are asked about per field and axis)."""
    if not isinstance(e, z3.ExprRef):
        return _NO_NAMES
    ctx = e.ctx.ref()
    root = e.as_ast()
    rid = _ID(ctx, root)
    table, roots = NAMES.of(e)
    got = table.get(rid)
    if got is not None:
        return got
    roots.append(e)
    stack: list = [(root, None)]
    while stack:
        a, kids = stack.pop()
        key = _ID(ctx, a)
        if kids is None:
            if key in table:
                continue
            kind = _KIND(ctx, a)
            kids = [_ARG(ctx, a, i) for i in range(_NARGS(ctx, a))] if kind == z3.Z3_APP_AST else \
                [_BODY(ctx, a)] if kind == z3.Z3_QUANTIFIER_AST else []
            if not kids and kind == z3.Z3_APP_AST:
                decl = _DECL(ctx, a)
                if _DKIND(ctx, decl) == z3.Z3_OP_UNINTERPRETED:
                    table[key] = frozenset((_SYMSTR(ctx, _DNAME(ctx, decl)).decode(),))
                    continue
            stack.append((a, kids))
            stack.extend((c, None) for c in kids if _ID(ctx, c) not in table)
            continue
        subs = [table[_ID(ctx, c)] for c in kids]
        subs = [x for x in subs if x]
        table[key] = _NO_NAMES if not subs else subs[0] if len(subs) == 1 else frozenset().union(*subs)
    return table[rid]


def applied_names(e, names, varying: set[str] | None = None) -> set[str]:
    """The names in `names` of the uninterpreted functions applied in z3 term `e` (a tensor's contents,
    `offs(3)`); with `varying`, only applications at an argument that mentions one of those constants
    (`X(b * 64 + i)` varies with the element index i; `lens(r)`, one value for the whole tile, does not)."""
    out: set[str] = set()
    todo, seen = [e], set()
    while todo:
        x = todo.pop()
        if not isinstance(x, z3.ExprRef) or x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.num_args() > 0 and x.decl().name() in names:
            if varying is None or any(mentions(a, varying) for a in x.children()):
                out.add(x.decl().name())
        todo.extend(x.children())
    return out


def mentions(e, names) -> bool:
    """Does the z3 term `e` mention an integer constant named in `names`?"""
    if not isinstance(e, z3.ExprRef) or not names:
        return False
    return not const_names(e).isdisjoint(names)
