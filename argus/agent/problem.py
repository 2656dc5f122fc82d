"""What a tuning run varies: the problem sizes, the shapes drawn from them, and the inputs at each.

A *shape* is a dict of problem sizes. For most kernels those are the kernel's own dims. Shapes must
satisfy the starting kernel's assumes over its dims and params (`assume(D == HD)`, `assume(H == HKV *
GROUP)`, `assume(K % 8 == 0)`): `ShapeSpace` translates those assumes to Z3 once and every shape the
run uses — the small correctness shapes, the default targets, the unseen irregular and at-scale ones
the referee draws — is solved from them, with preferences (tiled dims multiples of 64 or irregular,
counting dims such as batch and heads small) kept as far as the assumes allow. Dims the kernel cuts
into tiles are those that appear in a `cdiv`; the others count things and stay small, so a check
shape never asks the interpreter for 128 heads.

Inputs: `DenseInputs` draws random floats (the referee's usual inputs). A kernel over routing
metadata (integer tensors whose contents its quantified assumes constrain: expert offsets, a tile
schedule) cannot run on random integers. The general way, `argus.analysis.contract_inputs`, solves the
contents from the contract with Z3, which takes about 50 s for moe_up at M = 74 — too slow for every
evaluation and impossible at target scale. So for a kernel that names the routing builder in its launch
statement (`metadata="moe_routing"`, argus.metadata; as `argus run` and the bench) `RoutedInputs` draws a
real routing:
the problem sizes are the routing's (tokens T, experts E, top-k KTOP, HID, F) and the kernel's dims
(M = T·KTOP, the tile count NT for the candidate's own BM) follow per candidate; the interpreter checks
the kernel's assumes on those inputs as it runs. Other data-dependent kernels are refused with the
reason (`problem_for`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import z3

from argus.ir import nodes as ir
from argus.ir.transform import walk

Shape = dict[str, int]
SMALL_LIMIT = 512  # dims of solved small shapes stay below this


class ProblemError(ValueError):
    """The tuner cannot state this kernel's problem (its inputs or its shapes)."""


class _NoZ3(Exception):
    pass


def _z3(e: ir.Expr | None, env: dict[str, object]) -> z3.ExprRef | int | float | bool:
    """An IR scalar expression over dims, params and pure lets, in Z3 (raises _NoZ3 otherwise)."""
    if e is None:
        raise _NoZ3("none")
    if isinstance(e, ir.Const):
        if e.value is None or isinstance(e.value, str):
            raise _NoZ3("const")
        return e.value
    if isinstance(e, ir.Var):
        if e.name in env:
            return env[e.name]  # type: ignore[return-value]
        raise _NoZ3(e.name)
    if isinstance(e, ir.Bin):
        a, b = _z3(e.a, env), _z3(e.b, env)
        if isinstance(a, float) or isinstance(b, float):
            raise _NoZ3("float")
        if e.op in ("//", "%") and not isinstance(b, int):
            raise _NoZ3("nonlinear division")
        ops = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a / b if not
               isinstance(a, int) else a // b, "%": lambda: a % b}
        if e.op not in ops:
            raise _NoZ3(e.op)
        return ops[e.op]()  # type: ignore[no-any-return]
    if isinstance(e, ir.Un) and e.op in ("-", "not"):
        a = _z3(e.a, env)
        if e.op == "-":
            return -a  # type: ignore[operator]
        return z3.Not(a) if isinstance(a, z3.ExprRef) else (not a)
    if isinstance(e, ir.Cmp):
        a, b = _z3(e.a, env), _z3(e.b, env)
        if e.op in ("and", "or"):
            a = a if isinstance(a, z3.ExprRef) else z3.BoolVal(bool(a))
            b = b if isinstance(b, z3.ExprRef) else z3.BoolVal(bool(b))
            return z3.And(a, b) if e.op == "and" else z3.Or(a, b)
        return {"==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b, "<=": lambda: a <= b,
                ">": lambda: a > b, ">=": lambda: a >= b}[e.op]()  # type: ignore[operator]
    if isinstance(e, ir.Math) and e.fn in ("cdiv", "min", "max") and len(e.args) == 2:
        a, b = (_z3(x, env) for x in e.args)
        if e.fn == "cdiv":
            if not isinstance(b, int) or b <= 0:
                raise _NoZ3("cdiv by a non-constant")
            return (a + b - 1) / b if not isinstance(a, int) else -(-a // b)  # type: ignore[operator]
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b) if e.fn == "min" else max(a, b)
        return z3.If(a <= b, a, b) if e.fn == "min" else z3.If(a >= b, a, b)  # type: ignore[operator]
    if isinstance(e, ir.Select):
        c = _z3(e.cond, env)
        if isinstance(c, bool):
            return _z3(e.a, env) if c else _z3(e.b, env)
        return z3.If(c, _z3(e.a, env), _z3(e.b, env))
    raise _NoZ3(type(e).__name__)


