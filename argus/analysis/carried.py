"""Register values a persistent tile loop carries from one tile to the next: the prefetch induction.

`x_next = load(X[t + G, ...])` at the end of tile t, read as `x = x_next` at the start of tile t + G, is
software prefetch: the next tile's loads are in flight while this tile reduces and stores. The value a
tile starts from is then a function of the previous tile alone, E(t - G), where E is the body's
*defining slice* of the carried names: the statements their final values depend on. When that slice is
pure (it reads global tensors the kernel never writes, the loop variable and values the loop does not
change, never shared memory and never a carried value), the claim "tile t starts from E(t - G)" is
inductive: a block's second tile starts from what its first tile computed, E(b), and so on. So the
executor models a block's later tile t > b exactly by running the slice at t - G before the body (the
previous tile's values), and its first tile from the values before the loop.
"""

from __future__ import annotations

from argus.ir import nodes as ir
from argus.ir.transform import walk


def _reads(e: ir.Expr) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, ir.Var)}


def _guard(st: ir.Stmt) -> bool:
    """An `if` whose branches only assign (`if t + G < M: xn = load(...)`, a guarded prefetch)."""
    return isinstance(st, ir.If) and all(isinstance(x, ir.Let) for x in (*st.then, *st.orelse))


def _nested_lets(body) -> set[str]:
    """Names assigned inside a loop, a role or a branch of the body other than a guard's."""
    out: set[str] = set()
    for st in body:
        if isinstance(st, ir.Let) or _guard(st):
            continue
        out.update(x.name for x in walk(st) if isinstance(x, ir.Let))
    return out


def _guard_reads(st: ir.If) -> set[str]:
    out = _reads(st.cond)
    for branch in (st.then, st.orelse):
        local: set[str] = set()
        for x in branch:
            out |= _reads(x.value) - local
            local.add(x.name)
    return out


def written_tensors(kernel: ir.Kernel) -> set[str]:
    """Global tensors the kernel writes (stores, atomics, copies into them)."""
    out: set[str] = set()
    for x in walk(kernel.body):
        if isinstance(x, (ir.Store, ir.AtomicAdd, ir.Copy)) and x.dst is not None and x.dst.space == "global":
            out.add(x.dst.base)
    return out


def prefetch_slice(body, names, written: set[str]) -> tuple[ir.Stmt, ...] | str:
    """The top-level statements of a tile-loop body that define the final values of the carried `names`,
    in program order (Lets, and guards: an `if` of Lets, which the executor must show takes a branch that
    assigns them); or why the values are not a pure function of the tile (a reason, for an unknown)."""
    body = tuple(body)
    nested = _nested_lets(body)
    top: dict[str, list[int]] = {}
    for i, st in enumerate(body):
        for x in (st,) if isinstance(st, ir.Let) else (*st.then, *st.orelse) if _guard(st) else ():
            if i not in top.setdefault(x.name, []):
                top[x.name].append(i)
    assigned = set(top) | nested
    chosen: set[int] = set()
    work: list[tuple[str, int]] = []
    for n in sorted(names):
        if n in nested or n not in top:
            return f"{n} is assigned inside a loop or branch of the tile body"
        work.append((n, len(body)))
    while work:
        name, before = work.pop()
        if name in nested:
            return f"{name} is assigned inside a loop or branch of the tile body"
        earlier = [i for i in top.get(name, ()) if i < before]
        if not earlier:
            if name in assigned:
                return f"the value depends on the previous tile's {name}"
            continue  # the loop variable, or a value the loop does not change
        i = earlier[-1]
        if i in chosen:
            continue
        chosen.add(i)
        st = body[i]
        values = (st.value,) if isinstance(st, ir.Let) else (st.cond, *[x.value for x in (*st.then, *st.orelse)])
        for v in values:
            for x in walk(v):
                if isinstance(x, ir.Ref) and x.space == "shared":
                    return f"{name} reads shared memory ({x.base})"
                if isinstance(x, ir.Ref) and x.base in written:
                    return f"{name} reads {x.base}, which the kernel writes"
        reads = _reads(st.value) if isinstance(st, ir.Let) else _guard_reads(st)
        work.extend((v, i) for v in reads)
    return tuple(body[i] for i in sorted(chosen))
