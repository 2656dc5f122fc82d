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

A condition may also ask `transposed(B)`: the launch's array B is a transposed view (B.T is C-contiguous, as
`w.t()` of a torch weight); only a route may ask it (the kernel itself reads its arrays C-contiguous).

`specialize COND: kernel="other", P=v, ...` routes the launch to another kernel of the same file (a
different schedule: e.g. few-row GEMMs with the operands' roles swapped), built with the params P=v
(params of that kernel). The route is accepted only when the other kernel computes the same thing: the
same arguments (names, dtypes, dims, defaults) and the same reference block (compared as syntax trees),
so the choice can change speed, never the result; and the other kernel may not assume anything this one
does not (a launch this kernel accepts is never refused by the route), and the params its reference reads
(those that pose the problem: a head dim, causal) are declared alike in both. `argus check` verifies the
other kernel with those params. A caller who sets only such params still gets the route, the values
going with it; a caller who sets a schedule param asks for this kernel: routes are then skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass

from argus.dsl import ast
from argus.dsl.diagnostics import Span, error


@dataclass(frozen=True)
class Specialization:
    span: Span
    cond: ast.Expr
    params: dict[str, object]  # evaluated with the file's (and the caller's) params
    kernel: str | None = None  # `kernel="name"`: routed to that kernel of the file, `params` being its own

    def describe(self) -> str:
        sets = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        to = f"kernel '{self.kernel}'" + (" with " if sets else "") if self.kernel else ""
        return f"specialize at line {self.span.line}: {to}{sets}"


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
    if isinstance(e, ast.Call) and e.func_name == "transposed" and isinstance(e.args[0], ast.Name):
        return env[layout_key(e.args[0].id)]  # the launch's layout facts (argus.api: a KeyError without them)
    if isinstance(e, ast.Call) and e.func_name in ("min", "max", "cdiv"):
        xs = [_eval(x, env) for x in e.args]
        if e.func_name == "cdiv":
            return -(-xs[0] // xs[1])
        return min(xs) if e.func_name == "min" else max(xs)
    raise ValueError(f"cannot evaluate {type(e).__name__} in a specialize condition")


def layout_key(arg: str) -> str:
    """The env entry `transposed(arg)` reads: whether the launch's array is a transposed view (arg.T is
    C-contiguous; argus.runtime.arrays.ArrayInfo.is_transposed)."""
    return "@T:" + arg


def _value(e: ast.Expr, env: dict[str, object], what: str) -> object:
    """_eval, with what it cannot evaluate (a name it lacks aside) as a located error."""
    try:
        return _eval(e, env)
    except KeyError:
        raise
    except (ValueError, TypeError, ArithmeticError) as x:
        raise error("specialize", f"cannot evaluate {what}: {x}", e.span,
                    "use integer arithmetic on dims and params (min, max, cdiv, comparisons)") from None


def evaluate(e: ast.Expr, env: dict[str, object], what: str) -> object:
    """Integer arithmetic on dims and params (as `specialize` conditions), errors located at `e`."""
    return _value(e, env, what)


def names_in(x: object) -> list[ast.Name]:
    """Every Name node read as a value in a syntax tree (expressions, statements, tuples of them)."""
    out: list[ast.Name] = []

    def visit(y: object) -> None:
        if isinstance(y, ast.Name):
            out.append(y)
        elif isinstance(y, ast.Call):  # a called function's name is not a value
            visit((y.args, y.kwargs))
        elif isinstance(y, Span):
            return
        elif is_dataclass(y) and not isinstance(y, type):
            for f in fields(y):
                visit(getattr(y, f.name))
        elif isinstance(y, (tuple, list)):
            for z in y:
                visit(z)

    visit(x)
    return out


def param_values(node: ast.Kernel | ast.Layer, explicit: dict[str, object]) -> dict[str, object]:
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
            target = params.pop("kernel", None)
            if target is not None and not isinstance(target, str):
                raise error("specialize", "kernel= names another kernel of this file, as a string", s.span,
                            'e.g. kernel="gemm_decode"')
            if target is not None and explicit:
                # the caller set params: a route still applies when they only pose the problem (params the
                # reference reads: the route's kernel declares them alike, argus.specialize.route), and
                # they go with it; one that sets a schedule param asks for this kernel
                if any(p not in reference_params(node) for p in explicit):
                    continue
                if not any(p in explicit for p in params):
                    out.append(Specialization(s.span, s.cond, {**explicit, **params}, target))
                continue
            if not any(p in explicit for p in params):
                out.append(Specialization(s.span, s.cond, params, target))
    return out


def _form(x: object) -> object:
    """A syntax tree as nested tuples without source positions (two trees compare equal when they read the same)."""
    if isinstance(x, Span):
        return None
    if is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *(_form(getattr(x, f.name)) for f in fields(x) if not f.name.endswith("span")))
    if isinstance(x, (tuple, list)):
        return tuple(_form(y) for y in x)
    return x


def assumes(node: ast.Kernel | ast.Layer) -> list[ast.Call]:
    """The kernel's top-level `assume(...)` statements (its preconditions on dims and scalars)."""
    return [s.expr for s in node.body if isinstance(s, ast.ExprStmt) and isinstance(s.expr, ast.Call)
            and s.expr.func_name == "assume"]


_assumes = assumes


def reference_params(node: ast.Kernel | ast.Layer) -> frozenset[str]:
    """The params the kernel's reference block reads (they pose the problem: head dim, causal, scale)."""
    params = {s.name for s in node.body if isinstance(s, ast.Param)}
    return frozenset({n.id for n in names_in(node.reference or ())} & params)


def route(node: ast.Kernel, sp: Specialization, kernels: Sequence[ast.Kernel],
          layers: Sequence[ast.Layer] = ()) -> ast.Kernel | ast.Layer:
    """The kernel (or executable layer: argus/layers.py) a routed specialization names, once it is shown to
    compute what `node` computes (same arguments, same reference), to accept every launch `node` accepts (no
    assume `node` lacks, compared as syntax trees; a layer's calls are tested against their kernels' assumes
    by its own check) and to have the params the route sets; else a located error."""
    assert sp.kernel is not None
    target: ast.Kernel | ast.Layer | None = next((k for k in (*kernels, *layers) if k.name == sp.kernel), None)
    if target is None or target.name == node.name:
        why = "is not a kernel of this file" if target is None else "is this kernel"
        raise error("specialize", f"kernel='{sp.kernel}' {why}", sp.span,
                    "kernels: " + ", ".join(k.name for k in (*kernels, *layers) if k.name != node.name))
    if isinstance(target, ast.Layer):
        from argus.layers import plan_layer

        if not plan_layer(target, kernels).executable:
            raise error("specialize", f"layer '{sp.kernel}' has no calls to run", sp.span,
                        "a route to a layer needs its body to call the file's kernels (argus/layers.py)")
    if _form(target.args) != _form(node.args):
        raise error("specialize", f"kernel '{sp.kernel}' does not take the arguments '{node.name}' takes", sp.span,
                    "a route must keep the arguments (names, dtypes, dims and defaults) as they are")
    if node.reference is None or _form(target.reference) != _form(node.reference):
        raise error("specialize", f"kernel '{sp.kernel}' has another reference block than '{node.name}'", sp.span,
                    "a route may change the schedule, not the result: give both kernels the same reference")
    mine = {_form(a) for a in _assumes(node)}
    extra = [a for a in _assumes(target) if _form(a) not in mine]
    if extra:  # a launch this kernel accepts must not be refused by the route's kernel
        raise error("specialize", f"kernel '{sp.kernel}' assumes something '{node.name}' does not (line "
                    f"{extra[0].span.line})", sp.span, "give both kernels the same assume statements")
    decls = {s.name: s for s in target.body if isinstance(s, ast.Param)}
    mine_decls = {s.name: s for s in node.body if isinstance(s, ast.Param)}
    for p in sorted(reference_params(node)):
        if p not in decls or _form(decls[p].default) != _form(mine_decls[p].default):
            raise error("specialize", f"kernel '{sp.kernel}' does not declare the param '{p}' the reference reads "
                        f"as '{node.name}' does", sp.span, "declare it with the same default in both kernels: "
                        "it poses the problem, and a caller's value goes with the route")
    declared = set(decls)
    unknown = [p for p in sp.params if p not in declared]
    if unknown:
        raise error("specialize", f"the route sets '{unknown[0]}', which is not a param of kernel '{sp.kernel}'",
                    sp.span, "params: " + (", ".join(sorted(declared)) or "none"))
    return target


def pick(node: ast.Kernel, explicit: dict[str, object], dims: dict[str, int]) -> Specialization | None:
    """The first specialization whose condition holds for `dims` (None: the file's params)."""
    specs = specializations(node, explicit)
    if not specs:
        return None
    layouts = {layout_key(a.name): False for a in node.args if a.dims}  # C-contiguous unless told otherwise
    env = {**param_values(node, explicit), **layouts, **dims}
    for sp in specs:
        if _value(sp.cond, env, "the specialize condition"):
            return sp
    return None


def _params(node: ast.Kernel) -> set[str]:
    return {s.name for s in node.body if isinstance(s, ast.Param)}


def selected(node: ast.Kernel, defines: dict[str, object]) -> Specialization | None:
    """The specialization `defines` (params and dims, as -D gives them) select, or None: none matches, or a
    dim a condition reads is not given (the file's params)."""
    params = _params(node)
    try:
        return pick(node, {k: v for k, v in defines.items() if k in params},
                    {k: v for k, v in defines.items() if k not in params})
    except KeyError:
        return None


def with_specialization(node: ast.Kernel, defines: dict[str, object],
                        kernels: Sequence[ast.Kernel] = ()) -> tuple[ast.Kernel, dict[str, object]]:
    """The kernel and `defines` (params and dims, as -D gives them) that the specialization its dims select
    makes (its params on top; a route's kernel, with the dims and its params), when every dim the
    conditions read is given; `kernels` are the file's, for routes."""
    sp = selected(node, defines)
    if sp is None:
        return node, dict(defines)
    dims = {k: v for k, v in defines.items() if k not in _params(node)}
    if sp.kernel is not None:
        return route(node, sp, kernels), {**dims, **sp.params}
    return node, {**defines, **sp.params}
