"""Trip counts: how many iterations of each loop the executor unrolls, and the certificate that extends a
verdict on those to every trip count.

A loop is explored for trip counts 0..cap. That covers every trip count when its body depends on the loop
variable k only in ways that repeat or shift:
(a) `x % c` (ring-buffer stage, phase parity): period c (times the divisors of `//` inside x);
(b) the starts of global-memory tiles (translation: tags compare coordinates of the same step, bounds
    depend only on the tail);
(c) comparisons whose two sides differ by an affine function of k, either against a constant (true for
    a prefix of iterations: the cap is raised past the constant) or against the loop's own bound (`if k + 1
    < n`, a guarded prefetch: true except in the last iterations, the same for every n);
(d) tile data (masks: values never become addresses or tags), scalar tensor reads at step-dependent
    indices (`load(pos[t, k])`: the read value is unconstrained tensor data);
(e) user tag fields (kv_step=j), provided no assert_tag mentions the step itself.
Scalars carried across iterations count as functions of k: `c = c + d` with a constant start is affine
(`c = 0; ...; c = c + 1; if c <= n:` is case (c)); any other carried scalar is only allowed where k is.
Then a violation at a larger trip count repeats, shifted by a multiple of the period, at one within the cap.
A truncated loop without this certificate makes the verdicts that depend on it `unknown`, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.printer import expr as show
from argus.ir.transform import walk


@dataclass(frozen=True)
class LoopShape:
    cap: int  # trip counts 0..cap are explored
    ok: bool  # larger trip counts are covered by the certificate
    why: str = ""
    # the stored data's checks (reference footprint, NaN): larger trip counts covered for them too (a
    # mask against a constant too far to explore leaves only those unknown; see mask_cap)
    data_ok: bool = True
    data_why: str = ""


def _uses(e, names: set[str]) -> bool:
    return any(isinstance(x, ir.Var) and x.name in names for x in walk(e))


def _divisors_product(e) -> int:
    p = 1
    for sub in walk(e):
        if isinstance(sub, ir.Bin) and sub.op == "//" and isinstance(sub.b, ir.Const) and isinstance(sub.b.value, int):
            p *= max(1, sub.b.value)
    return p


def _period(body, skip_lets: frozenset[str], ring_ids: set[int]) -> int:
    period = 1
    stmts = tuple(s for s in body if not (isinstance(s, ir.Let) and s.name in skip_lets)) if skip_lets else body
    for sub in walk(stmts):
        if id(sub) in ring_ids:
            continue
        if isinstance(sub, ir.Bin) and sub.op == "%" and isinstance(sub.b, ir.Const) \
                and isinstance(sub.b.value, int) and sub.b.value > 0:
            period = math.lcm(period, sub.b.value * _divisors_product(sub.a))
    return period


# ---- affine forms over the loop variable ----
Affine = dict  # key -> int coefficient; "1" the constant, "k" the loop variable, else a loop-invariant atom


def _add(a: Affine, b: Affine, sign: int = 1) -> Affine:
    out = dict(a)
    for key, v in b.items():
        out[key] = out.get(key, 0) + sign * v
    return {key: v for key, v in out.items() if v}


def _product(a: Affine | None, b: Affine | None) -> Affine | None:
    """a * b when one side is a constant (else not affine)."""
    if a is None or b is None:
        return None
    for x, y in ((a, b), (b, a)):
        if set(x) <= {"1"}:
            c = x.get("1", 0)
            return {key: c * v for key, v in y.items() if c * v}
    return None


class _Affine:
    """Affine forms of scalar expressions in the loop variable, following derived lets and carried
    counters; None when an expression is not affine in it."""

    def __init__(self, loop: ir.For, lets: dict[str, ir.Expr], carried: dict[str, tuple[Affine, int]],
                 derived: set[str]):
        self.loop = loop
        self.lets = lets
        self.carried = carried  # name -> (value at loop entry, increment per iteration)
        self.derived = derived

    def form(self, e: ir.Expr, after: set[str]) -> Affine | None:
        if isinstance(e, ir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
            return {"1": e.value} if e.value else {}
        if isinstance(e, ir.Var):
            if e.name == self.loop.var:
                return {"k": 1}
            if e.name in self.carried:
                entry, inc = self.carried[e.name]
                # c after i iterations' increments: entry + (i [+ 1 if this iteration's ran]) * inc
                steps = {"k": inc}
                return _add(_add(entry, steps), {"1": inc} if e.name in after else {})
            if e.name in self.lets:
                return self.form(self.lets[e.name], after)
            if e.name in self.derived:
                return None
            return {show(e): 1}
        if isinstance(e, ir.Bin) and e.op in ("+", "-"):
            a, b = self.form(e.a, after), self.form(e.b, after)
            if a is None or b is None:
                return None
            return _add(a, b, 1 if e.op == "+" else -1)
        if isinstance(e, ir.Bin) and e.op == "*":
            return _product(self.form(e.a, after), self.form(e.b, after))
        if isinstance(e, ir.Un) and e.op == "-":
            a = self.form(e.a, after)
            return None if a is None else {key: -v for key, v in a.items()}
        if not _uses(e, self.derived | {self.loop.var} | set(self.carried) | set(self.lets)):
            return {show(e): 1}
        return None


def loop_shapes(kernel: ir.Kernel) -> dict[int, LoopShape]:
    from argus.analysis.ring import ring_step_loops

    ring = ring_step_loops(kernel)
    out: dict[int, LoopShape] = {}
    _scan(kernel.body, {}, ring, out)
    return out


def _scan(body, before: dict[str, ir.Expr], ring, out) -> None:
    """Visit loops in program order, knowing each scalar let that precedes them (carried counters'
    entry values)."""
    env = dict(before)
    for s in body:
        if isinstance(s, ir.Let) and not isinstance(s.value.type, TileT):
            env[s.name] = s.value
        if isinstance(s, ir.For):
            out[id(s)] = shape(s, env, ring.get(id(s)))
        for f in ("body", "then", "orelse"):
            if hasattr(s, f) and getattr(s, f):
                _scan(getattr(s, f), env, ring, out)


def shape(loop: ir.For, before: dict[str, ir.Expr], ring_lets: frozenset[str] | None) -> LoopShape:
    from argus.analysis.ring import ring_positions

    ring_ids = {id(x) for st in walk(loop.body) for x in ring_positions(st)} if ring_lets is not None else set()
    period = _period(loop.body, ring_lets or frozenset(), ring_ids)
    cap = 2 * period + 2
    ok, why, need = certify(loop, before, ring_lets or frozenset(), ring_ids, period)
    mask_need, mask_why = mask_cap(loop, before, period)
    data_ok = mask_need <= MASK_CAP_LIMIT
    if mask_need and data_ok:
        need = max(need, mask_need)
    for t in block_strides(loop, before):
        c = _const_bound(loop.stop, before)
        if c is None or c > t:  # may run into the next block's region: explore past it
            need = max(need, t + period + 2)
        elif c < t:  # stops short of the next block's region: a gap shows only at the largest trip counts
            need = max(need, c + period + 2)
    return LoopShape(max(cap, need), ok, why, data_ok, "" if data_ok else mask_why)


MASK_CAP_LIMIT = 16  # the most trip counts a mask against a constant may ask to be explored


def mask_cap(loop: ir.For, before: dict[str, ir.Expr], period: int) -> tuple[int, str]:
    """Trip counts a tile mask in the loop needs explored: case (d) lets masks vary freely because their
    values never become addresses or tags, but the checks of the stored data (its reference footprint,
    NaN from a row masked entirely) see them. A comparison of positions that move with the step against
    a constant (`qpos - kpos < WINDOW`, a sliding window) changes its outcome only once the positions
    have moved by about that constant: a trip count fixes the dims' relations, so the shorter explored
    loops (cap 4) never reach the window's edge (an off-by-one window of 256 keys verified). The cap is
    raised to (constant + the mask's extent) / positions per step + period + 2."""
    env = dict(before)
    for x in walk(loop.body):
        if isinstance(x, ir.Let):
            env.setdefault(x.name, x.value)
    need, why = 0, ""
    for x in walk(loop.body):
        if not (isinstance(x, ir.Cmp) and isinstance(x.type, TileT)):
            continue
        consts = [abs(c) for c in (*_top_consts(x.a), *_top_consts(x.b))]
        if not consts or not max(consts):
            continue
        moving = {c for e in (x.a, x.b) for c in _k_coefs(e, env, loop.var)} - {0}
        if not moving:
            continue  # no position moves with the step
        # a position that moves but not affinely in the step: assume the slowest motion, one per step
        stride = 1 if None in moving else min(abs(c) for c in moving)
        extent = sum(d for d in x.type.shape if isinstance(d, int))
        n = (max(consts) + extent) // stride + period + 2
        if n > need:
            need, why = n, (f"a mask compares positions that move {stride} per step with the constant "
                            f"{max(consts)}: trip counts up to {n} would be needed to reach its edge")
    return need, why


def _top_consts(e) -> list[int]:
    """Integer constants added to a comparison's side (`x < 256`, `x - 255 > 0`)."""
    if isinstance(e, ir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return [e.value]
    if isinstance(e, ir.Bin) and e.op in ("+", "-"):
        return [*_top_consts(e.a), *_top_consts(e.b)]
    return []


def _k_coefs(e, env: dict[str, ir.Expr], var: str, depth: int = 0) -> set:
    """The step coefficients of the scalar positions inside tile expression `e` (following lets): 0 where a
    scalar does not move with the step, None where it moves but not affinely."""
    if depth > 20:
        return {None}
    if not isinstance(e, ir.Expr):
        return set()
    if not isinstance(e.type, TileT):
        return {_k_coef(e, env, var)}
    if isinstance(e, ir.Var):
        return _k_coefs(env[e.name], env, var, depth + 1) if e.name in env else set()
    out: set = set()
    for f in e.__dataclass_fields__:
        if f in ("span", "type"):
            continue
        v = getattr(e, f)
        for y in (v if isinstance(v, tuple) else (v,)):
            if isinstance(y, ir.Expr):
                out |= _k_coefs(y, env, var, depth + 1)
    return {c for c in out if c != 0} or ({0} if 0 in out else set())


def _k_coef(e, env: dict[str, ir.Expr], var: str, depth: int = 0):
    """The coefficient of the loop variable in scalar `e` (0 if it does not depend on it), None if not affine."""
    if depth > 20:
        return None
    if isinstance(e, ir.Var):
        if e.name == var:
            return 1
        return _k_coef(env[e.name], env, var, depth + 1) if e.name in env else 0
    if isinstance(e, ir.Bin) and e.op in ("+", "-"):
        a, b = _k_coef(e.a, env, var, depth + 1), _k_coef(e.b, env, var, depth + 1)
        return None if a is None or b is None else (a + b if e.op == "+" else a - b)
    if isinstance(e, ir.Bin) and e.op == "*":
        a, b = _k_coef(e.a, env, var, depth + 1), _k_coef(e.b, env, var, depth + 1)
        if a == 0 and b == 0:
            return 0
        for c, other in ((a, e.b), (b, e.a)):
            if c and isinstance(other, ir.Const) and isinstance(other.value, int):
                return c * other.value
        return None
    moving = any(isinstance(y, ir.Var) and (y.name == var or (y.name in env and
                                                               _k_coef(env[y.name], env, var, depth + 1) != 0))
                 for y in walk(e) if y is not e)
    return None if moving else 0


def _block_form(e, env: dict[str, ir.Expr], loop_var: str, depth: int = 0) -> Affine | None:
    """Affine form of a scalar over the loop variable ("k"), block indices ("block<axis>") and other atoms,
    following the scalar lets before the loop."""
    if depth > 20:
        return None
    if isinstance(e, ir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {"1": e.value} if e.value else {}
    if isinstance(e, ir.Special) and e.kind == "block_id":
        return {f"block{e.axis}": 1}
    if isinstance(e, ir.Var):
        if e.name == loop_var:
            return {"k": 1}
        if e.name in env:
            return _block_form(env[e.name], env, loop_var, depth + 1)
        return {e.name: 1}
    if isinstance(e, ir.Bin) and e.op in ("+", "-"):
        a, b = _block_form(e.a, env, loop_var, depth + 1), _block_form(e.b, env, loop_var, depth + 1)
        return None if a is None or b is None else _add(a, b, 1 if e.op == "+" else -1)
    if isinstance(e, ir.Bin) and e.op == "*":
        return _product(_block_form(e.a, env, loop_var, depth + 1), _block_form(e.b, env, loop_var, depth + 1))
    return None


def block_strides(loop: ir.For, before: dict[str, ir.Expr]) -> list[int]:
    """Trip counts at which a global tile the loop walks (start `b * C + k * S + ...`, b a block index)
    reaches the region of the next block along b: C / S. The translation argument (case (b)) compares a
    block's steps with each other; whether a block's walk runs into its neighbour's region, or stops short
    of it, shows only at trip counts near C / S, which the exploration must reach (a split-K loop without
    its min(KCHUNK // BK, ...) sums the next split's K only past step KCHUNK / BK)."""
    out: set[int] = set()
    for x in walk(loop.body):
        if not isinstance(x, ir.Ref) or x.space != "global":
            continue
        for st in x.starts:
            f = _block_form(st, before, loop.var)
            if not f or not f.get("k"):
                continue
            step = abs(f["k"])
            for key, c in f.items():
                if key.startswith("block") and abs(c) % step == 0 and abs(c) // step > 1:
                    out.add(abs(c) // step)
    return sorted(out)


def _const_bound(stop, before: dict[str, ir.Expr], depth: int = 0) -> int | None:
    """A constant the trip count `stop` never exceeds, syntactically (a constant, or the least constant
    operand of a min), or None."""
    if depth > 20 or stop is None:
        return None
    if isinstance(stop, ir.Const) and isinstance(stop.value, int):
        return stop.value
    if isinstance(stop, ir.Var) and stop.name in before:
        return _const_bound(before[stop.name], before, depth + 1)
    if isinstance(stop, ir.Math) and stop.fn == "min":
        bounds = [b for b in (_const_bound(a, before, depth + 1) for a in stop.args) if b is not None]
        return min(bounds) if bounds else None
    return None


def certify(loop: ir.For, before: dict[str, ir.Expr], ring_lets: frozenset[str], ring_ids: set[int],
            period: int) -> tuple[bool, str, int]:
    """(certified, why not, the cap the comparisons with constants need)."""
    assigned_in = [s for s in walk(loop.body) if isinstance(s, ir.Let) and not isinstance(s.value.type, TileT)]
    names_in = {s.name for s in assigned_in}
    carried: dict[str, tuple[Affine, int]] = {}
    tainted: set[str] = set()
    top = {id(s) for s in loop.body}
    for name in names_in:
        defs = [s for s in assigned_in if s.name == name]
        reads_self = any(_uses(d.value, {name}) for d in defs)
        if not reads_self and name not in before:
            continue  # a plain local: recomputed every iteration
        d = defs[0]
        v = d.value
        inc = None
        if len(defs) == 1 and id(d) in top and isinstance(v, ir.Bin) and v.op in ("+", "-") \
                and isinstance(v.a, ir.Var) and v.a.name == name and isinstance(v.b, ir.Const) \
                and isinstance(v.b.value, int):
            inc = v.b.value if v.op == "+" else -v.b.value
        entry = before.get(name)
        base = _Affine(loop, {}, {}, set()).form(entry, set()) if entry is not None else None
        if inc is not None and base is not None and "k" not in base:
            carried[name] = (base, inc)
        else:
            tainted.add(name)  # carried across iterations, not a counter: a function of k like k itself
    derived = {loop.var} | tainted
    lets: dict[str, ir.Expr] = {}
    for s in loop.body:
        # only scalars matter: a tile computed from the step (a mask) changes values, never tags;
        # a scalar read from a tensor at a step-dependent index (r = load(pos[t, k])) is tensor data
        if isinstance(s, ir.Let) and not isinstance(s.value.type, TileT) and s.name not in carried \
                and s.name not in tainted and not isinstance(s.value, ir.Load) \
                and _uses(s.value, derived | set(carried) | set(lets)) and s.name not in ring_lets:
            if not (isinstance(s.value, ir.Bin) and s.value.op == "%" and isinstance(s.value.b, ir.Const)):
                lets[s.name] = s.value
    aff = _Affine(loop, lets, carried, derived)
    moving = derived | set(carried) | set(lets)
    problems: list[str] = []
    need = [0]
    seen_after: set[str] = set()

    def compare(node: ir.Cmp) -> bool:
        """A comparison that flips once: against a constant (raise the cap past it) or against the loop's
        bound (the same last iterations for every trip count)."""
        a, b = aff.form(node.a, seen_after), aff.form(node.b, seen_after)
        if a is None or b is None:
            return False
        d = _add(a, b, -1)
        coef = d.pop("k", 0)
        if not coef:
            return True
        const = d.pop("1", 0)
        if not d:
            need[0] = max(need[0], abs(const) // abs(coef) + period + 2)
            return True
        stop = show(loop.stop) if loop.stop is not None else None
        start = loop.start
        if set(d) == {stop} and d[stop] == -coef and isinstance(start, ir.Const) and start.value == 0:
            return True
        return False

    def visit(node, allowed: bool) -> None:
        if isinstance(node, ir.Var) and node.name in moving and not allowed:
            problems.append(node.name)
            return
        if id(node) in ring_ids:
            return
        if isinstance(node, ir.Tag):
            visit(node.x, allowed)
            return
        if isinstance(node, ir.Expr) and isinstance(node.type, TileT):
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
        if isinstance(node, ir.Cmp) and node.op in ("<", "<=", ">", ">=", "==", "!=") and compare(node):
            return
        if isinstance(node, ir.Ref):
            for st in node.starts:
                visit(st, allowed or node.space == "global")
            return
        if isinstance(node, ir.Let):
            if node.name in ring_lets:
                return  # proved for every step by the ring protocol
            if node.name in carried:
                seen_after.add(node.name)
                return
            if node.name in lets or node.name in tainted:
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
                      "way that is not periodic", need[0]
    return True, "", need[0]
