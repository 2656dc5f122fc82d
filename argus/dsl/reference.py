"""The `reference:` block: NumPy semantics, evaluated in float64 by a small tree walker (never `exec`).

Only the names below can be called; arguments are NumPy arrays (tensor arguments, as float64) and
Python scalars (dims, params, scalar arguments).
"""

from __future__ import annotations

import functools

from argus.dsl import ast
from argus.dsl.diagnostics import error

# The functions a reference block may call (the semantic checker uses this list without NumPy).
REFERENCE_NAMES = frozenset({
    "exp", "exp2", "log", "sqrt", "abs", "tanh", "max", "min", "sum", "mean", "maximum", "minimum", "where",
    "transpose", "swapaxes", "reshape", "arange", "zeros", "ones", "full", "softmax", "topk", "silu",
    "take_along_axis", "repeat", "einsum", "causal_mask", "triu", "tril", "matmul", "sigmoid", "one_hot",
    "float", "int", "expert_of_rows", "erf", "gelu", "argmax", "concatenate", "cumsum", "log2", "rsqrt",
})


@functools.lru_cache(maxsize=1)
def _tables():
    """NumPy implementations, built on first use (importing NumPy costs start-up time)."""
    import numpy as np

    def _one_hot(idx, n):
        """Rows of np.eye(n) at idx, and a row of zeros for an index outside [0, n): the verifier's model
        of one_hot (argus.analysis.reference_terms), decided so; numpy's eye indexing would wrap a
        negative index to the last columns and raise past n."""
        idx = np.asarray(idx, dtype=np.int64)
        return (idx[..., None] == np.arange(int(n))).astype(np.float64)

    def _softmax(x, axis=-1):
        # a row with no unmasked entry is undefined (NaN), as it is for the kernel
        with np.errstate(invalid="ignore"):
            m = np.max(x, axis=axis, keepdims=True)
            e = np.exp(x - m)
            return e / np.sum(e, axis=axis, keepdims=True)

    def _topk(x, k, axis=-1):
        """Indices of the k largest entries along ``axis``, largest first (ties: lower index first)."""
        idx = np.argsort(-x, axis=axis, kind="stable")
        return np.take(idx, np.arange(int(k)), axis=axis)

    def _silu(x):
        return x / (1.0 + np.exp(-x))

    def _erf(x):
        import math

        a = np.asarray(x, dtype=np.float64)
        return np.vectorize(math.erf, otypes=[np.float64])(a) if a.ndim else math.erf(float(a))

    def _gelu(x):  # the exact (erf) form, torch's default
        return 0.5 * x * (1.0 + _erf(np.asarray(x, dtype=np.float64) / np.sqrt(2.0)))

    def _expert_of_rows(offs, m):
        """Expert of each of m sorted rows, from expert offsets (expert e owns rows offs[e]..offs[e+1])."""
        offs = np.asarray(offs, dtype=np.int64)
        e = np.searchsorted(offs, np.arange(int(m)), side="right") - 1
        return np.clip(e, 0, max(0, len(offs) - 2))

    def _causal_mask(sq, sk):
        """Additive mask: -inf where key position > query position (queries aligned to the end)."""
        q = np.arange(int(sq))[:, None] + (int(sk) - int(sq))
        k = np.arange(int(sk))[None, :]
        return np.where(k > q, -np.inf, 0.0)

    functions = {
        "exp": np.exp, "exp2": np.exp2, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "tanh": np.tanh,
        "max": np.max, "min": np.min, "sum": np.sum, "mean": np.mean, "maximum": np.maximum,
        "minimum": np.minimum, "where": np.where, "transpose": np.transpose, "swapaxes": np.swapaxes,
        "reshape": np.reshape, "arange": np.arange, "zeros": np.zeros, "ones": np.ones, "full": np.full,
        "softmax": _softmax, "topk": _topk, "silu": _silu, "take_along_axis": np.take_along_axis,
        "repeat": np.repeat, "einsum": np.einsum, "causal_mask": _causal_mask, "triu": np.triu,
        "tril": np.tril, "matmul": np.matmul, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "one_hot": _one_hot,
        "float": float, "int": int, "expert_of_rows": _expert_of_rows, "erf": _erf, "gelu": _gelu,
        "argmax": np.argmax, "concatenate": np.concatenate, "cumsum": np.cumsum, "log2": np.log2,
        "rsqrt": lambda x: 1.0 / np.sqrt(x),
    }

    binops = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "//": np.floor_divide,
              "%": np.mod, "@": np.matmul, "**": np.power, "&": np.bitwise_and, "|": np.bitwise_or,
              "^": np.bitwise_xor}
    cmps = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
            ">=": np.greater_equal}
    assert set(functions) == REFERENCE_NAMES
    return np, functions, binops, cmps


