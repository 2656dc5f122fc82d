"""Inputs that satisfy a kernel's own contract, built from its assumes.

A kernel over metadata (MoE routing: expert offsets, tile schedules, row positions) states what it
relies on with `assume(...)`, including quantified contracts over tensor contents. Random integers break
them, so the interpreter needs inputs built from the contract itself: at concrete dims, the kernel is
explored symbolically (one path per decision), and for every block of the grid some path's constraints
must hold with that block's ids; quantified assumes hold at every index. Z3 then chooses the contents
of every integer tensor the constraints read (its uninterpreted functions) — and a counterexample's
values are pinned first, so a replay runs the very routing the verifier found. Float inputs are fresh
random data as usual. No kernel is recognised by its argument names.
"""

from __future__ import annotations

import itertools

import numpy as np
import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import as_int, budget, solver
from argus.ir import nodes as ir
from argus.ir.transform import walk

MAX_BLOCKS = 256
MAX_INDEX = 4096  # quantified assumes instantiated at most this many times per block


def data_tensors(kernel: ir.Kernel) -> list[ir.TensorDecl]:
    """Integer inputs: what a contract can constrain (floats are data, never indices)."""
    return [t for t in kernel.tensors if t.name in kernel.inputs and not t.dtype.is_float]


def inputs_for(kernel: ir.Kernel, dims: dict[str, int], contexts, rng: np.random.Generator, defines: dict,
               pins: dict | None = None) -> tuple[dict[str, int], dict[str, np.ndarray]] | str:
    """(dims, arrays) for the interpreter: random floats, outputs poisoned, integer tensors solved from
    the contract (or random small integers when no assume reads them). A reason string if none exist."""
    from argus.interp.run import make_arrays

    arrays = make_arrays(kernel, dims, rng)
    ints = data_tensors(kernel)
    if not ints:
        return dims, arrays
    # Only contents the contract constrains (its assumes, quantified ones included) or a counterexample
    # pins are solved; the rest stay random. Solved contents are whatever satisfies the constraints, so a
    # histogram's data solved that way hid `x <= bin` for `x == bin` from the numeric tier.
    constrained = {name for c in contexts for name in _functions_constrained(c)}
    constrained |= {k.split("[", 1)[0] for k in (pins or {})}
    if not constrained & {t.name for t in ints}:
        return dims, arrays
    got = solve_contents(kernel, dims, defines, pins or {}, int(rng.integers(1 << 30)))
    if isinstance(got, str):
        return got
    arrays.update({k: v for k, v in got.items() if k in constrained})
    return dims, arrays


def _functions_read(ctx) -> set[str]:
    return {f.name() for f in ctx.functions.values()}


def _functions_constrained(ctx) -> set[str]:
    """Tensors whose contents an assume of the kernel constrains: read in a constraint, or loaded in the
    body of a quantified assume."""
    fnames = _functions_read(ctx)
    out = {n for c in ctx.constraints if not isinstance(c, bool) for n in T.applied_names(c, fnames)}
    for lam, _over, _env in ctx.quantified:
        out |= {n.ref.base for n in walk(lam.body) if isinstance(n, ir.Load)}
    return out


_CONTRACTS: dict = {}  # (kernel id, dims, defines) -> (kernel, contract); replay asks several times


def _contract(kernel: ir.Kernel, dims: dict[str, int], defines: dict):
    """The kernel's assumes instantiated at every block of the grid at `dims`, with the in-range bounds of
    nested reads: (assertions, functions, entries each function's constant indices constrain) or a
    reason string. Cached: replay builds inputs for one shape several times (pins, seeds)."""
    key = (id(kernel), tuple(sorted(dims.items())), tuple(sorted((k, repr(v)) for k, v in defines.items())))
    hit = _CONTRACTS.get(key)
    if hit is not None and hit[0] is kernel:
        return hit[1]
    got = _build_contract(kernel, dims, defines)
    if len(_CONTRACTS) >= 16:
        _CONTRACTS.pop(next(iter(_CONTRACTS)))
    _CONTRACTS[key] = (kernel, got)
    return got