def tiled_dims(kernel: ir.Kernel) -> set[str]:
    """Dims the kernel cuts into tiles: they appear in a cdiv (grid or body)."""
    out: set[str] = set()
    for e in walk((kernel.grid, kernel.body)):
        if isinstance(e, ir.Math) and e.fn == "cdiv":
            out |= {x.name for x in walk(e) if isinstance(x, ir.Var)}
    return out & set(kernel.dims)


def dim_constraints(kernel: ir.Kernel, v: dict[str, z3.ArithRef]) -> list:
    """The kernel's assumes over dims and params only (outside loops), as Z3 constraints on `v`."""
    env: dict[str, object] = {n: val for n, val in kernel.params if isinstance(val, (int, bool))}
    env.update(v)
    out = []

    def go(stmts) -> None:
        for s in stmts:
            if isinstance(s, ir.Let):
                try:
                    env[s.name] = _z3(s.value, env)
                except (_NoZ3, z3.Z3Exception, TypeError, ZeroDivisionError):
                    env.pop(s.name, None)
            elif isinstance(s, ir.Assume) and s.over is None:
                try:
                    c = _z3(s.cond, env)
                except (_NoZ3, z3.Z3Exception, TypeError, ZeroDivisionError):
                    continue  # reads data or block ids: the interpreter checks it where it runs
                if isinstance(c, bool):
                    if not c:
                        out.append(z3.BoolVal(False))
                else:
                    out.append(c)
            elif isinstance(s, (ir.Role, ir.For)):
                go(s.body)  # a persistent tile loop keeps the dims' assumes inside it

    go(kernel.body)
    return out


