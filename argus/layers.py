"""Executable layers: a `layer` whose body runs kernels of its file in sequence.

    layer gemm_ws_splitk(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):
        param KCHUNK = 4096
        assume(K % 8 == 0)                     # a precondition: checked at each call, and the composition
                                               # test below draws only dims where it holds
        SPLITS = cdiv(K, KCHUNK)               # an integer of the dims and params
        WS = empty(f32[SPLITS, M, N])          # a workspace, allocated per call beside the arguments
        gemm_splitk(A, B, WS, KCHUNK=KCHUNK)   # a kernel of this file: arguments by position, params by keyword
        splitk_reduce(WS, C)
    reference:
        C = A @ B

A layer without calls is a declaration only (its reference is the ground truth of a composition that host
code runs, e.g. argus.moe). With calls, `argus.load(path, "layer")(A, B, C)` runs them (interpreter for
NumPy arrays, GPU for CUDA arrays, workspaces allocated by the arrays' framework), and a kernel's
`specialize` may route to the layer (argus/specialize.py) when it has the kernel's arguments and reference.

What `argus check` proves or tests (argus.layers.check_layer_plan): every call names a kernel of the file
with arguments of its dtypes and ranks; a workspace is written by a call before a call reads it; every
output of the layer is written; the params a call passes are constants given the layer's params (they are
compiled in), and each called kernel is verified with them (by the caller: argus.cli); the kernels'
references, composed in the layer's order on random float64 inputs at several dims, equal the layer's
reference, and at those dims every called kernel's `assume`s hold (a launch the layer makes is never
refused). The composition is a numeric test, not a proof: the verifier proves each kernel against its own
reference, the test their sequence against the layer's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.dsl import ast
from argus.dsl.diagnostics import Diagnostic, Span, error
from argus.dsl.types import DTYPES


@dataclass(frozen=True)
class Binding:
    name: str
    expr: ast.Expr
    span: Span


@dataclass(frozen=True)
class Workspace:
    name: str
    dtype: str
    dims: tuple[ast.Expr, ...]
    span: Span


@dataclass(frozen=True)
class Call:
    kernel: ast.Kernel
    args: tuple[str, ...]  # layer arguments, workspaces or bindings, in the kernel's argument order
    params: tuple[ast.Keyword, ...]
    span: Span
    transposed: tuple[bool, ...] = ()  # per argument: passed as `X.T` (its last two axes swapped; read only)

    @property
    def writes(self) -> set[str]:
        """The layer's names this call writes: those bound to the arguments the kernel's reference assigns."""
        outs = outputs_of(self.kernel.reference)
        return {n for a, n in zip(self.kernel.args, self.args) if a.name in outs}


@dataclass(frozen=True)
class LayerPlan:
    layer: ast.Layer
    steps: tuple[Binding | Workspace | Call, ...]

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(s for s in self.steps if isinstance(s, Call))

    @property
    def executable(self) -> bool:
        return bool(self.calls)


def outputs_of(reference: Sequence[ast.Stmt] | None) -> set[str]:
    """The names a reference block assigns (a kernel's or layer's outputs)."""
    return {t.id for s in reference or () if isinstance(s, ast.Assign) for t in s.targets}


def plan_layer(layer: ast.Layer, kernels: Sequence[ast.Kernel]) -> LayerPlan:
    """The layer's steps, checked against the file's kernels; a located error for what cannot run."""
    by_name = {k.name: k for k in kernels}
    args = {a.name: a for a in layer.args}
    params = {s.name for s in layer.body if isinstance(s, ast.Param)}
    ints = params | {d for a in layer.args for d in a.dims or () if isinstance(d, str)} | \
        {a.name for a in layer.args if a.dims is None}
    tensors: dict[str, tuple[str, int]] = {a.name: (a.dtype, len(a.dims)) for a in layer.args if a.dims is not None}
    written = {a.name for a in layer.args}  # the layer's arguments hold the caller's data
    workspaces: set[str] = set()
    steps: list[Binding | Workspace | Call] = []
    hint = ("a layer holds `param`s, `assume(...)` preconditions, integer bindings (`S = cdiv(K, KCHUNK)`), "
            "workspaces (`WS = empty(f32[S, M, N])`) and calls of this file's kernels (`gemm(A, B, WS, BM=128)`)")
    for s in layer.body:
        if isinstance(s, (ast.Param, ast.Pass)):
            continue
        if isinstance(s, ast.ExprStmt) and isinstance(s.expr, ast.Call) and s.expr.func_name == "assume":
            if len(s.expr.args) != 1 or s.expr.kwargs:
                raise error("layer", "assume takes one condition", s.expr.span, "e.g. assume(K % 16 == 0)")
            _int_names(s.expr.args[0], ints, "an assume")  # a precondition on dims, params, scalars and bindings
            continue
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            name = s.targets[0].id
            if name in args or name in params or name in workspaces or name in ints - params:
                raise error("layer", f"'{name}' is already defined in layer '{layer.name}'", s.span,
                            "give the binding or workspace a new name")
            v = s.value
            if isinstance(v, ast.Call) and v.func_name == "empty":
                ws = _workspace(name, v, ints, s.span)
                workspaces.add(name)
                tensors[name] = (ws.dtype, len(ws.dims))
                steps.append(ws)
            else:
                _int_names(v, ints, "an integer binding")
                ints.add(name)
                steps.append(Binding(name, v, s.span))
            continue
        if isinstance(s, ast.ExprStmt) and isinstance(s.expr, ast.Call) and s.expr.func_name in by_name:
            if any(isinstance(t, ast.Specialize) and any(kw.name == "kernel" and isinstance(kw.value, ast.Const)
                                                         and kw.value.value == layer.name for kw in t.params)
                   for t in by_name[s.expr.func_name].body):
                raise error("layer", f"kernel '{s.expr.func_name}' routes to layer '{layer.name}', which calls it",
                            s.expr.func.span, "call a kernel that does not route back to this layer")
            call = _call(s.expr, by_name[s.expr.func_name], tensors, ints, params, written, s.span)
            written |= call.writes
            steps.append(call)
            continue
        if isinstance(s, ast.ExprStmt) and isinstance(s.expr, ast.Call) and s.expr.func_name:
            raise error("layer", f"'{s.expr.func_name}' is not a kernel of this file", s.expr.func.span,
                        "kernels: " + (", ".join(by_name) or "none"))
        raise error("layer", "a layer cannot hold this statement", s.span, hint)
    plan = LayerPlan(layer, tuple(steps))
    if plan.executable:
        made = {a for c in plan.calls for a in c.writes}
        for out in sorted(outputs_of(layer.reference) & set(args)):
            if out not in made:
                raise error("layer", f"no call of layer '{layer.name}' writes its output '{out}'", layer.name_span,
                            f"pass '{out}' to a kernel whose reference block assigns that argument")
    return plan


def _workspace(name: str, v: ast.Call, ints: set[str], span: Span) -> Workspace:
    shape = v.args[0] if len(v.args) == 1 and not v.kwargs else None
    if not (isinstance(shape, ast.Subscript) and isinstance(shape.value, ast.Name) and shape.value.id in DTYPES):
        raise error("layer", "a workspace is `empty(DTYPE[dim, ...])`", v.span, "e.g. WS = empty(f32[S, M, N])")
    for d in shape.items:
        _int_names(d, ints, "a workspace dimension")
    return Workspace(name, shape.value.id, tuple(shape.items), span)


def _int_names(e: ast.Expr, ints: set[str], what: str) -> None:
    """`e` is integer arithmetic on names already defined (dims, params, scalars, earlier bindings)."""
    from argus.specialize import names_in

    for n in names_in(e):
        if n.id not in ints:
            raise error("undefined-name", f"'{n.id}' in {what} is not a dim, param or earlier binding of the layer",
                        n.span, "define it above with `NAME = ...` or as a `param`")


def _call(c: ast.Call, k: ast.Kernel, tensors: dict[str, tuple[str, int]], ints: set[str], params: set[str],
          written: set[str], span: Span) -> Call:
    need = [a for a in k.args if a.default is None]
    if not len(need) <= len(c.args) <= len(k.args):
        raise error("layer", f"kernel '{k.name}' takes {len(need)}"
                    + (f" to {len(k.args)}" if len(need) != len(k.args) else "") + f" arguments, got {len(c.args)}",
                    c.span, "signature: " + ", ".join(a.name for a in k.args))
    names, flips = [], []
    reads = _reads(k)
    outs = outputs_of(k.reference)
    for a, x in zip(k.args, c.args):
        flip = isinstance(x, ast.Attribute) and x.attr == "T" and isinstance(x.value, ast.Name)
        if flip:
            assert isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name)
            if a.dims is None or len(a.dims) < 2 or a.name in outs:
                raise error("layer", f"'{x.value.id}.T' passed as '{a.name}' of '{k.name}': a transposed view is "
                            "an input of rank 2 or more", x.span, "pass the array itself, or a kernel that reads it")
            x = x.value
        flips.append(flip)
        if not isinstance(x, ast.Name):
            raise error("layer", f"argument '{a.name}' of '{k.name}' must be a name of the layer", x.span,
                        "pass a layer argument, a workspace, an integer binding, or `X.T` (a transposed view)")
        if a.dims is None:
            if x.id not in ints:
                raise error("layer", f"'{x.id}' is not a scalar of the layer (argument '{a.name}' of '{k.name}')",
                            x.span)
        else:
            if x.id not in tensors:
                raise error("layer", f"'{x.id}' is not a tensor of the layer (argument '{a.name}' of '{k.name}')",
                            x.span, "tensors: " + ", ".join(tensors))
            dt, rank = tensors[x.id]
            if dt != a.dtype or rank != len(a.dims):
                raise error("layer", f"'{x.id}' is {dt} of rank {rank}; argument '{a.name}' of '{k.name}' is "
                            f"{a.dtype} of rank {len(a.dims)}", x.span)
            if a.name in reads and x.id not in written:
                raise error("layer", f"workspace '{x.id}' is read by '{k.name}' before any call writes it", x.span,
                            "call the kernel that produces it first")
        names.append(x.id)
    declared = {s.name for s in k.body if isinstance(s, ast.Param)}
    for kw in c.kwargs:
        if kw.name not in declared:
            raise error("layer", f"'{kw.name}' is not a param of kernel '{k.name}'", kw.span,
                        "params: " + (", ".join(sorted(declared)) or "none"))
        from argus.specialize import names_in

        for n in names_in(kw.value):
            if n.id not in params:
                raise error("layer", f"the param {kw.name} of '{k.name}' reads '{n.id}', which is not a param of "
                            "the layer", n.span, "a kernel's params are compiled in and verified per value: "
                            "compute them from the layer's params only (a route or -D sets those)")
    return Call(k, tuple(names), c.kwargs, span, tuple(flips))


def _reads(k: ast.Kernel) -> set[str]:
    """Tensor arguments the kernel's reference reads (its inputs); without a reference, all of them."""
    if k.reference is None:
        return {a.name for a in k.args}
    from argus.specialize import names_in

    outs = outputs_of(k.reference)
    read: set[str] = set()
    assigned: set[str] = set()
    for s in k.reference:  # an output the reference reads after assigning it is not an input
        if isinstance(s, ast.Assign):
            read |= {n.id for n in names_in(s.value) if n.id not in assigned}
            assigned |= {t.id for t in s.targets}
    return {a.name for a in k.args if a.name in read or a.name not in outs}