def evaluate_reference(stmts: tuple[ast.Stmt, ...], env: dict[str, object]) -> dict[str, object]:
    """Run the reference block over ``env`` (name -> value); returns the environment after it."""
    np = _tables()[0]
    env = dict(env)
    env.setdefault("inf", np.inf)
    env.setdefault("pi", np.pi)
    # -inf - -inf and the like are NaN by design (a row with no unmasked key); comparisons skip them
    with np.errstate(invalid="ignore", divide="ignore"):
        for s in stmts:
            assert isinstance(s, ast.Assign)
            val = _eval(s.value, env)
            if len(s.targets) == 1:
                env[s.targets[0].id] = val
            else:
                for t, v in zip(s.targets, val):
                    env[t.id] = v
    return env


def _eval(e: ast.Expr, env: dict[str, object]):
    try:
        return _eval_inner(e, env)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        if getattr(exc, "_argus_located", False):
            raise
        raise error("reference", f"reference block failed: {exc}", e.span,
                    "the reference block uses NumPy semantics; check shapes and arguments") from None
    except MemoryError as exc:  # e.g. zeros(10**12): NumPy refuses the allocation (or the memory limit does)
        raise error("reference", f"the reference block ran out of memory: {exc}", e.span,
                    "allocate only what the outputs need (the shapes of the tensor arguments)") from None


def _eval_inner(e: ast.Expr, env):
    np, functions, binops, cmps = _tables()
    if isinstance(e, ast.Const):
        return e.value
    if isinstance(e, ast.Name):
        if e.id not in env:
            raise error("undefined-name", f"undefined name '{e.id}' in the reference block", e.span)
        return env[e.id]
    if isinstance(e, ast.TupleExpr):
        return tuple(_eval(x, env) for x in e.elts)
    if isinstance(e, ast.BinOp):
        return binops[e.op](_eval(e.left, env), _eval(e.right, env))
    if isinstance(e, ast.UnaryOp):
        v = _eval(e.operand, env)
        return np.logical_not(v) if e.op == "not" else (-v if e.op == "-" else ~v)
    if isinstance(e, ast.Compare):
        return cmps[e.op](_eval(e.left, env), _eval(e.right, env))
    if isinstance(e, ast.BoolOp):
        f = np.logical_and if e.op == "and" else np.logical_or
        return f(_eval(e.left, env), _eval(e.right, env))
    if isinstance(e, ast.IfExp):
        return _eval(e.then, env) if _eval(e.cond, env) else _eval(e.orelse, env)
    if isinstance(e, ast.Attribute):
        v = _eval(e.value, env)
        if e.attr == "T":
            return np.swapaxes(v, -1, -2)
        if e.attr == "shape":
            return np.shape(v)
        raise error("reference", f"unknown attribute '.{e.attr}' in the reference block", e.span)
    if isinstance(e, ast.Subscript):
        v = _eval(e.value, env)
        idx = tuple(_index(i, env) for i in e.items)
        return np.asarray(v)[idx]
    if isinstance(e, ast.Call):
        fn = functions.get(e.func_name or "")
        if fn is None:
            raise error("undefined-name", f"unknown reference function '{e.func_name}'", e.func.span)
        args = [_eval(a, env) for a in e.args]
        kwargs = {k.name: _eval(k.value, env) for k in e.kwargs}
        return fn(*args, **kwargs)
    raise error("reference", f"{type(e).__name__} is not allowed in the reference block", e.span)


def _index(i: ast.Expr, env):
    if isinstance(i, ast.Slice):
        if i.length is not None:
            start = int(_eval(i.start, env))
            return slice(start, start + int(_eval(i.length, env)))
        return slice(None if i.start is None else _eval(i.start, env),
                     None if i.stop is None else _eval(i.stop, env))
    if isinstance(i, ast.Const) and i.value is None:
        return None
    return _eval(i, env)
