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


def _nested_lets(body) -> set[str]:
    """Names assigned inside a branch, loop or role of the body (conditionally or repeatedly)."""
    out: set[str] = set()
    for st in body:
        if isinstance(st, ir.Let):
            continue
        out.update(x.name for x in walk(st) if isinstance(x, ir.Let))
    return out


def written_tensors(kernel: ir.Kernel) -> set[str]:
    """Global tensors the kernel writes (stores, atomics, copies into them)."""
    out: set[str] = set()
    for x in walk(kernel.body):
        if isinstance(x, (ir.Store, ir.AtomicAdd, ir.Copy)) and x.dst is not None and x.dst.space == "global":
            out.add(x.dst.base)
    return out


def prefetch_slice(body, names, written: set[str]) -> tuple[ir.Let, ...] | str:
    """The top-level Lets of a tile-loop body that define the final values of the carried `names`, in
    program order; or why the values are not a pure function of the tile (a reason, for an unknown)."""
    body = tuple(body)
    nested = _nested_lets(body)
    top: dict[str, list[int]] = {}
    for i, st in enumerate(body):
        if isinstance(st, ir.Let):
            top.setdefault(st.name, []).append(i)
    assigned = set(top) | nested
    chosen: set[int] = set()
    work: list[tuple[str, int]] = []
    for n in sorted(names):
        if n in nested or n not in top:
            return f"{n} is assigned inside a branch or loop of the tile body"
        work.append((n, len(body)))
    while work:
        name, before = work.pop()
        if name in nested:
            return f"{name} is assigned inside a branch or loop of the tile body"
        earlier = [i for i in top.get(name, ()) if i < before]
        if not earlier:
            if name in assigned:
                return f"the value depends on the previous tile's {name}"
            continue  # the loop variable, or a value the loop does not change
        i = earlier[-1]
        if i in chosen:
            continue
        chosen.add(i)
        let = body[i]
        for x in walk(let.value):
            if isinstance(x, ir.Ref) and x.space == "shared":
                return f"{let.name} reads shared memory ({x.base})"
            if isinstance(x, ir.Ref) and x.base in written:
                return f"{let.name} reads {x.base}, which the kernel writes"
        work.extend((v, i) for v in _reads(let.value))
    return tuple(body[i] for i in sorted(chosen))
