"""The built-in planner: Monte-Carlo tree search over knowledge-base actions, learned in context.

The tree is the trajectory itself (rebuilt from the run record every step, so a resumed run makes the
same choices): nodes are evaluated programs, edges are KB actions. Each step

  * selection walks down from the starting kernel by UCB on the best reward in each subtree
    (max-backup: we want the best kernel, not the best average), with progressive widening — a node
    visited v times may have ceil(C·v^α) children before the walk must go deeper;
  * expansion picks, among the node's untried applicable actions, the one with the highest score:
    prior from the node's profile diagnosis (weight of each diagnosis naming the action's technique)
    + the action's mean reward gain so far anywhere in the tree (AMAF-style sharing, shrunk toward 0)
    + the store's prior (argus/agent/store.py): its mean gain in earlier runs on kernels like this node,
      weighted by similarity, failures counted as losses — what worked before is tried first
    + a small exploration bonus;
  * past half the budget, every other step expands the best program instead (its best-scored untried
    action), so a best kernel found late still gets refined;
  * dead ends are pruned: failed programs are leaves, nodes with nothing left are skipped, and an
    action that failed twice without ever succeeding is dropped.

With a learning store, the run first replays the best path of the earlier run whose start is most like
this one (`Priors.best_path`: the changes from that start to its best kernel, in order), as long as each
change applies and succeeds here; then each step looks for the (evaluated program, untried action) pair whose
predicted reward — the program's reward plus the store's prior for the action on programs like it — is
highest; when that prediction is a clear gain (> GUIDED_MIN), it is expanded (best-first along what
worked in earlier runs), and the tree search above decides otherwise.

Repair maps verifier/compiler findings to fixes (a swizzle its rows cannot hold -> BK or a smaller
swizzle; an MMA shape a warpgroup cannot split -> a tile it can; too much shared memory -> a stage
less). Randomness (ties, restarts) comes from numpy seeded by (seed, step).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

import numpy as np

from argus.agent.kb import Action
from argus.agent.planners.base import Attempt, Node, PlannerContext, PlannerError, Proposal
from argus.agent.program import Candidate, Edit, EditError, apply_edits, parse_edits

FAIL_DELTA = -0.3  # value of a failed action, in reward units (log speedup)
EXPLOIT_FROM = 0.5  # share of the budget after which every other step refines the best program
GUIDED_MIN = 0.02  # a store prediction below this gain leaves the step to the tree search


class PlannerExhausted(PlannerError):
    """Nothing left to try."""


class BuiltinPlanner:
    name = "builtin"

    def __init__(self, c_uct: float = 0.3, pw_c: float = 1.0, pw_alpha: float = 0.4, c_explore: float = 0.05,
                 w_store: float = 1.0):
        self.c_uct = c_uct
        self.pw_c = pw_c
        self.pw_alpha = pw_alpha
        self.c_explore = c_explore
        self.w_store = w_store

    # ---- statistics from the trajectory ----
    def _stats(self, ctx: PlannerContext):
        nodes = {n.key: n for n in ctx.history if n.key and n.candidate is not None and n.ok}
        children: dict[str, list[Node]] = defaultdict(list)
        tried: set[tuple[str, str]] = set()
        seen: set[str] = {n.key for n in ctx.history if n.key}
        deltas: dict[str, list[float]] = defaultdict(list)
        tdeltas: dict[str, list[float]] = defaultdict(list)
        fails: dict[str, int] = defaultdict(int)
        wins: dict[str, int] = defaultdict(int)
        for n in ctx.history[1:]:
            parent = n.parent or ctx.start.key
            children[parent].append(n)
            base = n.action.split("+repair")[0]
            tried.add((parent, base))
            p = nodes.get(parent)
            if n.ok and p is not None:
                d = n.reward - p.reward
                deltas[base].append(d)
                tdeltas[n.technique].append(d)
                wins[base] += 1
            else:
                deltas[base].append(FAIL_DELTA)
                tdeltas[n.technique].append(FAIL_DELTA)
                fails[base] += 1
        return nodes, children, tried, seen, deltas, tdeltas, fails, wins

    def _visits(self, key: str, children: dict[str, list[Node]], memo: dict[str, int]) -> int:
        if key in memo:
            return memo[key]
        v = 1 + sum(self._visits(c.key, children, memo) if c.ok and c.key else 1 for c in children.get(key, ()))
        memo[key] = v
        return v

    def _value(self, key: str, nodes: dict[str, Node], children, memo: dict[str, float]) -> float:
        if key in memo:
            return memo[key]
        best = nodes[key].reward
        for c in children.get(key, ()):
            if c.ok and c.key in nodes and c.key != key:
                best = max(best, self._value(c.key, nodes, children, memo))
        memo[key] = best
        return best

    def _expandable(self, ctx: PlannerContext, node: Node, tried, seen, fails, wins) -> list[tuple[Action, Candidate]]:
        out = []
        for a in ctx.kb.actions(ctx.kind):
            if (node.key, a.id) in tried:
                continue
            if fails[a.id] >= 2 and wins[a.id] == 0:
                continue  # dead end everywhere it was tried
            try:
                c = apply_edits(node.candidate, a.edits, ctx.env)
            except EditError:
                continue
            if c.key in seen or any(c.key == x.key for _, x in out):
                continue
            out.append((a, c))
        return out

    def _score(self, a: Action, node: Node, deltas, tdeltas, total: int, priors=None) -> tuple[float, str]:
        prior = 0.02
        why = []
        for d in node.diagnosis:
            if a.answers(d.get("signal", ""), tuple(d.get("techniques", ()))):
                prior += float(d.get("weight", 0.0))
                why.append(d.get("signal", "?"))
        ds, ts = deltas.get(a.id, []), tdeltas.get(a.technique, [])
        value = sum(ds) / (len(ds) + 1) + 0.5 * sum(ts) / (len(ts) + 2)
        bonus = self.c_explore * math.sqrt(math.log(total + 2) / (len(ds) + 1))
        text = (f"diagnosis {', '.join(why)} suggests {a.technique}" if why else f"exploring {a.technique}")
        if ds:
            text += f"; this action gained {sum(ds) / len(ds):+.3f} on average over {len(ds)} tries"
        learned = priors.score(a.id, node.signature) if priors is not None and node.signature else None
        if learned is not None:
            value += self.w_store * learned.value
            text += (f"; earlier runs: {learned.value:+.3f} on similar kernels ({learned.wins} gains, "
                     f"{learned.fails} failures)")
        return prior + value + bonus, text

    # ---- the planner interface ----
    def propose(self, ctx: PlannerContext) -> Proposal:
        rng = np.random.default_rng([ctx.seed, ctx.step, 17])
        nodes, children, tried, seen, deltas, tdeltas, fails, wins = self._stats(ctx)
        root = ctx.start.key
        visits: dict[str, int] = {}
        values: dict[str, float] = {}
        if ctx.priors is not None and len(ctx.priors):
            replay = self._replay(ctx, nodes, children, seen)
            if replay is not None:
                return replay
            guided = self._guided(ctx, nodes, tried, seen, fails, wins, deltas, tdeltas, rng)
            if guided is not None:
                return guided
        exploit = self._exploit(ctx, nodes, tried, seen, fails, wins, deltas, tdeltas, rng)
        if exploit is not None:
            return exploit
        rewards = [n.reward for n in nodes.values()]
        scale = max(0.05, max(rewards) - min(rewards)) if rewards else 1.0
        exhausted: set[str] = set()
        key = root
        path: list[str] = []
        for _ in range(10 * len(ctx.history) + 10):
            node = nodes[key]
            exp = self._expandable(ctx, node, tried, seen, fails, wins)
            kids = [c for c in children.get(key, ()) if c.ok and c.key in nodes and c.key not in exhausted
                    and c.key != key]
            allowed = math.ceil(self.pw_c * self._visits(key, children, visits) ** self.pw_alpha)
            if exp and (len(children.get(key, ())) < allowed or not kids):
                return self._expand(ctx, node, exp, deltas, tdeltas, rng, len(ctx.history), path)
            if not kids:
                exhausted.add(key)
                if not path:
                    break
                key = path.pop()
                continue
            n_parent = self._visits(key, children, visits)
            scores = []
            for c in kids:
                q = (self._value(c.key, nodes, children, values) - node.reward) / scale
                u = self.c_uct * math.sqrt(math.log(n_parent) / self._visits(c.key, children, visits))
                scores.append((q + u + 1e-6 * rng.random(), c.key))
            path.append(key)
            key = max(scores)[1]
        # Everything reachable by single actions was tried: compose two actions on the best program.
        best = ctx.best
        acts = ctx.kb.actions(ctx.kind)
        order = rng.permutation(len(acts) * len(acts))
        for idx in order:
            a, b = acts[idx // len(acts)], acts[idx % len(acts)]
            if a.technique == b.technique:
                continue
            try:
                c = apply_edits(best.candidate, a.edits + b.edits, ctx.env)
            except EditError:
                continue
            if c.key in seen:
                continue
            return Proposal(a.edits + b.edits, None, f"single actions exhausted; composing {a.id} with {b.id} on "
                            f"the best program (step {best.step})", f"{a.id}&{b.id}", a.technique, best.key)
        raise PlannerExhausted("every action and pair of actions has been tried")

    def _exploit(self, ctx: PlannerContext, nodes, tried, seen, fails, wins, deltas, tdeltas, rng) -> Proposal | None:
        """Past EXPLOIT_FROM of the budget, every other step expands the best program with its best-scored
        untried action: the tree's UCB keeps widening shallow programs, and a run whose best kernel appears
        late would otherwise end without trying a single refinement of it (H200 2026-12-04: the GEMM run's
        best came at step 29 of 48 and none of the 19 steps after it expanded it)."""
        if ctx.step < EXPLOIT_FROM * ctx.budget or ctx.step % 2:
            return None
        best = nodes.get(ctx.best.key)
        if best is None:
            return None
        exp = self._expandable(ctx, best, tried, seen, fails, wins)
        if not exp:
            return None
        p = self._expand(ctx, best, exp, deltas, tdeltas, rng, len(ctx.history), ())
        return dataclasses.replace(p, reasoning="refine the best program: " + p.reasoning)

    def _replay(self, ctx: PlannerContext, nodes: dict[str, Node], children, seen) -> Proposal | None:
        """The best path of the earlier run on the most similar start, change by change: follow what this
        run already evaluated along it and propose the first change not yet tried. A change on the path that
        failed here, or that no longer applies, ends the replay (the store's priors and the tree search take
        over); so does a path replayed to its end."""
        best_path = getattr(ctx.priors, "best_path", None)
        path = best_path(ctx.start.signature) if best_path is not None and ctx.start.signature else None
        if path is None:
            return None
        node = nodes.get(ctx.start.key)
        for i, e in enumerate(path.steps):
            if node is None:
                return None
            action = e.get("action") or ""
            kid = next((c for c in children.get(node.key, ()) if c.action.split("+repair")[0] == action), None)
            if kid is not None:
                if not kid.ok:
                    return None
                node = nodes.get(kid.key)
                continue
            try:
                edits = parse_edits(e.get("edits") or [])
                c = apply_edits(node.candidate, edits, ctx.env)
            except (EditError, KeyError, TypeError, ValueError):
                return None
            if c.key in seen:  # reached by another route already: continue the path from there
                node = nodes.get(c.key)
                continue
            return Proposal(edits, None, f"replaying the best path of an earlier run on a similar kernel "
                            f"(similarity {path.similarity:.2f}, gain {path.gain:+.3f} over its start), change "
                            f"{i + 1} of {len(path.steps)}: {action}", action, e.get("technique", ""), node.key,
                            meta={"guided": True, "replay": i + 1})
        return None

    def _guided(self, ctx: PlannerContext, nodes: dict[str, Node], tried, seen, fails, wins, deltas, tdeltas,
                rng) -> Proposal | None:
        """Best-first by the store: the untried (program, action) with the highest predicted reward."""
        scored = []
        for n in nodes.values():
            if not n.signature:
                continue
            for a in ctx.kb.actions(ctx.kind):
                if (n.key, a.id) in tried or (fails[a.id] >= 2 and wins[a.id] == 0):
                    continue
                p = ctx.priors.score(a.id, n.signature)
                if p is None or p.wins == 0 or p.value <= GUIDED_MIN:
                    continue
                ds = deltas.get(a.id, [])  # what the action did in this run so far corrects the store
                gain = p.value + sum(ds) / (len(ds) + 1)
                if gain > GUIDED_MIN:
                    scored.append((n.reward + gain + 1e-6 * rng.random(), a, n, p))
        scored.sort(key=lambda x: -x[0])
        for pred, a, n, p in scored:
            try:
                c = apply_edits(n.candidate, a.edits, ctx.env)
            except EditError:
                continue
            if c.key in seen:
                continue
            return Proposal(a.edits, None, f"earlier runs: {a.id} gained {p.value:+.3f} on programs like step {n.step} "
                            f"({p.wins} gains, {p.fails} failures); predicted reward {pred:+.3f}", a.id, a.technique,
                            n.key, meta={"guided": True})
        return None

    def _expand(self, ctx, node: Node, exp, deltas, tdeltas, rng, total: int, path) -> Proposal:
        failed = _failed_changes(ctx)
        scored = []
        for a, c in exp:
            s, why = self._score(a, node, deltas, tdeltas, total, ctx.priors)
            ch = set(_change(node.candidate, c))
            # a change that includes one that failed before (BN = 512: no wgmma shape) is tried last
            n_failed = sum(n for f, n in failed.items() if ch and set(f) <= ch)
            if n_failed:
                s += FAIL_DELTA * n_failed
                why += f"; a change it makes ({_describe(tuple(sorted(ch)))}) failed {n_failed}x before"
            scored.append((s + 1e-6 * rng.random(), a, why))
        scored.sort(key=lambda x: -x[0])
        s, a, why = scored[0]
        depth = len(path)
        reason = (f"expand step {node.step} (reward {node.reward:+.3f}, depth {depth}) with {a.id}: {why} "
                  f"(score {s:.3f}; {len(exp)} untried actions here)")
        return Proposal(a.edits, None, reason, a.id, a.technique, node.key)

    def repair(self, ctx: PlannerContext, attempts: list[Attempt]) -> Proposal | None:
        last = attempts[-1]
        prop = last.proposal
        if prop.source is not None or last.problem in ("duplicate", "invalid"):
            return None
        parent = ctx.node(prop.parent) or ctx.best
        fixes = _fixes_for(last.message, parent.candidate.effective_params() if parent.candidate else {})
        tried = {json_key(a.proposal.edits) for a in attempts}
        seen = {n.key for n in ctx.history if n.key}
        for name, fix in fixes:
            edits = prop.edits + fix
            if json_key(edits) in tried:
                continue
            try:
                c = apply_edits(parent.candidate, edits, ctx.env)
            except EditError:
                continue
            if c.key in seen:
                continue
            return Proposal(edits, None, f"repair after {last.problem}: {name}", prop.action + "+repair",
                            prop.technique, prop.parent)
        return None


def _change(parent: Candidate | None, child: Candidate) -> tuple[tuple[str, str], ...]:
    """The parameters a candidate sets differently from its parent, with their new values (() for a
    structural rewrite that changes no parameter)."""
    if parent is None:
        return ()
    a, b = parent.effective_params(), child.effective_params()
    return tuple(sorted((k, repr(v)) for k, v in b.items() if a.get(k) != v))


def _describe(change: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in change)


def _failed_changes(ctx: PlannerContext) -> dict[tuple, int]:
    """How often each parameter change failed (verifier, compiler or run) in this run's history."""
    by_key = {n.key: n.candidate for n in ctx.history if n.key and n.candidate is not None}
    out: dict[tuple, int] = defaultdict(int)
    for n in ctx.history[1:]:
        if n.ok or n.candidate is None or n.status == "duplicate":
            continue
        ch = _change(by_key.get(n.parent or ctx.start.key), n.candidate)
        if ch:
            out[ch] += 1
    return out