# ---- values of the layer's integers ----

def layer_params(layer: ast.Layer, explicit: dict[str, object]) -> dict[str, object]:
    from argus.specialize import param_values

    return param_values(layer, explicit)  # type: ignore[arg-type]


def integers(plan: LayerPlan, dims: dict[str, int], params: dict[str, object],
             scalars: dict[str, object] | None = None) -> dict[str, object]:
    """Dims, params, scalars and the layer's bindings, evaluated in order."""
    from argus.specialize import evaluate

    env: dict[str, object] = {**params, **dims, **(scalars or {})}
    for s in plan.steps:
        if isinstance(s, Binding):
            env[s.name] = evaluate(s.expr, env, "the binding " + s.name)
    return env


def call_params(call: Call, env: dict[str, object]) -> dict[str, object]:
    from argus.specialize import evaluate

    return {kw.name: evaluate(kw.value, env, f"the param {kw.name}") for kw in call.params}


def workspace_shape(ws: Workspace, env: dict[str, object]) -> tuple[int, ...]:
    from argus.specialize import evaluate

    shape = tuple(int(evaluate(d, env, f"a dimension of {ws.name}")) for d in ws.dims)  # type: ignore[call-overload]
    if any(x < 0 for x in shape):
        raise error("layer", f"workspace {ws.name} would have the shape {shape}", ws.span,
                    "its dimensions must not be negative")
    return shape


