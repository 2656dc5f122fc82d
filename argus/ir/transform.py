"""Generic rewriting of IR trees: substitution of variables and renaming of locals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from argus.ir import nodes as ir


def rewrite(node, fn: Callable[[object], object | None]):
    """Rebuild `node` bottom-up; `fn` may return a replacement for any sub-node (None keeps it)."""
    if isinstance(node, tuple):
        return tuple(rewrite(x, fn) for x in node)
    if isinstance(node, (ir.Expr, ir.Stmt, ir.Ref, ir.BarrierRef)):
        changes = {}
        for f in dataclasses.fields(node):
            if f.name in ("span", "type"):
                continue
            v = getattr(node, f.name)
            nv = rewrite(v, fn)
            if nv is not v:
                changes[f.name] = nv
        new = dataclasses.replace(node, **changes) if changes else node
        out = fn(new)
        return new if out is None else out
    return node


def substitute(node, mapping: dict[str, ir.Expr]):
    """Replace variables by expressions (loop variable k -> k + S - 1, etc.)."""
    return rewrite(node, lambda n: mapping.get(n.name) if isinstance(n, ir.Var) else None)


def rename_locals(stmts: tuple[ir.Stmt, ...], names: dict[str, str]) -> tuple[ir.Stmt, ...]:
    def fn(n):
        if isinstance(n, ir.Var) and n.name in names:
            return dataclasses.replace(n, name=names[n.name])
        if isinstance(n, ir.Let) and n.name in names:
            return dataclasses.replace(n, name=names[n.name])
        return None
    return rewrite(stmts, fn)


def scope_stmts(body):
    """Statements of one scope (the block, or one role), nested loops and ifs included, roles excluded."""
    for s in body:
        if isinstance(s, ir.Role):
            continue
        yield s
        for f in ("body", "then", "orelse"):
            if hasattr(s, f):
                yield from scope_stmts(getattr(s, f))


def walk(node):
    """Yield every IR node (expressions, refs, statements) under `node`, pre-order."""
    if isinstance(node, tuple):
        for x in node:
            yield from walk(x)
        return
    if isinstance(node, (ir.Expr, ir.Stmt, ir.Ref, ir.BarrierRef)):
        yield node
        for f in dataclasses.fields(node):
            if f.name not in ("span", "type"):
                yield from walk(getattr(node, f.name))


_BODY_FIELDS = ("body", "then", "orelse", "producer", "consumer")


def expand_stmts(stmts: tuple[ir.Stmt, ...], fn: Callable[[ir.Stmt], tuple[ir.Stmt, ...] | None]
                 ) -> tuple[ir.Stmt, ...]:
    """Rewrite a statement list where `fn` may replace one statement by several (inner bodies first)."""
    out: list[ir.Stmt] = []
    for s in stmts:
        changes = {f: expand_stmts(getattr(s, f), fn) for f in _BODY_FIELDS if hasattr(s, f)}
        s = dataclasses.replace(s, **changes) if changes else s
        r = fn(s)
        out.extend((s,) if r is None else r)
    return tuple(out)


_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
         "//": lambda a, b: a // b, "%": lambda a, b: a % b}


def fold_constants(node):
    """Fold integer arithmetic on constants (left behind by substituting a step number)."""
    def fn(n):
        if isinstance(n, ir.Bin) and isinstance(n.a, ir.Const) and isinstance(n.b, ir.Const) \
                and n.op in _FOLD and isinstance(n.a.value, int) and isinstance(n.b.value, int) \
                and not (n.op in ("//", "%") and n.b.value == 0):
            return ir.Const(n.a.type, n.span, _FOLD[n.op](n.a.value, n.b.value))
        return None
    return rewrite(node, fn)


def role_groups(stmts: tuple[ir.Stmt, ...]):
    """Yield statements in order, with each run of consecutive `Role`s as one tuple: the roles of a
    run execute concurrently (warp specialisation), everything else in program order."""
    i = 0
    while i < len(stmts):
        if isinstance(stmts[i], ir.Role):
            j = i
            while j < len(stmts) and isinstance(stmts[j], ir.Role):
                j += 1
            yield tuple(stmts[i:j])
            i = j
        else:
            yield stmts[i]
            i += 1


def read_before_assigned(stmts) -> set[str]:
    """Names a statement list assigns (Let) and reads before its first assignment in program order; a
    nested loop's first iteration reads the value from before it; what a branch or a loop body assigns
    is not assigned after it (it may not run)."""
    assigned: set[str] = set()
    lets: set[str] = set()
    early: set[str] = set()

    def reads(node) -> set[str]:
        return {x.name for x in walk(node) if isinstance(x, ir.Var)}

    def scan(body) -> None:
        for st in body:
            if isinstance(st, ir.Let):
                early.update(reads(st.value) - assigned)
                assigned.add(st.name)
                lets.add(st.name)
            elif isinstance(st, (ir.For, ir.If, ir.Role, ir.PipelineFor)):
                for f in ("start", "stop", "step", "cond", "count"):
                    if getattr(st, f, None) is not None:
                        early.update(reads(getattr(st, f)) - assigned)
                before = set(assigned)
                for f in ("body", "then", "orelse", "producer", "consumer"):
                    sub = getattr(st, f, None)
                    if sub:
                        scan(sub)
                assigned.intersection_update(before)  # a branch or a loop body may not run
            else:
                early.update(reads(st) - assigned)
    scan(tuple(stmts))
    return early & lets


def bound_names(stmts: tuple) -> set[str]:
    """Every name a statement list binds, nested bodies included (locals and shared buffers): what a pass
    that adds a name must not reuse."""
    out: set[str] = set()
    for s in stmts:
        if isinstance(s, (ir.Let, ir.AllocShared)):
            out.add(s.name)
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if isinstance(v, tuple) and v and all(isinstance(x, ir.Stmt) for x in v):
                out |= bound_names(v)
    return out
