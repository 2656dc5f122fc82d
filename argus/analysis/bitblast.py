"""Deciding bounded integer queries exactly as bit-vector queries.

Index arithmetic is full of division and remainder by constants (bit tests of a dim, `(M // 4) % 2`,
tile rasters), where Z3's integer arithmetic can take tens of seconds for a proof that bit-blasting
settles in a millisecond. The translation is exact, not an approximation, under two conditions that
are checked, never assumed:

- every integer variable has a range implied by the query's own top-level linear constraints (`0 <= M`,
  `M <= 65536`, `b < cdiv(M, 64)`, `64 * b <= i` with the other side bounded in turn), and
- interval arithmetic over those ranges keeps every subterm within +-2**60, and the width chosen (at
  most 64 bits) holds every subterm with three bits to spare, so no operation wraps. Floor division
  and remainder are spelled out for negative operands (Z3's Int `/` and `%` agree with floor division
  for a positive divisor; a divisor that may be <= 0 is not translated).

Within those ranges each bit-vector operation computes the integer one, so the two queries have the
same models there, and the ranges themselves follow from the query: "unsat" is a proof. A query with
anything else (uninterpreted functions, quantifiers, reals) is not translated: `None`.
"""

from __future__ import annotations

import z3

W = 64
LIMIT = 1 << 60
# Translation walks the formula in Python; a large one (a disjunction over every producer of a tile)
# costs seconds to walk while the integer solver settles it, so past this many distinct subterms the
# query is left to the integer solver.
MAX_NODES = 4000

Interval = tuple[int, int]


class _Refuse(Exception):
    pass


def _conjuncts(fs) -> list:
    out, stack = [], list(fs)
    while stack:
        f = stack.pop()
        if z3.is_and(f):
            stack.extend(f.children())
        else:
            out.append(f)
    return out


def _as_le_zero(a) -> list[tuple[object, int]]:
    """An integer comparison as [(E, strict)] meaning E <= 0 (strict: E < 0); [] for anything else."""
    neg = False
    while z3.is_not(a):
        a, neg = a.arg(0), not neg
    if not z3.is_app(a) or a.num_args() != 2 or a.arg(0).sort() != z3.IntSort():
        return []
    k, x, y = a.decl().kind(), a.arg(0), a.arg(1)
    if k == z3.Z3_OP_EQ:
        return [] if neg else [(x - y, 0), (y - x, 0)]
    table = {z3.Z3_OP_LE: (x - y, 0), z3.Z3_OP_LT: (x - y, 1), z3.Z3_OP_GE: (y - x, 0), z3.Z3_OP_GT: (y - x, 1)}
    if k not in table:
        return []
    e, strict = table[k]
    if neg:  # not (E <= 0) is -E < 0; not (E < 0) is -E <= 0
        return [(-e, 1 - strict)]
    return [(e, strict)]


def _linear(e) -> tuple[dict[int, tuple[object, int]], int]:
    """e as sum of coefficient * term plus a constant; non-linear subterms are terms."""
    terms: dict[int, tuple[object, int]] = {}
    const = 0

    def add(x, c: int) -> None:
        nonlocal const
        if z3.is_int_value(x):
            const += c * x.as_long()
            return
        if z3.is_app(x):
            k = x.decl().kind()
            if k == z3.Z3_OP_ADD:
                for ch in x.children():
                    add(ch, c)
                return
            if k == z3.Z3_OP_SUB:
                add(x.arg(0), c)
                for ch in x.children()[1:]:
                    add(ch, -c)
                return
            if k == z3.Z3_OP_UMINUS:
                add(x.arg(0), -c)
                return
            if k == z3.Z3_OP_MUL and x.num_args() == 2 and z3.is_int_value(x.arg(0)):
                add(x.arg(1), c * x.arg(0).as_long())
                return
        key = x.get_id()
        t, c0 = terms.get(key, (x, 0))
        terms[key] = (t, c0 + c)

    add(e, 1)
    return {k: v for k, v in terms.items() if v[1] != 0}, const


def _is_int_var(e) -> bool:
    return z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED and e.sort() == z3.IntSort()