# ---- the composition test ----

COMMON_SIZES = (16, 32, 48, 64, 80, 96, 128, 192, 256)  # head dims and the like an assume may pin (D == 64)


def composition_dims(layer: ast.Layer, seed: int = 0, accept=lambda dims: True,
                     fixed: dict[str, int] | None = None, settle=lambda dims: dims) -> list[dict[str, int]]:
    """Dims to test the composition at: all small, then each dim in turn large (a long K, a long row); each
    set drawn again (up to 400 times) until `accept` (the layer's assumes) holds, and left out if it never does.
    A small dim is 1..40 or, one draw in three, a common size (an assume may pin a head dim); `fixed` dims
    (given with -D) are never drawn; `settle` may set drawn dims the assumes pin (D == 64) before `accept`."""
    fixed = fixed or {}
    names = [n for n in dict.fromkeys(d for a in layer.args for d in a.dims or () if isinstance(d, str))
             if n not in fixed]
    rng = random.Random(seed)

    def draw(make) -> dict[str, int] | None:
        for _ in range(400):
            dims = settle({**make(), **fixed})
            if accept(dims):
                return dims
        return None

    def small_dim() -> int:
        return rng.choice(COMMON_SIZES) if rng.random() < 1 / 3 else rng.randint(1, 40)

    small = [d for d in (draw(lambda: {n: small_dim() for n in names}) for _ in range(2)) if d is not None]
    if not small:
        return []
    large = (draw(lambda n=n: {**small[0], n: 9000 + rng.randint(0, 999)}) for n in names)
    return small + [d for d in large if d is not None]


