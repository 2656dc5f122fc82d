"""Z3 vocabulary of the verifier: runtime dims, block ids and scalar IR expressions as integer terms.

Compile-time parameters are already constants in the IR, so index arithmetic is linear with div/mod
by constants. Runtime dims range over [1, DIM_MAX] unless fixed with -D or restricted by assume().
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import z3

from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir

DIM_MAX = 1 << 16  # the documented default range of a runtime dimension: 1 .. 65536
SOLVER_TIMEOUT_MS = 5000


class Unsupported(Exception):
    """A construct the verifier cannot encode: the affected checks report `unknown`."""

    def __init__(self, message: str, span=None):
        super().__init__(message)
        self.span = span


# Solver budgets are resource limits (deterministic: the same verdict on a loaded machine and in CI),
# about RLIMIT_PER_MS units per millisecond of a solver's time here, with a wall-clock limit WALL_FACTOR
# times the budget as a safety net against a query whose resource count stalls. At 4x a MoE bug's verdicts
# went unknown in CI while the 2 cores ran about five solver processes (2026-12-06); unloaded, no query here
# meets the wall clock before its resource limit.
RLIMIT_PER_MS = 4000
WALL_FACTOR = 10


def budget(s: z3.Solver, timeout_ms: int) -> z3.Solver:
    # a preprocessing solver spends about three times as long per resource unit here
    per_ms = RLIMIT_PER_MS // 3 if getattr(s, "preprocess", False) else RLIMIT_PER_MS
    s.set("rlimit", int(timeout_ms) * per_ms)
    s.set("timeout", int(timeout_ms) * WALL_FACTOR)
    if isinstance(s, CheckedSolver):
        s.budget_ms = int(timeout_ms)
    return s


class CheckedSolver(z3.Solver):
    """A solver whose `sat` comes with a model that satisfies what was asked.

    Z3 (5.4.1 here) has answered `sat` with a model that falsifies an assertion on a query it proves
    unsat in a fresh process: its preprocessing then depends on the terms other queries created earlier
    in the same context, so a verdict could depend on the order in which obligations were solved. A
    violation built on such a model would be a false alarm, so every `sat` is evaluated against the
    assertions and the assumptions; a model that falsifies one is asked again on fresh solvers with other
    random seeds, and the answer is `unknown` when none gives a model that holds."""

    RETRIES = 3

    def __init__(self, ctx: z3.Context | None = None, preprocess: bool = False) -> None:
        ctx = ctx if ctx is not None else z3.main_ctx()
        super().__init__(solver=_preprocessed(ctx) if preprocess else None, ctx=ctx)
        self.preprocess = preprocess
        self.budget_ms = SOLVER_TIMEOUT_MS
        self._model: z3.ModelRef | None = None

    def check(self, *assumptions):
        self._model = None
        r = super().check(*assumptions)
        if r != z3.sat:
            return r
        asked = [*self.assertions(), *assumptions]
        m = super().model()
        if holds(m, asked):
            return r
        for seed in range(1, self.RETRIES + 1):
            s = z3.Solver(solver=_preprocessed(self.ctx) if self.preprocess else None, ctx=self.ctx)
            s.set("random_seed", seed)
            s.set("rlimit", self.budget_ms * (RLIMIT_PER_MS // 3 if self.preprocess else RLIMIT_PER_MS))
            s.set("timeout", self.budget_ms * WALL_FACTOR)
            s.add(*self.assertions())
            r = s.check(*assumptions)
            if r == z3.unsat:
                return r
            if r == z3.sat and holds(s.model(), asked):
                self._model = s.model()
                return r
        return z3.unknown

    def model(self) -> z3.ModelRef:
        return self._model if self._model is not None else super().model()


# A `preprocess` solver first simplifies its query and solves its defining equalities
# away (the canonical coordinates an obligation pins to an element, `c == 128 * block_x + o`), then runs
# Z3's default SMT core. Z3's own preprocessing skips that when the query has quantifiers (a reduction's
# existential): the footprint obligations of a FlashAttention store took 0.2-2.5 s each without it and
# 3-10 ms with it; path feasibility over tile counts times heads (nonlinear) stops timing out. It costs
# a few milliseconds a query (the pipeline runs afresh each check), so small queries go without it.
PREPROCESS = ("simplify", "solve-eqs", "smt")


_MAIN_TACTIC: list = []  # built once for the main context; a fresh context (one query) builds its own


def _preprocessed(ctx: z3.Context):
    """A new Z3 solver object (the C handle z3.Solver wraps) running PREPROCESS."""
    if ctx is z3.main_ctx():
        if not _MAIN_TACTIC:
            _MAIN_TACTIC.append(z3.Then(*PREPROCESS, ctx=ctx))
        tactic = _MAIN_TACTIC[0]
    else:
        tactic = z3.Then(*PREPROCESS, ctx=ctx)
    return z3.Z3_mk_solver_from_tactic(ctx.ref(), tactic.tactic)


def holds(m: z3.ModelRef, formulas) -> bool:
    """False only when `m` makes one of `formulas` false (a quantified one it cannot decide counts as held)."""
    for f in formulas:
        v = m.eval(f, model_completion=True)
        if z3.is_false(v):
            return False
    return True


def solver(timeout_ms: int = SOLVER_TIMEOUT_MS, ctx: z3.Context | None = None, preprocess: bool = False) -> z3.Solver:
    return budget(CheckedSolver(ctx, preprocess), timeout_ms)


def as_int(v):
    if isinstance(v, bool):
        return z3.IntVal(int(v))
    if isinstance(v, int):
        return z3.IntVal(v)
    return v


def zdiv(a, b, positive: bool = True):
    """Floor division, as the interpreter and the generated code (ag_floordiv) divide. z3's Int division is
    Euclidean, which agrees with floor for positive divisors; `positive=False` (a divisor not known to be
    positive) takes floor(a / b) = (-a) / (-b) for a negative one. A zero divisor is the division-by-zero
    check's (argus/analysis/checks/obligations.py): z3 leaves x / 0 unconstrained."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    a, b = as_int(a), as_int(b)
    return a / b if positive or isinstance(b, int) else z3.If(b > 0, a / b, (-a) / (-b))


