"""Hoist an `mma` nested in a larger expression into its own register tile.

`s = mma(q_s, k_s.T, zeros(...)) * scale` reads as one expression, but an mma's result is an accumulator
held in the instruction's fragment layout, and layout assignment (argus/ir/passes/layouts.py) ties the
fragment to a *named* tile. Naming the product first (`m = mma(...)`, `s = m * scale`) is what a user
would write to get the same code; this pass does it for them, so the scaled scores can feed the next mma
as its register A operand, exactly as the two-line spelling does. The interpreter, the verifier and the
code generator all read the result (one IR).
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.ir import nodes as ir
from argus.ir.transform import bound_names


def hoist_mmas(kernel: ir.Kernel) -> ir.Kernel:
    taken = bound_names(kernel.body)
    fresh = (f"mma_{n}" for n in itertools.count() if f"mma_{n}" not in taken)
    return dataclasses.replace(kernel, body=_body(kernel.body, fresh))


def _body(stmts: tuple, fresh) -> tuple:
    out: list[ir.Stmt] = []
    for s in stmts:
        changes, lets = {}, []
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if isinstance(v, ir.Expr):
                # only a Let names its mma; a stored or added one (store(C[...], mma(...))) gets a tile too
                nv = _expr(v, isinstance(s, ir.Let), lets, fresh, s.span)
                if nv is not v:
                    changes[f.name] = nv
            elif isinstance(v, tuple) and v and all(isinstance(x, ir.Stmt) for x in v):
                nv = _body(v, fresh)
                if nv != v:
                    changes[f.name] = nv
        out.extend(lets)
        out.append(dataclasses.replace(s, **changes) if changes else s)
    return tuple(out)


def _expr(e: ir.Expr, top: bool, lets: list, fresh, span) -> ir.Expr:
    """`e` with every mma below the top of a statement's value replaced by a fresh tile (its Let in lets)."""
    if isinstance(e, ir.Tag):
        x = _expr(e.x, top, lets, fresh, span)
        return e if x is e.x else dataclasses.replace(e, x=x)
    changes = {}
    for f in dataclasses.fields(e):
        if f.name in ("type", "span"):
            continue
        v = getattr(e, f.name)
        if isinstance(v, ir.Expr):
            nv = _expr(v, False, lets, fresh, span)
        elif isinstance(v, tuple) and any(isinstance(x, ir.Expr) for x in v):
            nv = tuple(_expr(x, False, lets, fresh, span) if isinstance(x, ir.Expr) else x for x in v)
        else:
            continue
        if nv is not v and nv != v:
            changes[f.name] = nv
    e = dataclasses.replace(e, **changes) if changes else e
    if isinstance(e, ir.Mma) and not top:
        name = next(fresh)
        lets.append(ir.Let(span=e.span or span, name=name, value=e))
        return ir.Var(type=e.type, span=e.span, name=name)
    return e

