"""A kernel's `assume`s at a given shape, checked without running it.

An assume is a precondition the verifier takes for granted, so a candidate that adds
`assume(K <= 448)` gets its proofs for free and is then only correct where the assume holds. The
referee evaluates every assume it can (those over dims, params, scalar arguments and block ids, at
the first and the last block) at every shape it checks or times: a candidate whose assume excludes a
shape the starting kernel handles is rejected with the assume's text. Assumes over tensor contents
(scalar loads) are checked by the interpreter where it executes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.agent.features import Unknown, ev
from argus.ir import nodes as ir
from argus.ir.printer import expr as show


@dataclass(frozen=True)
class Broken:
    text: str  # the assume's condition, as printed
    line: int | None
    block: tuple[int, ...]

    def describe(self, dims: dict[str, int]) -> str:
        at = " ".join(f"{k}={v}" for k, v in dims.items())
        where = f" (line {self.line})" if self.line else ""
        return f"assume({self.text}){where} does not hold at {at}"


def _grid(kernel: ir.Kernel, env: dict[str, object]) -> tuple[int, ...] | None:
    try:
        return tuple(max(1, int(ev(g, env))) for g in kernel.grid)
    except (Unknown, ArithmeticError, TypeError, ValueError, KeyError):
        return None


def _walk(stmts: tuple[ir.Stmt, ...], env: dict[str, object], block: tuple[int, ...], out: list[Broken]) -> None:
    for s in stmts:
        if isinstance(s, ir.Let):
            try:
                env[s.name] = ev(s.value, env)
            except (Unknown, ArithmeticError, TypeError, ValueError, KeyError):
                env.pop(s.name, None)
        elif isinstance(s, ir.Assume) and s.over is None:
            try:
                ok = bool(ev(s.cond, env))
            except (Unknown, ArithmeticError, TypeError, ValueError, KeyError):
                continue  # depends on data or loop state: the interpreter checks it where it runs
            if not ok:
                out.append(Broken(show(s.cond), s.span.line if s.span else None, block))
        elif isinstance(s, ir.Role):
            _walk(s.body, dict(env), block, out)  # a role's straight-line prefix runs for every block
        elif isinstance(s, ir.For):
            inner = dict(env)
            inner.pop(s.var, None)  # assumes over the loop's own values stay unknown (the interpreter's)
            _walk(s.body, inner, block, out)


def broken_assumes(kernel: ir.Kernel, dims: dict[str, int], scalars: dict[str, object] | None = None
                   ) -> list[Broken]:
    """The kernel's assumes (outside loops and branches) that are false at `dims`."""
    base: dict[str, object] = {**{n: v for n, v in kernel.params if not isinstance(v, str)}, **dims,
                               **(scalars or {})}
    grid = _grid(kernel, base)
    blocks = [tuple(0 for _ in kernel.grid)]
    if grid is not None:
        blocks.append(tuple(g - 1 for g in grid))
    out: list[Broken] = []
    for b in dict.fromkeys(blocks):
        env = dict(base)
        for axis, v in enumerate(b):
            env[f"block_id({axis})"] = v
            if grid is not None:
                env[f"num_blocks({axis})"] = grid[axis]
        _walk(kernel.body, env, b, out)
    seen, unique = set(), []
    for x in out:
        if x.text not in seen:
            seen.add(x.text)
            unique.append(x)
    return unique