def zmod(a, b, positive: bool = True):
    """Floor remainder (the divisor's sign), as zdiv."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    a, b = as_int(a), as_int(b)
    return a % b if positive or isinstance(b, int) else a - b * zdiv(a, b, False)


def zmin(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return z3.If(as_int(a) <= as_int(b), as_int(a), as_int(b))


def zmax(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return z3.If(as_int(a) >= as_int(b), as_int(a), as_int(b))


def simplify_int(v):
    """Python int when the term is a numeral."""
    if isinstance(v, (int, bool)):
        return int(v)
    s = z3.simplify(v)
    if z3.is_int_value(s):
        return s.as_long()
    return s


@dataclass
class Context:
    """The symbolic configuration: dims, block ids, grid, and the constraints relating them."""

    kernel: ir.Kernel
    defines: dict[str, object]
    dims: dict[str, z3.ArithRef] = field(default_factory=dict)
    block: tuple[z3.ArithRef, ...] = ()
    grid: tuple = ()
    constraints: list = field(default_factory=list)
    scalars: dict[str, z3.ArithRef] = field(default_factory=dict)
    # Tensor contents read by scalar loads (load(T[i, j])): one uninterpreted function per tensor,
    # arity = rank (Int -> Int for integer tensors, Int -> Real for float ones), and the applications
    # met so far (counterexamples print their values: offs[1] = 3).
    functions: dict[str, z3.FuncDeclRef] = field(default_factory=dict)
    applications: list = field(default_factory=list)
    application_ids: set = field(default_factory=set)  # z3 terms are hash-consed: membership by id
    on_load: object = None  # callback(load node, index terms): the executor records the access
    # callback(node, divisor term) -> the divisor is positive on every path here: the executor obliges a
    # non-zero divisor (division-by-zero) where it is not; None: divisors of unknown sign divide as floor
    on_div: object = None
    positive_terms: dict = field(default_factory=dict)  # z3 id -> positive under `constraints` (Context.positive)
    # assume(lambda i: cond, over=N): (lambda, N term, env at the assume); instantiated by the checks
    # that need them (output coverage), never asserted as quantifiers
    quantified: list = field(default_factory=list)
    # z3 ids of the constraints assume() added (a precondition: an execution where one fails is outside
    # the contract), as against a path's branch conditions
    assumed: set = field(default_factory=set)
    # a reference's expert_of_rows(offs, n) functions (name -> the offsets tensor): argus.analysis.sequences
    segments: dict[str, str] = field(default_factory=dict)
    # (id of a quantified assume, index) -> (it, its instance): contract_breaks scans the same indices per model
    instances: dict = field(default_factory=dict)

    def positive(self, b) -> bool:
        """b > 0 under the configuration's constraints alone (dims >= 1, block ids in the grid, assumes so far)."""
        key = b.get_id()
        hit = self.positive_terms.get(key)
        if hit is None:
            s = solver(1000, preprocess=True)
            s.add(*self.constraints, as_int(b) <= 0)
            hit = self.positive_terms[key] = s.check() == z3.unsat
        return hit

    def instantiate(self, q, v):
        """The quantified assume q at index v: 0 <= v < N implies cond(v)."""
        lam, over, env = q
        saved, self.on_load, self.on_div = (self.on_load, self.on_div), None, None
        try:
            body = to_bool(Evaluator(self, {**env, lam.params[0]: v}).scalar(lam.body))
        finally:
            self.on_load, self.on_div = saved
        body = z3.BoolVal(body) if isinstance(body, bool) else body
        return z3.Implies(z3.And(as_int(v) >= 0, as_int(v) < as_int(over)), body)

    def tensor_value(self, name: str, dtype, idx: tuple):
        fn = self.functions.get(name)
        if fn is None:
            sort = z3.RealSort() if dtype.is_float else z3.IntSort()
            fn = z3.Function(f"{name}", *([z3.IntSort()] * len(idx)), sort)
            self.functions[name] = fn
        term = fn(*[as_int(i) for i in idx])
        if term.get_id() not in self.application_ids:
            self.application_ids.add(term.get_id())
            self.applications.append(term)
        return term

    @staticmethod
    def create(kernel: ir.Kernel, defines: dict[str, object]) -> Context:
        c = Context(kernel, dict(defines))
        for d in kernel.dims:
            v = z3.Int(d)
            c.dims[d] = v
            if d in defines:
                c.constraints.append(v == int(defines[d]))
            else:
                c.constraints += [v >= 1, v <= DIM_MAX]
        for s in kernel.scalars:
            c.scalars[s.name] = z3.Real(s.name) if s.dtype.is_float else z3.Int(s.name)
        c.block = tuple(z3.Int(f"block_{a}") for a in "xyz")
        grid = [Evaluator(c, {}).scalar(g) for g in kernel.grid]
        grid += [1] * (3 - len(grid))
        c.grid = tuple(grid)
        for b, g in zip(c.block, grid):
            c.constraints += [b >= 0, b < as_int(g)]
        return c


