"""Eliminating bound variables: which member of a reduction family lands on a given coordinate.

"Is coordinate x covered by some step?" is an existential over the step's tile index (and the step
itself when the steps are summarised); its negation (x is *missing*) would put a universal quantifier
into every query. Index maps in kernels and references are (piecewise) affine with unit or constant
strides, so the witness can be computed from x instead: `solve` returns, for each bound variable, a
term in the target coordinates such that, if any member maps to the target, this one does (an exact
inverse for affine maps with unit-stride variables, a mixed-radix split for `a * v1 + v2` with v2 in
[0, a), unification for uninterpreted tensor reads such as pos[t, k]). Callers assert the candidate
satisfies the equations, so a wrong candidate can only make a check fail to prove, never prove wrongly.
"""

from __future__ import annotations

import math

import z3
from z3 import z3core

from argus.analysis import bitblast
from argus.analysis.symbolic import SOLVER_TIMEOUT_MS, budget, solver
from argus.analysis.terms import NodeTable, const_names, zi

# (context, id of e, id of v) -> (answer, e, v): e and v kept alive so that neither their ids nor their context's
# address is reused while the entry lives (ids are per context)
_LINEAR: dict = {}


def linear(e: z3.ArithRef, v: z3.ArithRef) -> tuple[z3.ArithRef, int] | None:
    """e = c0 + a * v with integer a and c0 free of v, or None."""
    e = zi(e)
    key = (e.ctx.ref().value, e.get_id(), v.get_id())
    hit = _LINEAR.get(key)
    if hit is not None:
        return hit[0]
    if len(_LINEAR) > 100_000:
        _LINEAR.clear()
    out = _linear(e, v)
    _LINEAR[key] = (out, e, v)
    return out


def _linear(e: z3.ArithRef, v: z3.ArithRef) -> tuple[z3.ArithRef, int] | None:
    c0 = z3.simplify(z3.substitute(e, (v, z3.IntVal(0))))
    c1 = z3.simplify(z3.substitute(e, (v, z3.IntVal(1))))
    a = z3.simplify(c1 - c0)
    if not z3.is_int_value(a):
        return None
    a = a.as_long()
    c2 = z3.simplify(z3.substitute(e, (v, z3.IntVal(7))))
    if not z3.is_int_value(z3.simplify(c2 - c0 - 7 * a)) or z3.simplify(c2 - c0 - 7 * a).as_long() != 0:
        return None
    if _mentions_var(c0, v):
        return None
    return c0, a


def _mentions_var(e, v) -> bool:
    return v.decl().name() in const_names(e)


def solve(equations: list[tuple[object, object]], bound: tuple, ranges: dict | None = None) -> dict | None:
    """Candidate values for `bound` variables from `lhs == rhs` equations (lhs over the bound variables,
    rhs free of them). `ranges` gives known extents (var name -> n, the variable lies in [0, n)) for the
    mixed-radix case. None when some variable has no candidate."""
    ranges = ranges or {}
    sol: dict = {}
    pending = [(zi(a), zi(b)) for a, b in equations]
    progress = True
    while progress and len(sol) < len(bound):
        progress = False
        for lhs, rhs in pending:
            lhs_s = z3.substitute(lhs, *[(v, t) for v, t in sol.items()]) if sol else lhs
            free = [v for v in bound if v not in sol and _mentions_var(lhs_s, v)]
            if not free:
                continue
            if len(free) == 1:
                v = free[0]
                lin = linear(lhs_s, v)
                if lin is not None and lin[1] != 0:
                    c0, a = lin
                    sol[v] = z3.simplify((rhs - c0) / a) if a not in (1, -1) else z3.simplify((rhs - c0) * a)
                    progress = True
                    continue
                got = _unify(lhs_s, rhs, v)
                if got is not None:
                    sol[v] = got
                    progress = True
                continue
            # a * v1 + v2 (+ c0) with v2 in [0, a): v1 = (rhs - c0) div a, v2 = (rhs - c0) mod a
            lins = [(linear(lhs_s, v), v) for v in free]
            if len(free) == 2 and all(lin is not None for lin, _ in lins):
                (l1, v1), (l2, v2) = sorted(lins, key=lambda p: -abs(p[0][1]))
                a1, a2 = l1[1], l2[1]
                c0 = z3.simplify(z3.substitute(lhs_s, (v1, z3.IntVal(0)), (v2, z3.IntVal(0))))
                n2 = ranges.get(v2.decl().name())
                if a2 == 1 and a1 > 0 and n2 is not None and a1 == n2 and not _mentions_var(c0, v1) \
                        and not _mentions_var(c0, v2):
                    sol[v1] = z3.simplify((rhs - c0) / a1)
                    sol[v2] = z3.simplify((rhs - c0) % a1)
                    progress = True
    if len(sol) < len(bound):
        return None
    return sol