def _build_contract(kernel: ir.Kernel, dims: dict[str, int], defines: dict):
    from argus.analysis.executor import explore

    fixed = {**{k: v for k, v in defines.items() if k not in kernel.dims}, **dims}
    try:
        traces, contexts, _notes = explore(kernel, fixed)
    except Exception as exc:  # noqa: BLE001 - an unsupported construct: no contract to solve
        return f"the kernel's contract could not be explored at {dims}: {exc}"
    live = [(t, c) for t, c in zip(traces, contexts) if t.deadlock is None]
    if not live:
        return "every path of the kernel deadlocks"
    ctx0 = live[0][1]
    grid = []
    dsub = [(ctx0.dims[d], z3.IntVal(v)) for d, v in dims.items() if d in ctx0.dims]
    # integer scalar arguments the caller fixed (a counterexample's max_seqlen): the explorer keeps every
    # scalar argument symbolic, so their values enter here, or a grid that reads one is never concrete
    dsub += [(ctx0.scalars[n], z3.IntVal(int(v))) for n, v in defines.items()
             if n in ctx0.scalars and ctx0.scalars[n].sort() == z3.IntSort() and isinstance(v, int)
             and not isinstance(v, bool)]
    scalars = _grid_scalars(kernel, live, ctx0, dsub, defines)
    if isinstance(scalars, str):
        return scalars
    dsub += [(ctx0.scalars[n], z3.IntVal(v)) for n, v in scalars.items()]
    for g in ctx0.grid:
        g = z3.simplify(z3.substitute(as_int(g), *dsub))
        if not z3.is_int_value(g):
            return "the grid depends on tensor contents"
        grid.append(g.as_long())
    blocks = list(itertools.islice(itertools.product(*(range(n) for n in grid)), MAX_BLOCKS + 1))
    if len(blocks) > MAX_BLOCKS:
        return f"the grid has more than {MAX_BLOCKS} blocks at {dims}"
    assertions = []
    names = {str(b) for b in ctx0.block}
    for b in blocks:
        sub = list(zip(ctx0.block, [z3.IntVal(x) for x in b])) + dsub
        options = []
        for tr, ctx in live:
            cons = [z3.substitute(T.zb(c), *sub) for c in tr.constraints if _relevant(c, ctx, names)]
            for lam_over_env in ctx.quantified:
                over = z3.simplify(z3.substitute(as_int(lam_over_env[1]), *sub))
                if not z3.is_int_value(over):
                    return "a quantified assume ranges over a size that depends on tensor contents"
                n = min(over.as_long(), MAX_INDEX)
                for i in range(n):
                    cons.append(z3.substitute(ctx.instantiate(lam_over_env, z3.IntVal(i)), *sub))
            options.append(z3.And(*cons) if cons else z3.BoolVal(True))
        assertions.append(z3.Or(*options))
    fns = {f.name(): f for c in contexts for f in c.functions.values()}
    used, nested = _scan(assertions, fns)
    # an index read from a tensor must lie in the tensor it indexes, or the interpreter faults before
    # the kernel runs (the contract reads offs[tile_expert[row_tile[r]] + 1])
    shapes = {t.name: tuple(d if isinstance(d, int) else dims[d] for d in t.dims) for t in kernel.tensors}
    assertions += _nested_bounds(assertions, fns, shapes, nested)
    return assertions, fns, used, scalars


def _grid_scalars(kernel: ir.Kernel, live, ctx0, dsub: list, defines: dict) -> dict[str, int] | str:
    """Integer scalar arguments the grid reads (`grid=(cdiv(max_seqlen, BQ), ...)`) and -D does not give:
    values the kernel's block-independent assumes allow (its default when they do, else the least), so
    the grid is concrete before its blocks' constraints are instantiated. A relaxation: the blocks'
    own constraints are checked by the full contract afterwards."""
    need = {n: v for n, v in ctx0.scalars.items()
            if v.sort() == z3.IntSort() and n not in defines
            and any(T.mentions(z3.substitute(as_int(g), *dsub), {n}) for g in ctx0.grid)}
    if not need:
        return {}
    names = {str(b) for b in ctx0.block}
    options = []
    for tr, ctx in live:
        cons = [z3.substitute(T.zb(c), *dsub) for c in tr.constraints
                if not isinstance(c, bool) and not T.mentions(c, names)]
        for q in ctx.quantified:
            over = z3.simplify(z3.substitute(as_int(q[1]), *dsub))
            if not z3.is_int_value(over):
                return "a quantified assume ranges over a size that depends on tensor contents"
            for i in range(min(over.as_long(), MAX_INDEX)):
                inst = ctx.instantiate(q, z3.IntVal(i))
                if not T.mentions(inst, names):
                    cons.append(z3.substitute(inst, *dsub))
        options.append(z3.And(*cons) if cons else z3.BoolVal(True))
    opt = budget(z3.Optimize(), 20000)  # a resource limit: the inputs must not depend on the machine's load
    opt.add(z3.Or(*options))
    defaults = {s.name: s.default for s in kernel.scalars}
    for n, v in need.items():
        opt.add(v >= 0)
        d = defaults.get(n)
        if isinstance(d, (int, float)) and int(d) == d:
            opt.add_soft(v == int(d), weight=10)
        opt.minimize(v)
    if opt.check() != z3.sat:
        return "no value of " + ", ".join(need) + " satisfies the kernel's assumes"
    m = opt.model()
    return {n: m.eval(v, model_completion=True).as_long() for n, v in need.items()}


