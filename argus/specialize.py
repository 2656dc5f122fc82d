"""Launch-time parameter choice: `specialize COND: P=v, ...` statements of a kernel.

    kernel gemm_ws(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):
        param BM = 128
        ...
        specialize M <= 128: BM=64, BN=64, CONSUMERS=1, STAGES=8

When a kernel is launched (`argus.load(...)(A, B, C)` on GPU arrays, `argus run`), the first
`specialize` whose condition holds for the launch's dims gives the params it is built with, on top of
the file's defaults. A param the caller sets (`argus.load(path, BM=...)`, `-D BM=...`) is never
overridden: a specialization that would set one is skipped whole. `argus check` verifies the default
set and every specialization's set, each for every dims (so the choice can never select an unproved
kernel); `argus build` builds the file's params (give a specialization's with -D to build that one).
The conditions are plain integer arithmetic on dims and params (min, max, cdiv, comparisons,
and/or/not), evaluated here without the verifier.
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.dsl import ast
from argus.dsl.diagnostics import Span, error


@dataclass(frozen=True)
class Specialization:
    span: Span
    cond: ast.Expr
    params: dict[str, object]  # evaluated with the file's (and the caller's) params

    def describe(self) -> str:
        sets = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"specialize at line {self.span.line}: {sets}"


def _eval(e: ast.Expr, env: dict[str, object]) -> object:
    if isinstance(e, ast.Const):
        return e.value
    if isinstance(e, ast.Name):
        return env[e.id]
    if isinstance(e, ast.UnaryOp):
        v = _eval(e.operand, env)
        return {"-": lambda: -v, "not": lambda: not v, "~": lambda: ~v}[e.op]()
    if isinstance(e, ast.BoolOp):
        left = _eval(e.left, env)
        if e.op == "and":
            return left and _eval(e.right, env)
        return left or _eval(e.right, env)
    if isinstance(e, ast.Compare):
        a, b = _eval(e.left, env), _eval(e.right, env)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op]
    if isinstance(e, ast.BinOp):
        a, b = _eval(e.left, env), _eval(e.right, env)
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
               "%": lambda: a % b, "/": lambda: a / b, "**": lambda: a ** b}
        return ops[e.op]()
    if isinstance(e, ast.IfExp):
        return _eval(e.then, env) if _eval(e.cond, env) else _eval(e.orelse, env)
    if isinstance(e, ast.Call) and e.func_name in ("min", "max", "cdiv"):
        xs = [_eval(x, env) for x in e.args]
        if e.func_name == "cdiv":
            return -(-xs[0] // xs[1])
        return min(xs) if e.func_name == "min" else max(xs)
    raise ValueError(f"cannot evaluate {type(e).__name__} in a specialize condition")


def _value(e: ast.Expr, env: dict[str, object], what: str) -> object:
    """_eval, with what it cannot evaluate (a name it lacks aside) as a located error."""
    try:
        return _eval(e, env)
    except KeyError:
        raise
    except (ValueError, TypeError, ArithmeticError) as x:
        raise error("specialize", f"cannot evaluate {what}: {x}", e.span,
                    "use integer arithmetic on dims and params (min, max, cdiv, comparisons)") from None


def param_values(node: ast.Kernel, explicit: dict[str, object]) -> dict[str, object]:
    """The kernel's params: each `param` default (earlier params in scope), unless `explicit` sets it."""
    env: dict[str, object] = {}
    for s in node.body:
        if isinstance(s, ast.Param):
            if s.name in explicit:
                env[s.name] = explicit[s.name]
                continue
            try:
                env[s.name] = _eval(s.default, env)
            except (KeyError, ValueError, TypeError, ArithmeticError):
                pass  # a default this evaluator cannot compute: a condition reading it selects nothing
    return env


def specializations(node: ast.Kernel, explicit: dict[str, object] | None = None) -> list[Specialization]:
    """The kernel's `specialize` statements in order, minus those that would set a param `explicit` fixes."""
    explicit = explicit or {}
    if not any(isinstance(s, ast.Specialize) for s in node.body):
        return []
    env = param_values(node, explicit)
    out = []
    for s in node.body:
        if isinstance(s, ast.Specialize):
            params = {kw.name: _value(kw.value, env, f"the value of {kw.name}") for kw in s.params}
            if not any(p in explicit for p in params):
                out.append(Specialization(s.span, s.cond, params))
    return out


def pick(node: ast.Kernel, explicit: dict[str, object], dims: dict[str, int]) -> Specialization | None:
    """The first specialization whose condition holds for `dims` (None: the file's params)."""
    specs = specializations(node, explicit)
    if not specs:
        return None
    env = {**param_values(node, explicit), **dims}
    for sp in specs:
        if _value(sp.cond, env, "the specialize condition"):
            return sp
    return None


def with_specialization(node: ast.Kernel, defines: dict[str, object]) -> dict[str, object]:
    """`defines` (params and dims, as -D gives them) plus the params of the specialization its dims
    select, when every dim the conditions read is given."""
    params = {s.name for s in node.body if isinstance(s, ast.Param)}
    explicit = {k: v for k, v in defines.items() if k in params}
    dims = {k: v for k, v in defines.items() if k not in params}
    try:
        sp = pick(node, explicit, dims)
    except KeyError:  # a dim the condition reads is not given: the file's params
        return dict(defines)
    return {**defines, **sp.params} if sp is not None else dict(defines)