def _conjuncts(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.BoolOp) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def layer_assume_failed(plan: LayerPlan, env: dict[str, object]) -> ast.Call | None:
    """The first of the layer's `assume`s that does not hold in `env` (dims, params, scalars, bindings)."""
    from argus.specialize import assumes, evaluate

    for a in assumes(plan.layer):
        if not evaluate(a.args[0], env, "an assume"):
            return a
    return None


def check_composition(plan: LayerPlan, explicit: dict[str, object], *, seed: int = 0,
                      max_elements: int = 40_000_000, dims: dict[str, object] | None = None) -> list[Diagnostic]:
    """Problems found by composing the called kernels' references on random float64 inputs (empty: none),
    located at the call (or, for a wrong result, at the layer's name). `dims`: runtime dims given with -D,
    held at those values in every tested set."""
    from argus.dsl.reference import evaluate_reference
    from argus.specialize import param_values

    layer = plan.layer
    problems: list[Diagnostic] = []
    rng = np.random.default_rng(seed)
    lp = layer_params(layer, explicit)
    scalars = {a.name: _scalar_value(a, lp) for a in layer.args if a.dims is None}

    def holds(dims: dict[str, int]) -> bool:  # the composition is tested where the layer's assumes hold
        return layer_assume_failed(plan, integers(plan, dims, lp, scalars)) is None

    names = {d for a in layer.args for d in a.dims or () if isinstance(d, str)}
    given = {**(dims or {}), **explicit}
    fixed = {n: int(v) for n, v in given.items() if n in names and isinstance(v, int) and not isinstance(v, bool)}
    pinnable = names - set(fixed)

    def settle(dims: dict[str, int]) -> dict[str, int]:
        """Dims an assume states equal to an expression (D == 64, H == HKV * GROUP) take its value, in
        the order the assumes give them: random draws alone rarely meet several such equalities."""
        from argus.specialize import assumes, evaluate

        dims = dict(dims)
        for _ in range(3):
            for a in assumes(layer):
                for c in _conjuncts(a.args[0]):
                    if not (isinstance(c, ast.Compare) and c.op == "=="):
                        continue
                    for name, other in ((c.left, c.right), (c.right, c.left)):
                        if isinstance(name, ast.Name) and name.id in pinnable:
                            try:
                                v = evaluate(other, integers(plan, dims, lp, scalars), "an assume")
                            except Exception:  # an expression over what is not drawn yet: leave it
                                continue
                            if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                                dims[name.id] = v
                            break
        return dims

    tested = composition_dims(layer, seed, holds, fixed, settle)
    if not tested:
        # not a fault of the layer: nothing was tested (unknown), and -D can say where to test it
        return [Diagnostic("warning", "layer-composition", f"the composition of layer '{layer.name}' was not "
                           "tested: no dims drawn satisfy its assumes", layer.name_span,
                           ("the test draws dims of 1..40, common sizes (16..256) and 9000..9999; give the "
                            "dims the assumes pin with -D (e.g. -D D=64)",))]
    for dims in tested:
        sizes = [math.prod(dims[d] if isinstance(d, str) else d for d in a.dims) for a in layer.args if a.dims]
        if sum(sizes) > max_elements:
            continue
        env = integers(plan, dims, lp, scalars)
        arrays = {a.name: _random(a.dtype, tuple(dims[d] if isinstance(d, str) else d for d in a.dims), rng)
                  for a in layer.args if a.dims is not None}
        outs = outputs_of(layer.reference)
        for name in outs & set(arrays):
            arrays[name] = np.full(arrays[name].shape, np.nan)
        at = ", ".join(f"{k}={v}" for k, v in dims.items())
        for s in plan.steps:
            if isinstance(s, Workspace):
                shape = workspace_shape(s, env)
                if math.prod(shape) > max_elements:
                    problems.append(_problem(f"at {at}, workspace {s.name} would hold {math.prod(shape)} elements "
                                             f"(shape {shape})", s.span, "size workspaces by the layer's dims: "
                                             "the composition test allocates them in float64"))
                    return problems
                arrays[s.name] = np.full(shape, np.nan)
            elif isinstance(s, Call):
                k = s.kernel
                kp = param_values(k, call_params(s, env))
                bound = dict(zip([a.name for a in k.args], s.args))
                views = {a.name: (np.swapaxes(arrays[n], -1, -2) if f else arrays[n])
                         for a, n, f in zip(k.args, s.args, _flips(s)) if a.dims is not None}
                kdims: dict[str, int] = {}
                for a in k.args:
                    if a.dims is None or a.name not in bound:
                        continue
                    for d, n in zip(a.dims, views[a.name].shape):
                        if isinstance(d, int) and d != n or kdims.setdefault(str(d), n) != n:
                            problems.append(_problem(f"at {at}, '{k.name}' gets {bound[a.name]} of shape "
                                                     f"{views[a.name].shape} for its {a.name}: "
                                                     f"[{', '.join(map(str, a.dims))}]", s.span,
                                                     "pass arrays whose dims agree with the kernel's signature"))
                            return problems
                kenv = {**kp, **kdims}
                for a in k.args:
                    if a.dims is None:
                        kenv[a.name] = env[bound[a.name]] if a.name in bound else _scalar_value(a, kp)
                failed = _failed_assume(k, kenv)
                if failed is not None:
                    problems.append(_problem(f"at {at}, '{k.name}' is called outside its assume at line {failed}",
                                             s.span, "the launch would be refused: choose the workspace dims and "
                                             "params so that the kernel's assumes hold for every dims"))
                    return problems
                refenv = {**kenv, **{a.name: views[a.name] for a in k.args if a.dims and a.name in bound}}
                got = evaluate_reference(k.reference or (), refenv)
                for o in outputs_of(k.reference):
                    if o in bound:
                        arrays[bound[o]] = np.broadcast_to(np.asarray(got[o], dtype=np.float64),
                                                           arrays[bound[o]].shape).copy()
        want = evaluate_reference(layer.reference, {**env, **{n: v for n, v in arrays.items()
                                                              if n not in outs}})
        for o in sorted(outs & set(arrays)):
            w = np.broadcast_to(np.asarray(want[o], dtype=np.float64), arrays[o].shape)
            g = arrays[o]
            scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1e-30)
            bad = ~np.isclose(g, w, rtol=1e-9, atol=1e-9 * scale, equal_nan=False)
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                problems.append(_problem(f"at {at}, the called kernels' references composed give {o}{list(idx)} = "
                                         f"{g[idx]!r}, the layer's reference {w[idx]!r} ({int(bad.sum())} of "
                                         f"{bad.size} elements differ)", layer.name_span,
                                         "the calls must compute what the layer's reference block says"))
                return problems
    return problems