def contract_arrays(kernel: ir.Kernel, dims: dict[str, int], defines: dict, seed: int
                    ) -> tuple[dict[str, np.ndarray], dict[str, int]] | None:
    """For `argus run`: the integer tensors the kernel's assumes constrain (offsets, schedules, index
    ranges) solved from its contract at `dims`, and the integer scalars its grid reads; None when the
    kernel has none or no contents satisfy the contract there (random values then, as before)."""
    if not data_tensors(kernel):
        return None
    got = _contract(kernel, dims, defines)
    if isinstance(got, str):
        return None
    _assertions, _fns, used, scalars = got
    constrained = {n for n, u in used.items() if u is None or u}
    if not constrained:
        return ({}, dict(scalars)) if scalars else None
    arrays = solve_contents(kernel, dims, defines, {}, seed)
    if isinstance(arrays, str):
        return None
    return {n: a for n, a in arrays.items() if n in constrained}, dict(scalars)


def contract_scalars(kernel: ir.Kernel, dims: dict[str, int], defines: dict) -> dict[str, int]:
    """The integer scalar arguments the contract at `dims` chose (see _grid_scalars); {} if none."""
    if not any(not s.dtype.is_float and s.name not in defines for s in kernel.scalars):
        return {}
    got = _contract(kernel, dims, defines)
    return {} if isinstance(got, str) else dict(got[3])


def solve_contents(kernel: ir.Kernel, dims: dict[str, int], defines: dict, pins: dict,
                   seed: int) -> dict[str, np.ndarray] | str:
    got = _contract(kernel, dims, defines)
    if isinstance(got, str):
        return got
    assertions, fns, used, _scalars = got
    s = solver(20000)
    s.set("random_seed", seed % 1000)
    s.add(*assertions)
    for key, v in pins.items():
        f, args = _parse_pin(key, fns)
        if f is not None and isinstance(v, int):
            s.add(f(*[z3.IntVal(a) for a in args]) == v)
            if used.get(f.name()) is not None:
                used = {**used, f.name(): used[f.name()] | {tuple(args)}}
    r = s.check()
    if r == z3.sat:
        _diversify(s, kernel, dims, fns)
        r = s.check()
    if r != z3.sat:
        return "no tensor contents satisfy the kernel's assumes at " + str(dims) if r == z3.unsat else \
            "the solver timed out building inputs from the kernel's assumes"
    m = s.model()
    from argus.interp.numerics import storage_dtype

    out = {}
    rng = np.random.default_rng(seed)
    for t in data_tensors(kernel):
        shape = tuple(d if isinstance(d, int) else dims[d] for d in t.dims)
        f = fns.get(t.name)
        arr = np.zeros(shape, storage_dtype(t.dtype))
        if f is not None:
            for idx in itertools.product(*(range(n) for n in shape)):
                arr[idx] = m.eval(f(*[z3.IntVal(i) for i in idx]), model_completion=True).as_long()
            _fill_free_entries(arr, used.get(f.name()), rng)
        out[t.name] = arr
    return out


def _scan(assertions, fns: dict) -> tuple[dict[str, set | None], set[int]]:
    """One pass over the contract: per tensor function, the constant indices it is read at (None: some
    index is symbolic, so any entry may be constrained); and the ids of the subterms that hold a nested
    read (a tensor indexed by a value read from a tensor), where _nested_bounds has work to do."""
    used: dict[str, set | None] = {name: set() for name in fns}
    reads: dict[int, bool] = {}  # id -> the subterm reads a tensor
    nested: set[int] = set()
    order, stack, seen = [], list(assertions), set()
    while stack:  # post-order without recursion (contracts over many blocks are deep and wide)
        e = stack.pop()
        if not isinstance(e, z3.ExprRef):
            continue
        i = e.get_id()
        if i in seen:
            continue
        seen.add(i)
        order.append(e)
        if z3.is_app(e):
            stack.extend(e.children())
    for e in reversed(order):
        i = e.get_id()
        if not z3.is_app(e):
            reads[i] = False
            continue
        kids = e.children()
        name = e.decl().name()
        is_read = e.num_args() > 0 and name in used
        if is_read and used[name] is not None:
            if all(z3.is_int_value(a) for a in kids):
                used[name].add(tuple(a.as_long() for a in kids))
            else:
                used[name] = None
        reads[i] = is_read or any(reads.get(c.get_id(), False) for c in kids)
        if (is_read and any(reads.get(c.get_id(), False) for c in kids)) or \
                any(c.get_id() in nested for c in kids):
            nested.add(i)
    return used, nested