class Evaluator:
    """Scalar IR expressions -> z3 terms (or Python ints when constant)."""

    def __init__(self, ctx: Context, env: dict[str, object]):
        self.ctx = ctx
        self.env = env

    def scalar(self, e: ir.Expr):
        if isinstance(e.type, TileT):
            raise Unsupported("a tile where a scalar was expected", e.span)
        m = getattr(self, "_" + type(e).__name__, None)
        if m is None:
            raise Unsupported(f"{type(e).__name__} in a scalar expression", e.span)
        return m(e)

    def _Const(self, e: ir.Const):
        v = e.value
        if isinstance(v, float):
            # float data never reaches an index; only finite values can be z3 literals
            return z3.RealVal(v) if math.isfinite(v) else z3.RealVal(0)
        return int(v) if v is not None else 0

    def _Var(self, e: ir.Var):
        if e.name in self.env:
            return self.env[e.name]
        if e.name in self.ctx.dims:
            return self.ctx.dims[e.name]
        if e.name in self.ctx.scalars:
            return self.ctx.scalars[e.name]
        raise Unsupported(f"'{e.name}' has no value here", e.span)

    def _Load(self, e: ir.Load):
        if not isinstance(e.type, ScalarT):
            raise Unsupported("a tile load where a scalar was expected", e.span)
        idx = tuple(self.scalar(s) for s in e.ref.starts)
        if self.ctx.on_load is not None:
            self.ctx.on_load(e, idx)
        return self.ctx.tensor_value(e.ref.base, e.ref.dtype, idx)

    def _Special(self, e: ir.Special):
        if e.kind == "block_id":
            return self.ctx.block[e.axis]
        if e.kind == "num_blocks":
            return self.ctx.grid[e.axis]
        raise Unsupported(f"{e.kind}() in index arithmetic (per-thread values are not modelled)", e.span)

    def _Bin(self, e: ir.Bin):
        a, b = self.scalar(e.a), self.scalar(e.b)
        op = e.op
        if op in ("//", "%"):
            positive = self._divisor_positive(e, b)
            return zdiv(a, b, positive) if op == "//" else zmod(a, b, positive)
        if op in ("+", "-", "*"):
            if isinstance(a, int) and isinstance(b, int):
                return {"+": a + b, "-": a - b, "*": a * b}[op]
            a, b = as_int(a), as_int(b)
            return {"+": a + b, "-": a - b, "*": a * b}[op]
        if op == "/":
            return as_int(a) / as_int(b)
        raise Unsupported(f"operator {op} in index arithmetic", e.span)

    def _divisor_positive(self, e: ir.Expr, b) -> bool:
        if isinstance(b, (int, float)):
            return b > 0
        if _is_real(b) or (isinstance(e.type, ScalarT) and e.type.dtype.is_float):
            return True  # float division by zero is defined (inf / nan): no obligation, the term as before
        if self.ctx.on_div is not None:
            return bool(self.ctx.on_div(e, b))
        return self.ctx.positive(b)

    def _Un(self, e: ir.Un):
        a = self.scalar(e.a)
        if e.op == "-":
            return -a
        if e.op == "not":
            return z3.Not(to_bool(a))
        raise Unsupported(f"operator {e.op}", e.span)

    def _Cmp(self, e: ir.Cmp):
        a, b = self.scalar(e.a), self.scalar(e.b)
        if e.op == "and":
            return z3.And(to_bool(a), to_bool(b))
        if e.op == "or":
            return z3.Or(to_bool(a), to_bool(b))
        if isinstance(a, int) and isinstance(b, int):
            return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]
        a, b = as_int(a), as_int(b)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]

    def _Select(self, e: ir.Select):
        c = to_bool(self.scalar(e.cond))
        a, b = self.scalar(e.a), self.scalar(e.b)
        if isinstance(c, bool):
            return a if c else b
        return z3.If(c, as_int(a), as_int(b))

    def _Math(self, e: ir.Math):
        args = [self.scalar(a) for a in e.args]
        if e.fn == "cdiv":
            a, b = args
            if isinstance(b, int) and b > 0:
                return zdiv(a + b - 1, b)
            if self._divisor_positive(e, b):
                return zdiv(as_int(a) + as_int(b) - 1, b)
            return -zdiv(-as_int(a), b, False)  # ceil(a / b) for either sign, as ag_cdiv and the interpreter
        if e.fn == "min":
            return zmin(*args)
        if e.fn == "max":
            return zmax(*args)
        if e.fn == "cast" and isinstance(e.type, ScalarT) and not e.type.dtype.is_float:
            return args[0] if not _is_real(args[0]) else z3.ToInt(args[0])
        if e.fn == "cast" and isinstance(e.type, ScalarT):
            a = args[0]
            return float(a) if isinstance(a, int) else a if _is_real(a) else z3.ToReal(as_int(a))
        if e.fn == "abs":
            a = args[0]
            return abs(a) if isinstance(a, int) else z3.If(a >= 0, a, -a)
        if e.fn in FLOAT_FUNCTIONS and isinstance(e.type, ScalarT) and e.type.dtype.is_float:
            # float scalar math (a softmax scale, a temperature): a real value the verifier does not
            # evaluate; an uninterpreted function keeps equal inputs equal
            f = z3.Function(f"float_{e.fn}", *([z3.RealSort()] * len(args)), z3.RealSort())
            return f(*[z3.ToReal(as_int(a)) if not _is_real(a) else a for a in args])
        raise Unsupported(f"{e.fn}() in index arithmetic", e.span)


FLOAT_FUNCTIONS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "silu", "gelu")


def _is_real(v) -> bool:
    return isinstance(v, float) or (isinstance(v, z3.ArithRef) and v.is_real())


def to_bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    if z3.is_bool(v):
        return v
    return v != 0