def _unify(lhs, rhs, v):
    """v from lhs == rhs when lhs is an application f(..) of an uninterpreted function whose arguments
    mention v, and rhs is an application of the same f: unify the arguments."""
    if not (z3.is_app(lhs) and z3.is_app(rhs)) or lhs.num_args() == 0:
        return None
    if lhs.decl().name() != rhs.decl().name() or lhs.num_args() != rhs.num_args():
        return None
    if lhs.decl().kind() != z3.Z3_OP_UNINTERPRETED:
        return None
    for a, b in zip(lhs.children(), rhs.children()):
        if _mentions_var(a, v):
            lin = linear(a, v)
            if lin is not None and lin[1] in (1, -1):
                return z3.simplify((b - lin[0]) * lin[1])
            return _unify(a, b, v)
    return None


def fix_model(formula, m: z3.ModelRef):
    """`formula` with every free constant and uninterpreted function replaced by its value in `m`
    (quantified variables stay): what remains to decide is the quantifiers alone."""
    consts, funcs = {}, {}
    todo, seen = [formula], set()
    while todo:
        x = todo.pop()
        if not isinstance(x, z3.ExprRef) or x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_quantifier(x):
            todo.append(x.body())
            continue
        if z3.is_app(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            if x.num_args() == 0:
                consts[x.get_id()] = x
            else:
                funcs[x.decl().name()] = x.decl()
        todo.extend(x.children())
    pairs = [(c, m.eval(c, model_completion=True)) for c in consts.values()]
    out = z3.substitute(formula, *pairs) if pairs else formula
    subs = []
    for f in funcs.values():
        interp = m[f] if f in m.decls() else None
        args = [z3.Var(i, f.domain(i)) for i in range(f.arity())]
        if interp is None:
            body = z3.FreshConst(f.range())  # unconstrained in the model: any value
            body = z3.IntVal(0) if f.range() == z3.IntSort() else z3.RealVal(0) if f.range() == z3.RealSort() else body
        else:
            entries = interp.as_list()
            body = entries[-1]
            for e in reversed(entries[:-1]):
                cond = z3.And(*[a == v for a, v in zip(args, e[:-1])])
                body = z3.If(cond, e[-1], body)
        subs.append((f, body))
    return z3.substitute_funs(out, *subs) if subs else out


def purify(formulas: list) -> list:
    """Replace each integer `x div d` / `x mod d` by a non-numeral divisor with fresh q, r and the facts
    x = q * d + r, 0 <= r < d (for d > 0): the division theorem stated once per (x, d), which nonlinear
    schedule queries (grouped rasters divide by runtime tile counts) need far less search with.

    A divisor that is a product a * b also gets the nesting theorem (a, b > 0): x div (a*b) is
    (x div a) div b and x mod (a*b) is x mod a + a * ((x div a) mod b). A tile index linearised over
    several runtime counts (row block, head, batch) is split by both forms, and the solver otherwise has
    to rediscover the theorem by nonlinear search (seconds, or a timeout, depending on what ran before)."""
    cache: dict = {}
    facts: list = []

    def qr(x, d):
        pk = ("qr", x.get_id(), d.get_id())
        if pk not in cache:
            q, r = z3.FreshInt("q", x.ctx), z3.FreshInt("r", x.ctx)
            facts.append(z3.Implies(d > 0, z3.And(x == q * d + r, r >= 0, r < d)))
            cache[pk] = (q, r)
            if z3.is_app(d) and d.decl().kind() == z3.Z3_OP_MUL and d.num_args() >= 2:
                factors = d.children()
                for i, a in enumerate(factors):  # every factor first: the kernel may split in any order
                    if z3.is_int_value(a):
                        continue
                    rest = [f for j, f in enumerate(factors) if j != i]
                    b = rest[0] if len(rest) == 1 else z3.Product(*rest)
                    qa, ra = qr(x, a)
                    qb, rb = qr(qa, b)
                    facts.append(z3.Implies(z3.And(a > 0, b > 0), z3.And(q == qb, r == ra + a * rb)))
        return cache[pk]

    def visit(e):
        if not isinstance(e, z3.ExprRef):
            return e
        key = e.get_id()
        if key in cache:
            return cache[key]
        if z3.is_app(e) and e.num_args() > 0:
            kids = [visit(c) for c in e.children()]
            k = e.decl().kind()
            if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and not z3.is_int_value(kids[1]):
                q, r = qr(*kids)
                out = q if k == z3.Z3_OP_IDIV else r
            elif z3.is_quantifier(e):
                out = e
            else:
                try:
                    out = e.decl()(*kids) if kids else e
                except z3.Z3Exception:
                    out = e
        else:
            out = e
        cache[key] = out
        return out

    out = [visit(f) for f in formulas]
    return out + facts


def nonlinear_check(formulas: list, prefer: list | None = None, timeout_ms: int = 8000,
                    purified_first: bool = False):
    """(result, model) for formulas with nonlinear integer terms: as they are, then purified (each helps
    a different query shape), each first under `prefer` (small dims) for small models.

    `purified_first` (tile schedules that divide by runtime tile counts, where the division theorems
    settle the query at once): purified with a short budget, then as they are, then purified with the
    whole budget, in a fresh Z3 context. In the shared context a query's preprocessing depends on every
    term created before it: a schedule proved here in about a second timed out in CI after other files
    were verified in the same process. A fresh context gives the resource-limited verdict whatever ran
    before (translating costs ~10 ms, so the many cheap ring queries use the shared context and go to a
    fresh one only when it answers unknown). The model is translated back to the caller's context."""
    if not purified_first:
        r, m = _attempt(formulas, prefer, timeout_ms, None, False)
        if r != z3.unknown:
            return r, m
    return _attempt(formulas, prefer, timeout_ms, z3.Context(), purified_first)


def _attempt(formulas: list, prefer: list | None, timeout_ms: int, ctx, purified_first: bool):
    home = formulas[0].ctx if formulas and isinstance(formulas[0], z3.ExprRef) else z3.main_ctx()
    here = [f.translate(ctx) for f in formulas] if ctx is not None else list(formulas)
    prefer_here = [p.translate(ctx) for p in prefer or []] if ctx is not None else list(prefer or [])
    # purified lazily, in the query's context: fresh terms in the caller's would change its later queries
    pure: list = []
    order = (("pure", min(timeout_ms, 1000)), ("here", timeout_ms), ("pure", timeout_ms)) if purified_first \
        else (("here", timeout_ms), ("pure", timeout_ms))
    for which, ms in order:
        if which == "pure" and not pure:
            pure = purify(here)
        fs = pure if which == "pure" else here
        s = solver(ms, ctx)
        s.add(*fs)
        r = s.check(*prefer_here)
        if r == z3.sat:
            return r, _back(s.model(), home, ctx)
        r = s.check() if prefer_here else r
        if r == z3.sat:
            return r, _back(s.model(), home, ctx)
        if r == z3.unsat:
            return r, None
    return z3.unknown, None


def _back(m: z3.ModelRef, home, ctx) -> z3.ModelRef:
    return m if ctx is None else m.translate(home)


def _moduli(formulas) -> dict:
    """x -> lcm of the numeral divisors it is divided / reduced by, over every `x div c` / `x mod c`."""
    out: dict = {}
    for f in formulas:
        for key, (x, c) in _scan(f)[0].items():
            prev = out.get(key, (x, 1))[1]
            out[key] = (x, math.lcm(prev, c))
    return out


def _has_divmod(formulas) -> bool:
    return any(_scan(f)[1] for f in formulas)


# Per subterm: (its moduli, whether it divides at all), shared by every query. A query re-asserts the same
# path constraints hundreds of times and obligations share large subterms, so each node is summarised once.
# The walk calls Z3's C functions directly (no Python wrapper per node and no error check per call: a
# million wrapped calls cost more than the solver on a gather GEMM); the nodes it meets are borrowed from
# the roots, which SCANNED keeps alive so that no id is reused while its entry lives.
_EMPTY: tuple[dict, bool] = ({}, False)
SCANNED = NodeTable(400_000)


def _raw(fn):
    return fn.__defaults__[0].f  # the ctypes function z3core's wrapper calls before its error check


_ID, _KIND = _raw(z3core.Z3_get_ast_id), _raw(z3core.Z3_get_ast_kind)
_NARGS, _ARG = _raw(z3core.Z3_get_app_num_args), _raw(z3core.Z3_get_app_arg)
_DECL, _DKIND = _raw(z3core.Z3_get_app_decl), _raw(z3core.Z3_get_decl_kind)
_BODY, _IS_NUM = _raw(z3core.Z3_get_quantifier_body), _raw(z3core.Z3_is_numeral_ast)
_NUM = _raw(z3core.Z3_get_numeral_string)


def _scan(f) -> tuple[dict, bool]:
    if not isinstance(f, z3.ExprRef):
        return _EMPTY
    ctx = f.ctx.ref()
    root = f.as_ast()
    rid = _ID(ctx, root)
    table, roots = SCANNED.of(f)
    got = table.get(rid)
    if got is not None:
        return got
    roots.append(f)
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
            stack.append((a, kids))
            stack.extend((c, None) for c in kids if _ID(ctx, c) not in table)
            continue
        out: dict = {}
        divides = False
        for c in kids:
            sub, sub_divides = table[_ID(ctx, c)]  # summarised before its parent (never cleared mid-walk)
            divides = divides or sub_divides
            for k, (x, m) in sub.items():
                out[k] = (x, math.lcm(out.get(k, (x, 1))[1], m))
        if _KIND(ctx, a) == z3.Z3_APP_AST and _DKIND(ctx, _DECL(ctx, a)) in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD):
            divides = True
            x, d = kids
            if _IS_NUM(ctx, d):
                c = int(_NUM(ctx, d))
                if c > 1 and _KIND(ctx, x) == z3.Z3_APP_AST and _NARGS(ctx, x) == 0 \
                        and _DKIND(ctx, _DECL(ctx, x)) == z3.Z3_OP_UNINTERPRETED:
                    k = _ID(ctx, x)
                    xr = z3.z3._to_expr_ref(x, f.ctx)
                    out[k] = (xr, math.lcm(out.get(k, (xr, 1))[1], c))
        table[key] = (out or _EMPTY[0], divides)  # most subterms divide nothing: share one empty dict
    return table[rid]