def _flips(call: Call) -> tuple[bool, ...]:
    return call.transposed or (False,) * len(call.args)


def _problem(message: str, span: Span, note: str) -> Diagnostic:
    return Diagnostic("error", "layer-composition", message, span, (note,))


def _scalar_value(a: ast.Arg, env: dict[str, object]) -> object:
    if a.default is None:
        return 1.0 if DTYPES[a.dtype].is_float else 1
    from argus.specialize import evaluate

    return evaluate(a.default, env, f"the default of {a.name}")


def _random(dtype: str, shape: tuple[int, ...], rng) -> np.ndarray:
    if DTYPES[dtype].is_float:
        return rng.standard_normal(shape)
    return rng.integers(0, 4, size=shape).astype(np.float64)


def _failed_assume(k: ast.Kernel, env: dict[str, object]) -> int | None:
    """The line of the first top-level assume of `k` that does not hold in `env` (None: all hold)."""
    from argus.specialize import assumes, evaluate

    for a in assumes(k):
        try:
            ok = evaluate(a.args[0], env, "an assume")
        except (KeyError, ArithmeticError):
            continue  # reads a name only the kernel body defines: the launch checks it
        if not ok:
            return a.span.line
    return None


# ---- running ----

class Layer:
    """A loaded executable layer: call it with the layer's arguments (NumPy: the interpreter; CUDA arrays:
    the GPU), by position or name; workspaces are allocated per call (by torch's or cupy's pool)."""

    def __init__(self, plan: LayerPlan, params: dict[str, object], text: str | None = None):
        self.plan = plan
        self.node = plan.layer
        self.params = dict(params)
        self.text = text
        self._kernels: dict[tuple, Any] = {}

    @property
    def name(self) -> str:
        return self.node.name

    def __repr__(self) -> str:
        s = self.node.span
        return f"<argus.Layer {self.name} at {s.path}:{s.line}>"

    def _kernel(self, call: Call, params: dict[str, object]):
        from argus.api import Kernel

        key = (call.kernel.name, *sorted(params.items()))
        if key not in self._kernels:
            self._kernels[key] = Kernel(call.kernel, params, self.text)
        return self._kernels[key]

    def _bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        names = [a.name for a in self.node.args]
        if len(args) > len(names):
            raise TypeError(f"layer {self.name} takes {len(names)} arguments, got {len(args)}")
        bound = dict(zip(names, args), **kwargs)
        missing = [n for n in names if n not in bound and next(a for a in self.node.args if a.name == n).default
                   is None]
        if missing:
            raise TypeError(f"layer {self.name}: missing argument {missing[0]}")
        for a in self.node.args:  # a scalar left out takes its declared default (eps: f32 = 1e-5)
            if a.name not in bound and a.default is not None:
                from argus.ir.lower import const_default

                bound[a.name] = const_default(a)
        return bound

    def _dims(self, bound: dict[str, Any]) -> dict[str, int]:
        from argus.runtime.arrays import ArgumentError

        dims: dict[str, int] = {}
        for a in self.node.args:
            if a.dims is None or a.name not in bound:
                continue
            shape = tuple(int(x) for x in bound[a.name].shape)
            if len(shape) != len(a.dims):
                raise ArgumentError(f"argument {a.name}: expected rank {len(a.dims)}, got shape {shape}", a.span)
            for d, n in zip(a.dims, shape):
                if isinstance(d, int) and d != n or dims.setdefault(str(d), n) != n:
                    raise ArgumentError(f"argument {a.name}: dimension {d} is {n}, but {dims.get(str(d), d)} "
                                        "elsewhere", a.span)
        return dims

    def prepare(self, *args: Any, stream: Any = None, **kwargs: Any):
        """Workspaces allocated and every call's launch prepared (GPU arrays): a callable that runs the layer."""
        return self._steps(args, kwargs, stream, now=False)

    def __call__(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        """Run the layer: workspaces allocated, each call launched as it comes (a GPU kernel called again
        with one layout reuses its first call's checks, argus.runtime.launch)."""
        self._steps(args, kwargs, stream, now=True)

    def _steps(self, args: tuple, kwargs: dict, stream: Any, now: bool):
        bound = self._bind(args, kwargs)
        dims = self._dims(bound)
        env = integers(self.plan, dims, layer_params(self.node, self.params),
                       {a.name: bound[a.name] for a in self.node.args if a.dims is None and a.name in bound})
        failed = layer_assume_failed(self.plan, env)
        if failed is not None:
            from argus.runtime.arrays import ArgumentError

            values = ", ".join(f"{d}={v}" for d, v in dims.items())
            raise ArgumentError(f"the precondition at line {failed.span.line} of layer {self.name} (an assume) does "
                                f"not hold for {values}", failed.span)
        arrays: dict[str, Any] = {a.name: bound[a.name] for a in self.node.args if a.dims is not None}
        host = any(isinstance(v, np.ndarray) for v in arrays.values())
        launches = []
        for s in self.plan.steps:
            if isinstance(s, Workspace):
                arrays[s.name] = _empty(s.dtype, workspace_shape(s, env), next(iter(bound.values())), host)
            elif isinstance(s, Call):
                k = self._kernel(s, call_params(s, env))
                cargs = [(_transposed(arrays[n], host) if f else arrays[n]) if n in arrays else env[n]
                         for n, f in zip(s.args, _flips(s))]
                if now and host:
                    k(*cargs)
                elif now:
                    k(*cargs, stream=stream)
                elif host:
                    launches.append(lambda k=k, cargs=cargs: k(*cargs))
                else:
                    launches.append(k.prepare(*cargs, stream=stream))
        return _Sequence(tuple(launches), arrays)


@dataclass(frozen=True)
class _Sequence:
    launches: tuple
    keep: dict  # the workspaces live as long as the prepared sequence

    def __call__(self) -> None:
        for f in self.launches:
            f()


def _transposed(x: Any, host: bool) -> Any:
    """The array's last two axes swapped: a view (C-contiguous when x is a transposed view of a C-contiguous
    array, which is what routes by `transposed(X)` pass on); NumPy gets a copy (the interpreter reads dense
    arrays; a transposed argument is only read)."""
    if host:
        return np.ascontiguousarray(np.swapaxes(x, -1, -2))
    if type(x).__module__.split(".")[0] == "torch":
        return x.transpose(-1, -2)
    return x.swapaxes(-1, -2)


def _empty(dtype: str, shape: tuple[int, ...], like: Any, host: bool) -> Any:
    from argus.interp.numerics import storage_dtype

    if host:
        return np.zeros(shape, dtype=storage_dtype(DTYPES[dtype]))
    root = type(like).__module__.split(".")[0]
    if root == "torch":
        from argus.runtime.bench import torch_dtype

        return __import__("torch").empty(shape, dtype=torch_dtype(dtype), device=like.device)
    if root == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=storage_dtype(DTYPES[dtype]) if dtype != "bf16" else None)
    raise TypeError(f"a layer's workspace needs torch or cupy arrays to allocate beside (got {type(like).__name__})")