@dataclass
class ShapeSpace:
    """The problem sizes a run varies and the constraints every shape must meet."""

    names: tuple[str, ...]
    tiled: frozenset[str]
    constraints: list = field(default_factory=list)
    vars: dict[str, z3.ArithRef] = field(default_factory=dict)
    counting_pref: dict[str, int] = field(default_factory=dict)

    def solve(self, prefs: dict[str, int | list[int]], limit: int | None = SMALL_LIMIT) -> Shape | None:
        """A shape meeting the constraints and, dim by dim in order, the first preferred value the
        constraints still allow (a list: candidates in order; an int v: v, then v+1 .. v+15)."""
        s = z3.Solver()
        s.set("timeout", 3000)
        s.add(*self.constraints)
        wanted = [v for p in prefs.values() for v in (p if isinstance(p, list) else [p])]
        for n in self.names:
            s.add(self.vars[n] >= 1)
            if limit is not None:
                s.add(self.vars[n] <= max([limit, *wanted]))
        if s.check() != z3.sat:
            return None
        for n, p in prefs.items():
            if n not in self.vars:
                continue
            for v in (p if isinstance(p, list) else range(p, p + 16)):
                s.push()
                s.add(self.vars[n] == v)
                if s.check() == z3.sat:
                    break
                s.pop()
        if s.check() != z3.sat:
            return None
        m = s.model()
        return {n: m.eval(self.vars[n], model_completion=True).as_long() for n in self.names}

    def fixed(self) -> frozenset[str]:
        """Sizes the constraints pin to one value (a head dim equal to a param)."""
        base = self.solve({})
        if base is None:
            return frozenset()
        out = set()
        for n in self.names:
            s = z3.Solver()
            s.set("timeout", 2000)
            s.add(*self.constraints, *(self.vars[x] >= 1 for x in self.names), self.vars[n] != base[n])
            if s.check() == z3.unsat:
                out.add(n)
        return frozenset(out)

    def checks(self) -> list[Shape]:
        """Two small shapes: tiled sizes 64 / 128 in one and irregular (not multiples of 8 where the
        assumes allow) in the other; counting sizes 2 and 3."""
        out: list[Shape] = []
        irregular = (97, 65, 129, 83, 150, 113)
        for regular in (True, False):
            prefs: dict[str, int | list[int]] = {}
            for i, n in enumerate(self.names):
                if n in self.tiled:
                    prefs[n] = [64, 128, 192, 256] if regular else \
                        [irregular[i % len(irregular)] + j for j in range(0, 24)]
                else:
                    prefs[n] = self.counting_pref.get(n, 2) + (0 if regular else 1)
            got = self.solve(prefs)
            if got is not None and got not in out:
                out.append(got)
        if not out:
            raise ProblemError("no small shape satisfies the kernel's assumes over its dims")
        return out

    def targets(self, big: int = 4096, counting: int = 8) -> list[Shape]:
        """The timed shape: tiled dims at `big`; a dim the assumes bound below `big` at its bound (a row
        length a kernel takes up to its tile, assume(N <= BN): timed at 8 columns a norm moved 0.01 TB/s);
        other counting dims (batch, heads) at `counting`."""
        prefs: dict[str, int | list[int]] = {}
        for n in self.names:
            widest = None if n in self.tiled else self.widest(n, big)
            prefs[n] = big if n in self.tiled else widest if widest is not None else \
                self.counting_pref.get(n, counting)
        got = self.solve(prefs, limit=None)
        if got is None:
            raise ProblemError("no target shape satisfies the kernel's assumes over its dims; give --shapes")
        return [got]

    def widest(self, n: str, cap: int) -> int | None:
        """The largest value of dim `n` the constraints allow with every dim in [1, cap], when they bound
        it below cap; None when they do not (or the solver gives up)."""
        o = z3.Optimize()
        o.set("timeout", 3000)
        o.add(*self.constraints, *(self.vars[x] >= 1 for x in self.names), *(self.vars[x] <= cap for x in self.names))
        h = o.maximize(self.vars[n])
        if o.check() != z3.sat:
            return None
        v = h.value()
        return v.as_long() if z3.is_int_value(v) and v.as_long() < cap else None

    def draw(self, prefs: dict[str, int]) -> Shape | None:
        """A valid shape near a drawn one (each size the first of v .. v+15 the assumes allow)."""
        return self.solve(dict(prefs), limit=max([SMALL_LIMIT, *prefs.values()]) + 16)


def space_for(kernel: ir.Kernel) -> ShapeSpace:
    names = tuple(kernel.dims)
    v = {d: z3.Int(d) for d in names}
    return ShapeSpace(names, frozenset(tiled_dims(kernel)), dim_constraints(kernel, v), v)


# ---- inputs ----
def data_ints(kernel: ir.Kernel) -> list[str]:
    """Integer inputs some assume reads (data a contract constrains)."""
    ints = {t.name for t in kernel.tensors if t.name in kernel.inputs and not t.dtype.is_float}
    via: dict[str, set[str]] = {}  # let name -> tensors its value loads from (through earlier lets too)

    def reads(e) -> set[str]:
        out: set[str] = set()
        for x in walk(e):
            if isinstance(x, ir.Load) and x.ref is not None:
                out.add(x.ref.base)
            elif isinstance(x, ir.Var):
                out |= via.get(x.name, set())
        return out

    read: set[str] = set()
    for s in walk(kernel.body):
        if isinstance(s, ir.Let):
            via[s.name] = reads(s.value)
        elif isinstance(s, ir.Assume):
            read |= reads((s.cond, s.over))
    return sorted(ints & read)