class _Ranges:
    """Variable ranges from the top-level atoms, then intervals of every subterm."""

    def __init__(self, atoms: list) -> None:
        self.var: dict[str, Interval] = {}
        self.cache: dict[int, Interval] = {}
        self.bools: set[int] = set()  # formulas already seen bounded (a DAG: visit each node once)
        self.visits = 0
        for _ in range(6):  # bounds through bounded terms (b < cdiv(M, 64)) need a few rounds
            before = dict(self.var)
            self.cache, self.bools = {}, set()
            for a in atoms:
                self._learn(a)
            if before == self.var:
                break
        # intervals from the rounds above used ranges that later rounds narrowed: start afresh, so the
        # translation's width is computed from final intervals of every subterm (conditions included)
        self.cache, self.bools = {}, set()
        self.visits = 0

    def _count(self) -> None:
        self.visits += 1
        if self.visits > MAX_NODES:
            raise _Refuse

    def _update(self, name: str, lo: int | None, hi: int | None) -> None:
        cur_lo, cur_hi = self.var.get(name, (None, None))
        if lo is not None and (cur_lo is None or lo > cur_lo):
            cur_lo = lo
        if hi is not None and (cur_hi is None or hi < cur_hi):
            cur_hi = hi
        self.var[name] = (cur_lo, cur_hi)  # type: ignore[assignment]

    def _learn(self, a) -> None:
        """Bounds of each variable of a linear atom from the intervals of its other terms."""
        for e, strict in _as_le_zero(a):
            terms, k = _linear(e)
            k += strict  # E < 0 on integers is E + 1 <= 0
            ivs = {}
            for key, (t, c) in terms.items():
                iv = self._try(t)
                if iv is not None:
                    ivs[key] = (c * iv[0], c * iv[1]) if c > 0 else (c * iv[1], c * iv[0])
            for key, (t, c) in terms.items():
                if not _is_int_var(t):
                    continue
                rest = [ivs.get(o) for o in terms if o != key]
                if any(r is None for r in rest):
                    continue
                bound = -k - sum(r[0] for r in rest)  # c * t <= bound
                if c > 0:
                    self._update(t.decl().name(), None, bound // c)
                else:
                    self._update(t.decl().name(), -(bound // -c), None)

    def _try(self, e) -> Interval | None:
        try:
            return self.of(e)
        except _Refuse:
            return None

    def of(self, e) -> Interval:
        key = e.get_id()
        got = self.cache.get(key)
        if got is None:
            self._count()
            got = self._of(e)
            if abs(got[0]) >= LIMIT or abs(got[1]) >= LIMIT:
                raise _Refuse
            self.cache[key] = got
        return got

    def _of(self, e) -> Interval:
        if z3.is_int_value(e):
            v = e.as_long()
            return v, v
        if _is_int_var(e):
            lo, hi = self.var.get(e.decl().name(), (None, None))
            if lo is None or hi is None or lo > hi:
                raise _Refuse
            return lo, hi
        if not z3.is_app(e):
            raise _Refuse
        k = e.decl().kind()
        args = e.children()
        if k == z3.Z3_OP_ADD:
            ivs = [self.of(a) for a in args]
            return sum(i[0] for i in ivs), sum(i[1] for i in ivs)
        if k == z3.Z3_OP_SUB:
            ivs = [self.of(a) for a in args]
            lo, hi = ivs[0]
            for a_lo, a_hi in ivs[1:]:
                lo, hi = lo - a_hi, hi - a_lo
            return lo, hi
        if k == z3.Z3_OP_UMINUS:
            lo, hi = self.of(args[0])
            return -hi, -lo
        if k == z3.Z3_OP_MUL:
            lo, hi = self.of(args[0])
            for a in args[1:]:
                b_lo, b_hi = self.of(a)
                ps = [lo * b_lo, lo * b_hi, hi * b_lo, hi * b_hi]
                lo, hi = min(ps), max(ps)
            return lo, hi
        if k == z3.Z3_OP_IDIV:
            (a_lo, a_hi), (b_lo, b_hi) = self.of(args[0]), self.of(args[1])
            if b_lo <= 0:
                raise _Refuse
            qs = [a_lo // b_lo, a_lo // b_hi, a_hi // b_lo, a_hi // b_hi]
            return min(qs), max(qs)
        if k == z3.Z3_OP_MOD:
            self.of(args[0])
            b_lo, b_hi = self.of(args[1])
            if b_lo <= 0:
                raise _Refuse
            return 0, b_hi - 1
        if k == z3.Z3_OP_ITE:
            self.of_bool(args[0])
            (a_lo, a_hi), (b_lo, b_hi) = self.of(args[1]), self.of(args[2])
            return min(a_lo, b_lo), max(a_hi, b_hi)
        raise _Refuse

    def of_bool(self, e) -> None:
        """Refuses unless every integer subterm of the formula is bounded."""
        key = e.get_id()
        if key in self.bools:
            return
        self._count()
        self._of_bool(e)
        self.bools.add(key)

    def _of_bool(self, e) -> None:
        if z3.is_true(e) or z3.is_false(e):
            return
        if not z3.is_app(e):
            raise _Refuse
        k = e.decl().kind()
        if k in (z3.Z3_OP_AND, z3.Z3_OP_OR, z3.Z3_OP_NOT, z3.Z3_OP_IMPLIES, z3.Z3_OP_XOR):
            for a in e.children():
                self.of_bool(a)
            return
        if k == z3.Z3_OP_ITE:
            for a in e.children():
                self.of_bool(a)
            return
        if k in (z3.Z3_OP_LE, z3.Z3_OP_LT, z3.Z3_OP_GE, z3.Z3_OP_GT, z3.Z3_OP_EQ, z3.Z3_OP_DISTINCT):
            for a in e.children():
                if a.sort() == z3.IntSort():
                    self.of(a)
                elif a.sort() == z3.BoolSort():
                    self.of_bool(a)
                else:
                    raise _Refuse
            return
        if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED and e.sort() == z3.BoolSort():
            return
        raise _Refuse


class _Translate:
    def __init__(self, ranges: _Ranges) -> None:
        self.ranges = ranges
        self.cache: dict[int, object] = {}
        self.vars: dict[str, z3.BitVecRef] = {}
        # the narrowest width that holds every subterm with room for the intermediate values of floor
        # division and remainder (|a - b + 1|, b * (a // b)): dividers cost the square of the width
        big = max([1] + [max(abs(lo), abs(hi)) for lo, hi in ranges.cache.values()])
        self.width = min(W, max(8, big.bit_length() + 3))

    def __call__(self, e):
        key = e.get_id()
        got = self.cache.get(key)
        if got is None:
            got = self._t(e)
            self.cache[key] = got
        return got

    def _t(self, e):
        if z3.is_int_value(e):
            return z3.BitVecVal(e.as_long(), self.width)
        if z3.is_true(e) or z3.is_false(e):
            return e
        if _is_int_var(e):
            name = e.decl().name()
            if name not in self.vars:
                self.vars[name] = z3.BitVec(name, self.width)
            return self.vars[name]
        if z3.is_const(e) and e.sort() == z3.BoolSort() and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            return e
        k = e.decl().kind()
        a = [self(c) for c in e.children()]
        if k == z3.Z3_OP_ADD:
            out = a[0]
            for x in a[1:]:
                out = out + x
            return out
        if k == z3.Z3_OP_SUB:
            out = a[0]
            for x in a[1:]:
                out = out - x
            return out
        if k == z3.Z3_OP_UMINUS:
            return -a[0]
        if k == z3.Z3_OP_MUL:
            out = a[0]
            for x in a[1:]:
                out = out * x
            return out
        if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and self.ranges.of(e.arg(0))[0] >= 0:
            # both operands non-negative: unsigned division (by a power of two it becomes a shift)
            return z3.UDiv(a[0], a[1]) if k == z3.Z3_OP_IDIV else z3.URem(a[0], a[1])
        if k == z3.Z3_OP_IDIV:
            return _floor_div(a[0], a[1])
        if k == z3.Z3_OP_MOD:
            return a[0] - a[1] * _floor_div(a[0], a[1])
        if k == z3.Z3_OP_ITE:
            return z3.If(a[0], a[1], a[2])
        if k == z3.Z3_OP_AND:
            return z3.And(*a)
        if k == z3.Z3_OP_OR:
            return z3.Or(*a)
        if k == z3.Z3_OP_NOT:
            return z3.Not(a[0])
        if k == z3.Z3_OP_IMPLIES:
            return z3.Implies(a[0], a[1])
        if k == z3.Z3_OP_XOR:
            return z3.Xor(a[0], a[1])
        if k == z3.Z3_OP_EQ:
            return a[0] == a[1]
        if k == z3.Z3_OP_DISTINCT:
            return z3.Distinct(*a)
        if k == z3.Z3_OP_LE:
            return a[0] <= a[1]
        if k == z3.Z3_OP_LT:
            return a[0] < a[1]
        if k == z3.Z3_OP_GE:
            return a[0] >= a[1]
        if k == z3.Z3_OP_GT:
            return a[0] > a[1]
        raise _Refuse


def _floor_div(a, b):
    """Floor division for b > 0 (bvsdiv truncates toward zero)."""
    return z3.If(a >= 0, a / b, (a - b + 1) / b)


def has_divmod(formulas) -> bool:
    todo, seen = list(formulas), set()
    while todo:
        e = todo.pop()
        if not isinstance(e, z3.ExprRef) or e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().kind() in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD):
            return True
        todo.extend(e.children() if z3.is_app(e) else [])
    return False


def translate(formulas: list) -> tuple[list, dict[str, z3.BitVecRef]] | None:
    """The bit-vector query equivalent to `formulas` (the ranges they imply added), or None."""
    atoms = _conjuncts(formulas)
    ranges = _Ranges(atoms)
    if any(lo is not None and hi is not None and lo > hi for lo, hi in ranges.var.values()):
        return [z3.BoolVal(False)], {}  # the constraints already contradict each other
    try:
        for f in formulas:
            ranges.of_bool(f)
        tr = _Translate(ranges)
        out = [tr(f) for f in formulas]
    except (_Refuse, z3.Z3Exception):
        return None
    for name, v in tr.vars.items():
        lo, hi = ranges.var[name]
        out.append(v >= lo)
        out.append(v <= hi)
    return out, tr.vars


def decide(formulas: list, timeout_ms: int = 2000) -> tuple[z3.CheckSatResult, dict[str, int] | None]:
    """(unsat, None) is a proof; (sat, values of the integer variables) a model; unknown otherwise
    (not translatable, or the bit-vector solver ran out of budget)."""
    from argus.analysis.symbolic import solver

    got = translate(formulas)
    if got is None:
        return z3.unknown, None
    bv, variables = got
    s = solver(timeout_ms)
    s.add(*bv)
    r = s.check()
    if r != z3.sat:
        return r, None
    m = s.model()
    return r, {name: m.eval(v, model_completion=True).as_signed_long() for name, v in variables.items()}