QUICK_MS = 250  # the integer solver's first try at a query with division: most settle well within it


def _bitblasted(s: z3.Solver, assumptions: list) -> z3.CheckSatResult | None:
    """unsat from the exact bit-vector query (argus.analysis.bitblast), or sat with s holding a model
    (the integer query re-checked with every variable pinned to the bit-vector model), else None."""
    r, values = bitblast.decide([*s.assertions(), *assumptions])
    if r == z3.unsat:
        return z3.unsat
    if r == z3.sat and values is not None:
        pins = [z3.Int(name) == v for name, v in values.items()]
        if s.check(*assumptions, *pins) == z3.sat:
            return z3.sat
    return None


def check_split(s: z3.Solver, assumptions: list | None = None, limit: int = 256,
                timeout_ms: int = SOLVER_TIMEOUT_MS) -> z3.CheckSatResult:
    """s.check(); with division or remainder in the query, a short integer attempt, then the exact
    bit-vector query (argus.analysis.bitblast), then a split on the residue of a variable modulo the lcm
    of the constants it is divided by (bit tests of a dim: (M // 4) % 2), one query per residue.
    Returns sat (s holds the model's assertions: call s.model()), unsat or unknown."""
    assumptions = assumptions or []
    moduli = _moduli(s.assertions())
    if moduli or _has_divmod([*s.assertions(), *assumptions]):
        budget(s, QUICK_MS)
        r = s.check(*assumptions)
        if r != z3.unknown:
            return r
        budget(s, timeout_ms)
        r = _bitblasted(s, assumptions)
        if r is not None:
            return r
    mods = [(x, L) for x, L in moduli.values() if L <= limit]
    if mods:
        budget(s, 1500)  # bit tests of a dim are slow for the solver and fast per residue
    r = s.check(*assumptions)
    if r != z3.unknown or not mods:
        return r
    x, L = max(mods, key=lambda p: p[1])
    budget(s, 2000)
    result = z3.unsat
    for res in range(L):
        r = s.check(*assumptions, x % L == res)
        if r == z3.sat:
            s.add(x % L == res)
            return s.check(*assumptions)
        if r == z3.unknown:
            result = z3.unknown
    return result