def json_key(edits: tuple[Edit, ...]) -> str:
    return repr([e.to_json() for e in edits])


def _fixes_for(message: str, params: dict) -> list[tuple[str, tuple[Edit, ...]]]:
    """Candidate fixes for a finding, most targeted first."""
    out: list[tuple[str, tuple[Edit, ...]]] = []
    m = re.search(r"swizzle=(\d+) needs rows of a multiple of \d+ bytes; this buffer's rows are (\d+) bytes", message)
    if m:
        swz, rows = int(m.group(1)), int(m.group(2))
        bk = params.get("BK")
        if isinstance(bk, int) and rows:
            out.append((f"BK {bk} -> {bk * swz // rows} so rows hold the {swz}B swizzle",
                        (Edit("rewrite", name="tile", args={"BK": bk * swz // rows}),)))
        out.append((f"swizzle {swz} -> {rows}", (Edit("rewrite", name="swizzle", args={"bytes": min(rows, 128)}),)))
    if "[mma-shape]" in message or "mma-shape" in message:
        m2 = re.search(r"(\d+) warpgroup\(s\) cannot split a (\d+)x(\d+)", message)
        if m2:
            groups = int(m2.group(1))
            out.append((f"BM -> {64 * groups} (64 rows per warpgroup)",
                        (Edit("rewrite", name="tile", args={"BM": 64 * groups}),)))
        out.append(("BM x2", (Edit("rewrite", name="tile", args={"BM": "*2"}),)))
        out.append(("back to mma.sync", (Edit("rewrite", name="mma_instr", args={"instr": "mma.sync"}),)))
    if "shared memory" in message and ("KB" in message or "does not fit" in message or "at most" in message):
        out.append(("one stage less", (Edit("rewrite", name="stages", args={"delta": -1}),)))
        out.append(("two stages less", (Edit("rewrite", name="stages", args={"delta": -2}),)))
        out.append(("BK /2", (Edit("rewrite", name="tile", args={"BK": "/2"}),)))
    m = re.search(r"registers= ask for \d+ registers \((.*?)\); a multiprocessor has (\d+)", message)
    if m:
        # setmaxnreg budgets that fit: the producer at the 24 minimum, the consumers share the rest
        groups = {name: (int(n), int(r)) for name, n, r in re.findall(r"(\w+): (\d+) warpgroup\(s\) x (\d+)",
                                                                        m.group(1))}
        prod = groups.get("producer", (1, 0))[0]
        cons = sum(n for name, (n, _) in groups.items() if name != "producer")
        if cons:
            per = (int(m.group(2)) // 128 - 24 * prod) // cons // 8 * 8
            # below 128 a consumer's wgmma accumulators alone spill, and ptxas took over 120 s on such a
            # build (FlashAttention BQ 256, 4 consumers at 120: the H200 run of 2026-12-04 13:56)
            if per >= 128:
                fix = Edit("rewrite", name="role_registers", args={"producer": 24, "consumer": min(per, 256)})
                out.append((f"registers: producer 24, consumers {per} (the sum fits the SM)", (fix,)))
    if "spill" in message:
        out.append(("BN /2", (Edit("rewrite", name="tile", args={"BN": "/2"}),)))
    return out
