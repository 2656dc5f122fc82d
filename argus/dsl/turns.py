"""`with turn():` -- the rules that make a turn deadlock-free (argus/ir/nodes.py `Turn` says why they suffice).

A turn block sits inside a role; the role's warpgroups run it one at a time, round robin. The GPU code
(argus/codegen/emit.py) gives warpgroup w a named barrier that it syncs on at the block's start and that
warpgroup w - 1 arrives on at the block's end. The verifier proves the lockstep program (the block's
statements as if every warpgroup ran them together), so a turn is accepted only where the round robin
cannot wait for something the lockstep program never waits for:

- uniform control flow: no `if` condition or loop bound around the turn (inside its role) may depend on
  thread_id / warp_id / lane_id / warpgroup_id, so every warpgroup runs the same sequence of turns;
- inside the block, no `wait` after an `arrive` (a warpgroup holding the turn would wait for an arrival
  that the next warpgroups make only in their own turn), and nothing that synchronises or issues copies:
  barrier, wait_async, commit, copy, copy_async, copy_bulk, expect_tx (a barrier of the whole role inside
  a turn never completes; the code generator also refuses one it would emit there itself);
- no role, turn, pipeline or persistent loop inside the block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from argus.dsl import ast
from argus.dsl.diagnostics import ArgusError

THREAD_INDEX = {"thread_id", "warp_id", "lane_id", "warpgroup_id"}
REFUSED = {"barrier", "wait_async", "commit", "copy", "copy_async", "copy_bulk", "expect_tx"}

Err = Callable[..., ArgusError]


def _exprs(e: ast.Node) -> Iterator[ast.Node]:
    """e and every expression inside it."""
    yield e
    for v in vars(e).values():
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, (ast.Expr, ast.Keyword)):
                yield from _exprs(x)


def _varies(e: ast.Expr, varying: set[str]) -> bool:
    return any((isinstance(x, ast.Call) and x.func_name in THREAD_INDEX)
               or (isinstance(x, ast.Name) and x.id in varying) for x in _exprs(e))


def _stmts(body: tuple[ast.Stmt, ...]) -> Iterator[ast.Stmt]:
    for s in body:
        yield s
        for f in ("body", "orelse"):
            yield from _stmts(getattr(s, f, ()) or ())


def varying_names(body: tuple[ast.Stmt, ...]) -> set[str]:
    """Names that may hold a different value in different threads (flow-insensitive, to a fixpoint): a
    name assigned anywhere from a thread index or from another such name, or a loop variable over such
    bounds."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for s in _stmts(body):
            if isinstance(s, ast.Assign):
                pairs = list(zip(s.targets, s.value.elts if len(s.targets) > 1 else (s.value,)))
                new = {t.id for t, v in pairs if _varies(v, out)}
            elif isinstance(s, ast.AugAssign):
                new = {s.target.id} if _varies(s.value, out) else set()
            elif isinstance(s, ast.For):
                new = {s.var} if _varies(s.iter, out) else set()
            else:
                continue
            if new - out:
                out |= new
                changed = True
    return out


def check_turn(s: ast.With, enclosing: list[ast.Expr], varying: set[str], err: Err) -> None:
    """Refuse `with turn():` block `s` at its line unless it is one the round robin runs without deadlock.
    `enclosing`: the `if` conditions and loop iterables between the role's start and the block."""
    for e in enclosing:
        if _varies(e, varying):
            raise err("turn", "a turn under control flow that depends on the thread: the role's warpgroups "
                      "could run different numbers of turns, and one would wait for a turn that never comes", e,
                      "make the condition or loop bound the same for every thread (block ids, dims, loaded "
                      "scalars), or move the turn out of it")
    seen_arrive: ast.Node | None = None
    for x in _body_ops(s.body, err):
        if x.func_name == "arrive":
            seen_arrive = seen_arrive or x
        elif x.func_name == "wait" and seen_arrive is not None:
            raise err("turn", "a wait after an arrive inside a turn: the warpgroup holding the turn could "
                      "wait for an arrival the next warpgroups make only in their own turn", x,
                      f"wait first, or move the arrive (line {seen_arrive.span.line}) after the turn")


def _body_ops(body: tuple[ast.Stmt, ...], err: Err) -> Iterator[ast.Call]:
    """The statement calls of a turn's body in program order (a loop's body twice: its second trip
    follows its first), refusing what a turn may not hold."""
    for s in body:
        if isinstance(s, ast.With):
            raise err("turn", "a turn holds no role or other turn", s.context)
        if isinstance(s, ast.For):
            it = s.iter
            if isinstance(it, ast.Call) and it.func_name in ("pipeline", "persistent"):
                raise err("turn", f"a {it.func_name} loop inside a turn", it,
                          "a turn holds the issue of one step's work: put the turn inside the loop")
            inner = list(_body_ops(s.body, err))
            yield from inner
            yield from inner
            continue
        if isinstance(s, ast.If):
            yield from _body_ops(s.body, err)
            yield from _body_ops(s.orelse, err)
            continue
        for e in _exprs(s) if isinstance(s, ast.ExprStmt) else ():
            if isinstance(e, ast.Call) and e.func_name in REFUSED:
                raise err("turn", f"{e.func_name}(...) inside a turn: the role's other warpgroups are waiting "
                          "for their turn", e, "move it before or after the turn")
        if isinstance(s, ast.ExprStmt) and isinstance(s.expr, ast.Call):
            yield s.expr
