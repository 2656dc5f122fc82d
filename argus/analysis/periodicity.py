"""The periodicity certificate that extends bounded trip counts to every trip count.

Loops are explored for trip counts up to 2P + 2, P the loop body's period. That covers every trip count
when the body depends on the loop variable only through (a) `x % c` (ring-buffer stage, phase parity),
(b) the starts of global-memory tiles (translation: tags compare coordinates of the same step, bounds
depend only on the tail), (c) comparisons with constants below the cap (eventually constant), (d) tile
data (masks: values never become addresses or tags), scalar tensor reads at step-dependent indices
(load(pos[t, k]): the read value is unconstrained tensor data) and (e) user tag fields (kv_step=j), provided no
assert_tag mentions the step itself -- compare two step fields instead (a.kv_step == b.kv_step - 1):
then a violation at a larger trip count repeats, shifted by a multiple of P, at one within the cap.
A truncated loop without this certificate makes the verdicts that depend on it `unknown`.
"""

from __future__ import annotations

from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.transform import walk


def _uses(e, names: set[str]) -> bool:
    return any(isinstance(x, ir.Var) and x.name in names for x in walk(e))


def certify(loop: ir.For, cap: int) -> tuple[bool, str]:
    derived = {loop.var}
    for s in walk(loop.body):
        # only scalars matter: a tile computed from the step (a mask) changes values, never tags
        # a scalar read from a tensor at a step-dependent index (r = load(pos[t, k])) is tensor data,
        # an unconstrained value per coordinate like a tile's contents: the step only moves the
        # coordinate, which is checked where the load's indices are visited (global tile starts)
        if isinstance(s, ir.Let) and not isinstance(s.value.type, TileT) and _uses(s.value, derived) \
                and not _periodic(s.value, derived) and not isinstance(s.value, ir.Load):
            derived.add(s.name)
    problems: list[str] = []

    def visit(node, allowed: bool) -> None:
        if isinstance(node, ir.Var) and node.name in derived and not allowed:
            problems.append(node.name)
            return
        if isinstance(node, ir.Tag):
            # a step-valued user field (kv_step=j): tags are only compared by assert_tag, and an
            # assertion that does not itself mention the step compares two such fields, which shift
            # together with the step
            visit(node.x, allowed)
            return
        if isinstance(node, ir.Expr) and isinstance(node.type, TileT):
            # tile *data* (e.g. a mask from key positions): values never become addresses, control flow
            # or tags, so the step may appear freely -- except in the views the data is read from
            for f in node.__dataclass_fields__:
                if f in ("span", "type"):
                    continue
                v = getattr(node, f)
                for x in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(x, ir.Ref):
                        visit(x, False)
                    elif isinstance(x, ir.Expr):
                        visit(x, True)
            return
        if isinstance(node, ir.Bin) and node.op == "%" and isinstance(node.b, ir.Const):
            return  # periodic
        if isinstance(node, ir.Cmp) and node.op in ("<", "<=", ">", ">=", "==", "!=") and \
                (isinstance(node.b, ir.Const) and isinstance(node.b.value, int) and abs(node.b.value) < cap // 2):
            return  # compares the step with a small constant: constant after the first steps
        if isinstance(node, ir.Ref):
            for st in node.starts:
                visit(st, allowed or node.space == "global")
            return
        if isinstance(node, ir.Let):
            if node.name in derived:
                return  # checked where it is used
            visit(node.value, allowed)
            return
        if isinstance(node, (ir.Expr, ir.Stmt, ir.BarrierRef)):
            for f in node.__dataclass_fields__:
                if f in ("span", "type"):
                    continue
                v = getattr(node, f)
                for x in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(x, tuple):
                        for y in x:
                            visit(y, allowed)
                    elif isinstance(x, (ir.Expr, ir.Stmt, ir.Ref, ir.BarrierRef)):
                        visit(x, allowed)

    for s in loop.body:
        visit(s, False)
    if problems:
        return False, f"loop variable '{loop.var}' (through {', '.join(sorted(set(problems)))}) is used in a " \
                      "way that is not periodic"
    return True, ""


def _periodic(e, derived: set[str]) -> bool:
    return isinstance(e, ir.Bin) and e.op == "%" and isinstance(e.b, ir.Const)