def _fill_free_entries(arr: np.ndarray, used: set | None, rng: np.random.Generator | None = None) -> None:
    """Entries no assume mentions may still be read by the reference block (a gather through all of pos
    while the kernel reads part of it). The contract holds for any value there, so give them values the
    constrained entries take, which keeps them in range."""
    if not used:
        return
    values = [int(arr[i]) for i in used if all(0 <= x < n for x, n in zip(i, arr.shape))]
    if not values:
        return
    rng = rng or np.random.default_rng(len(values))
    for idx in itertools.product(*(range(n) for n in arr.shape)):
        if idx not in used:
            arr[idx] = values[int(rng.integers(len(values)))]


def _nested_bounds(assertions, fns: dict, shapes: dict, nested: set[int] | None = None) -> list:
    """Where the contract reads a tensor at an index read from another tensor, that index lies in the
    tensor -- under the conditions the read happens (`a or load(T[...])` reads T only when a is false,
    as the interpreter evaluates it)."""
    out, seen = [], set()

    def visit(e, guard) -> None:
        if not isinstance(e, z3.ExprRef):
            return
        key = (e.get_id(), guard.get_id() if isinstance(guard, z3.ExprRef) else guard)
        if key in seen or (nested is not None and e.get_id() not in nested):
            return
        seen.add(key)
        if z3.is_or(e) or z3.is_and(e):
            g = guard
            for c in e.children():
                visit(c, g)
                g = T.b_and(g, z3.Not(c) if z3.is_or(e) else c)
            return
        if z3.is_implies(e):
            visit(e.arg(0), guard)
            visit(e.arg(1), T.b_and(guard, e.arg(0)))
            return
        if z3.is_app(e) and e.num_args() > 0 and e.decl().name() in fns and e.decl().name() in shapes:
            for axis, a in enumerate(e.children()):
                if _reads(a, set(fns)) and axis < len(shapes[e.decl().name()]):
                    out.append(z3.Implies(T.zb(guard), z3.And(a >= 0, a < shapes[e.decl().name()][axis])))
        for c in e.children():
            visit(c, guard)

    for a in assertions:
        visit(a, True)
    return out


def _diversify(s: z3.Solver, kernel: ir.Kernel, dims: dict, fns: dict, limit: int = 48) -> None:
    """Solvers like equal values (every top-k slot the same row): a bug that swaps two of them then
    hides. Ask, element by element, for neighbours to differ, keeping each wish the contract allows."""
    budget(s, 500)
    for t in data_tensors(kernel):
        f = fns.get(t.name)
        if f is None:
            continue
        shape = tuple(d if isinstance(d, int) else dims[d] for d in t.dims)
        cells = list(itertools.islice(itertools.product(*(range(n) for n in shape)), limit))
        for a, b in zip(cells, cells[1:]):
            s.push()
            s.add(f(*[z3.IntVal(i) for i in a]) != f(*[z3.IntVal(i) for i in b]))
            if s.check() != z3.sat:
                s.pop()
    # two tables of one shape (two offset arrays): the same solution for both hides a kernel that reads
    # the wrong one, so ask them to differ somewhere
    tables = [(t, fns[t.name]) for t in data_tensors(kernel) if t.name in fns]
    for (t1, f1), (t2, f2) in itertools.combinations(tables, 2):
        if t1.dims != t2.dims:
            continue
        shape = tuple(d if isinstance(d, int) else dims[d] for d in t1.dims)
        cells = list(itertools.islice(itertools.product(*(range(n) for n in shape)), limit))
        s.push()
        s.add(z3.Or(*[f1(*map(z3.IntVal, a)) != f2(*map(z3.IntVal, a)) for a in cells]))
        if s.check() != z3.sat:
            s.pop()
    budget(s, 20000)


def _relevant(c, ctx, block_names: set[str]) -> bool:
    """Constraints that say something about blocks or tensor contents (dims are fixed already)."""
    if isinstance(c, bool):
        return False
    fnames = _functions_read(ctx)
    return T.mentions(c, block_names) or _reads(c, fnames)


def _reads(e, fnames: set[str]) -> bool:
    return bool(T.applied_names(e, fnames))


def _parse_pin(key: str, fns: dict):
    """'offs[1]' -> (offs function, (1,))."""
    if "[" not in key or not key.endswith("]"):
        return None, ()
    name, rest = key.split("[", 1)
    f = fns.get(name)
    try:
        args = tuple(int(x) for x in rest[:-1].split(","))
    except ValueError:
        return None, ()
    return f, args