@dataclass(frozen=True)
class DenseInputs:
    """Problem sizes are the kernel's dims; inputs are fresh random data."""

    name = "dense"

    def dims(self, kernel: ir.Kernel, shape: Shape, seed: int = 0) -> Shape:
        missing = [d for d in kernel.dims if d not in shape]
        if missing:
            raise KeyError(f"no size for {', '.join(missing)}")
        return {d: int(v) for d, v in shape.items() if d in kernel.dims}  # in the shape's order

    def arrays(self, kernel: ir.Kernel, shape: Shape, rng: np.random.Generator, big: bool = False,
               adversarial: bool = True) -> tuple[Shape, dict[str, np.ndarray]]:
        from argus.agent.sampling import big_inputs
        from argus.interp.run import make_arrays

        dims = self.dims(kernel, shape)
        return dims, (big_inputs if big else make_arrays)(kernel, dims, rng)

    def space(self, kernel: ir.Kernel) -> ShapeSpace:
        return space_for(kernel)


ROUTING = ("T", "E", "KTOP", "HID", "F")


@dataclass(frozen=True)
class RoutedInputs:
    """Problem sizes are a routing's (T, E, KTOP, HID, F); a candidate's dims and metadata follow from
    a real top-k routing (argus.moe) for its own tile size."""

    name = "routed"

    def _routing(self, kernel: ir.Kernel, shape: Shape, seed: int, adversarial: bool):
        from argus import moe

        e, k = int(shape["E"]), int(shape["KTOP"])
        return moe.routed_dims(kernel, tokens=int(shape["T"]), experts=e, top_k=min(k, e), hid=int(shape["HID"]),
                               ffn=int(shape["F"]), seed=seed, empty_expert=adversarial and e > k)

    def dims(self, kernel: ir.Kernel, shape: Shape, seed: int = 0) -> Shape:
        return self._routing(kernel, shape, seed, False)[0]

    def arrays(self, kernel: ir.Kernel, shape: Shape, rng: np.random.Generator, big: bool = False,
               adversarial: bool = True) -> tuple[Shape, dict[str, np.ndarray]]:
        from argus.agent.sampling import big_inputs

        seed = int(rng.integers(1 << 30)) if adversarial else 0
        dims, meta = self._routing(kernel, shape, seed, adversarial)
        arrays = big_inputs(kernel, dims, rng)
        for name, val in meta.items():
            # a routing kernel's outputs (pos, row_token, ...) are metadata names too: they stay poisoned, or a
            # candidate that writes nothing would be judged correct
            if name in arrays and name not in kernel.outputs:
                arrays[name] = np.asarray(val).astype(arrays[name].dtype)
        return dims, arrays

    def space(self, kernel: ir.Kernel) -> ShapeSpace:
        v = {d: z3.Int(d) for d in set(ROUTING) | set(kernel.dims)}
        cons = dim_constraints(kernel, v)
        cons += [v["KTOP"] <= v["E"], v["E"] <= 64]
        if "M" in v:
            cons.append(v["M"] == v["T"] * v["KTOP"])
        if "E1" in v:
            cons.append(v["E1"] == v["E"] + 1)
        return ShapeSpace(ROUTING, frozenset({"T", "HID", "F"}), cons, v, {"E": 4, "KTOP": 2})


Inputs = DenseInputs | RoutedInputs


def problem_for(kernel: ir.Kernel) -> Inputs:
    """How this kernel's inputs are built (see the module docstring), or ProblemError saying why not."""
    data = data_ints(kernel)
    if not data:
        return DenseInputs()
    if kernel.metadata == "moe_routing":
        return RoutedInputs()
    raise ProblemError(f"kernel '{kernel.name}' reads integer inputs ({', '.join(data)}) whose contents its "
                       "assumes constrain; the tuner draws such inputs only from a routing the kernel declares "
                       "(launch ..., metadata=\"moe_routing\"), and solving them from the contract "
                       "(argus.analysis.contract_inputs) is too slow per evaluation")


def moe_targets() -> list[Shape]:
    """Default routed target: tokens 2048, 8 experts, top-2, HID 2048, F 2048 (fits the CPU referee)."""
    return [{"T": 2048, "E": 8, "KTOP": 2, "HID": 2048, "F": 2048}]
