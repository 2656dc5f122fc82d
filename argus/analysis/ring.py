"""Warp-specialised producer/consumer rings, verified by their protocol instead of by simulation.

The pattern (examples/gemm_ws.arg, examples/moe.arg): a producer role and a consumer role run the
same loop nest (optionally inside the same persistent tile loop); at its q-th step (q counts steps
across tiles) the producer waits on `empty[q % S]` with parity `(q // S + 1) % 2`, announces the step's
bytes with `expect_tx(full[q % S], n)` and issues bulk copies into stage `q % S` completing on
`full[q % S]`; the consumer waits on `full[q % S]` with parity `(q // S) % 2`, reads stage `q % S` and
releases it with `arrive(empty[q % S])`. Before and after their step loops (not inside a persistent tile
loop) the roles may use one-shot mbarriers of their own (a TMA load of the consumer's Q tile), simulated
as plain statements; a wait there that its own role never completes is a deadlock. Inside a persistent
tile loop, a second ring at tile granularity may sit beside the step ring (argus/ir/rings.py `tile_ring`:
the producer loads each tile's Q before its steps, the consumer releases it after them): the same
obligations at the tile position j (the block's j-th tile, stages of one tile each), each barrier and
buffer checked against the ring that owns it (`ring_scope`).

For that protocol, the phase arithmetic of mbarriers gives (by induction over steps, for any number of
stages S >= 1 and any number of steps):
- FIFO: the consumer's step q reads exactly what the producer's step q copied (its wait passes only
  when the phase q // S of full[q % S] completed, which is the producer's step q);
- no overwrite: the producer's step q + S writes stage q % S only after the consumer's step q
  released it (its wait on empty needs phase q // S of empty[q % S], the consumer's arrive at step q);
- progress: neither role waits for a phase the other will not complete.

So the executor runs the two roles in lockstep, step by step (producer then consumer), and turns every
ring operation into obligations that the kernel follows the pattern at the step's ghost position q
(`RingStep.q`, the number of steps the roles ran before): barrier indices, parities, the stage a copy
writes or a read reads, the expect_tx byte count against the bytes copied, barrier counts, no read of a
stage after releasing it. Data flow is then sequential (the consumer reads the copies of its own step),
and the ring buffers' accesses are ordered by the protocol (exempt from the race check). A nest that is
not this pattern falls back to simulating the roles (argus.analysis.executor), or is unknown when it
runs a persistent tile loop (the simulation cannot carry mbarrier phases across symbolic tiles).

A consumer may also hold two stages (`RingPlan.lag` = 1, FlashAttention-3's order: the P·V of block q - 1
is issued after the QK of block q): its step q waits on full[q % S], may read stages q % S and
(q - 1) % S, releases empty[(q - 1) % S] when q >= 1 (and may then read stage q % S only), and after
the loop it reads the last step's stage and releases it. The same induction holds with the release
of step q made at consumer step q + 1: the producer's step p waits for the release of step p - S, made
at consumer step p - S + 1, which needs only the producer's step p - S + 1 < p when S >= 2 (S = 1
deadlocks from the second step: an obligation); and between that release and the producer's write
of stage p % S the consumer has moved past both stages it may read. The lockstep order then still
shows each read the data of its own step: the producer's steps q + 1 .. q + S - 2, which may run
before the consumer's step q, write neither of the stages that step reads.

The generated code may hand a stage back later than the IR's arrive (argus/codegen/release_lag.py:
after the next step's wgmmas are issued). What is proved here covers it: a later release only delays
the producer, and with S >= 2 the producer's step q + 1 needs the release of step q + 1 - S <= q - 1,
which the consumer has made before it waits at step q + 1. The plan itself (roles, barriers, buffers,
loops) is structural and shared with the code generator: argus/ir/rings.py.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import z3

from argus.analysis.symbolic import Unsupported, as_int, solver
from argus.analysis.trace import Obligation, Unknown
from argus.ir import nodes as ir
from argus.ir.printer import expr as show_expr
from argus.ir.rings import RingPlan, kernel_ring_plan
from argus.ir.rings import role_nest as _nest
from argus.ir.transform import read_before_assigned, walk

RING_CHECKS = ("async-read-before-wait", "async-overwrite", "deadlock")


@dataclass
class RingStep:
    q: object  # z3 Int: steps run before this one (ghost)
    facts: list  # constraints defining q (nonlinear: tile index times steps per tile)
    expected: list = field(default_factory=list)  # expect_tx byte counts (z3 / int)
    copied: int = 0  # bytes of bulk copies completing on full
    expects: int = 0
    arrives: int = 0
    pending: list = field(default_factory=list)  # records of this step's copies, landed by the consumer's wait
    waited: bool = False
    released: bool = False
    free: bool = False  # the producer's wait for a free stage has run in this step
    post: bool = False  # the consumer's code after its step loop (q: the step count; nothing delivered)
    end: object = None  # the ring position after the loop's last step (z3 Int), when known
    check: bool = True  # emit the protocol obligations (the symbolic step does; unrolled steps need not)


class DryAbort(Exception):
    """The symbolic step reached a decision it cannot take without forking the path."""


class RingRules:
    """Lockstep execution of a RingPlan; mixed into Executor."""

    ring: RingStep | None = None
    ring_plan_: RingPlan | None = None
    tile_ring: tuple[RingPlan, RingStep] | None = None  # the per-tile ring at the current tile

    def tile_ring_owns(self, name: str) -> bool:
        tr = self.tile_ring
        return tr is not None and (name in (tr[0].full, tr[0].empty) or name in tr[0].buffers)

    @contextmanager
    def ring_scope(self, name: str):
        """Run a ring operation on `name` (a barrier or a buffer) against the ring that owns it: the
        per-tile ring's when it does, else the step ring's."""
        if not self.tile_ring_owns(name):
            yield
            return
        saved = (self.ring_plan_, self.ring)
        self.ring_plan_, self.ring = self.tile_ring
        try:
            yield
        finally:
            self.ring_plan_, self.ring = saved

    def exec_ring(self, plan: RingPlan, agents: dict) -> object:
        from argus.analysis.findings import Counterexample  # noqa: F401 (kept for static problems below)

        for code, span, message in plan.problems + (plan.tile.problems if plan.tile is not None else []):
            self.trace.obligations.append(Obligation(code, span, message, z3.BoolVal(True), [], {}, {}))
        prod, cons = agents["producer"], agents["consumer"]
        np_, nc = _nest(plan.producer), _nest(plan.consumer)
        self.ring_plan_ = plan
        try:
            self._plain(prod, np_[0])
            self._plain(cons, nc[0])
            if plan.persistent:
                yield from self._ring_tiles(plan, prod, cons, np_, nc)
            else:
                yield from self._ring_steps(plan, prod, cons, np_[3], nc[3], None, [])
            self._plain(prod, np_[5])
            if plan.lag:
                q_end, facts = self._ring_end
                self.ring = RingStep(q_end, facts, post=True)
            self._plain(cons, nc[5])
            if plan.lag and not self.ring.released:  # a path of no step holds no stage
                self.ring_check("deadlock", plan.consumer.span, "the consumer never releases the last step's "
                                "stage after its step loop", self.ring.q >= plan.lag)
        finally:
            self.ring_plan_ = None
            self.ring = None

    def _plain(self, agent, stmts) -> None:
        self.agent = agent
        for s in stmts:
            for _ in self.exec_stmt(s):
                if isinstance(s, ir.WaitBarrier):
                    # a one-shot barrier only this role uses (ring_plan): nothing else can complete the
                    # phase it waits for
                    self.trace.obligations.append(Obligation(
                        "deadlock", s.span, f"the role waits on '{s.barrier.name}' for a phase that its own "
                        "arrivals and copies never complete, and no other role uses that barrier",
                        z3.BoolVal(True), [], {}, {}))
                    break
                raise Unsupported("a role blocks outside its ring steps", s.span)

    def _same(self, prod, cons, e1: ir.Expr, e2: ir.Expr, what: str, span) -> object:
        self.agent = prod
        a = self.scalar(e1)
        self.agent = cons
        b = self.scalar(e2)
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                raise Unsupported(f"the producer's and the consumer's {what} differ", span)
            return a
        s = solver(4000)
        s.add(*self.ctx.constraints, *self.path, as_int(a) != as_int(b))
        if s.check() != z3.unsat:
            raise Unsupported(f"the producer's and the consumer's {what} are not provably equal", span)
        return a

    def _ring_tiles(self, plan, prod, cons, np_, nc):
        """The arbitrary tile t (the block's j-th) and the next one, t + G. The ring position of tile t is
        a ghost Q, the steps the block ran before it: Q = j * n when every tile runs the same n steps
        (provably independent of t); otherwise Q is exact only through a counter the roles carry across
        tiles (c = c0 + Q at the tile's start, proved inductive: c = c0 + Q + n at its end), and without
        one the protocol is proved for a block's first two tiles (t at j = 0, where Q = 0, and the next one
        at n(t)) and is unknown for later ones."""
        lp, lc = np_[1], nc[1]
        b = self._same(prod, cons, lp.start, lc.start, "tile loops (first tile)", lp.span)
        g = self._same(prod, cons, lp.step, lc.step, "tile loops (stride)", lp.span)
        n = self._same(prod, cons, lp.stop, lc.stop, "tile loops (tile count)", lp.span)
        if not self.decide(as_int(b) < as_int(n), lp.span):
            return
        self.fresh_id += 1
        t = z3.Int(f"{lp.var}@{self.fresh_id}")
        j = z3.Int(f"{lp.var}#j{self.fresh_id}")  # this tile is the block's j-th: t = b + j * G
        ghost = z3.Int(f"ring_q#{self.fresh_id}")  # steps the block ran before tile t
        self.path.extend([t >= as_int(b), t < as_int(n)])
        self.tile_vars.append((t, lp, as_int(b), as_int(g), as_int(n)))
        facts = [j >= 0, t == as_int(b) + j * as_int(g), ghost >= 0, z3.Implies(j == 0, ghost == 0)]
        self.stale_records(lp)
        self.stale_records(lc)
        # integer registers carried from tile to tile are candidate ring counters (c = c0 + Q); any
        # other carried value is unknown past a block's first two tiles (carry_into_tile)
        counters, others, tile_counters = [], [], []
        for agent, loop in ((prod, lp), (cons, lc)):
            for name in sorted(read_before_assigned(loop.body)):
                v = agent.env.get(name)
                if isinstance(v, int) or (isinstance(v, z3.ArithRef) and v.is_int()):
                    k = _tile_increment(loop.body, name)
                    if k is not None and plan.tile is not None:
                        # a tile counter (c = c + k once per tile): c0 + k * j at the block's j-th tile
                        tile_counters.append((agent, name, as_int(v), k))
                        agent.env[name] = as_int(v) + k * j
                        continue
                    counters.append((agent, name, as_int(v)))
                    agent.env[name] = as_int(v) + ghost
                elif name in agent.env:
                    others.append(name)
        if others:
            # tile t runs from the loop-entry values, exact only for the block's first tile: pin it there,
            # so a violation the two tiles show is real (later tiles are unknown)
            self.carried_unknown(others, lp.span)
            self.path.append(t == as_int(b))
        # the next tile only matters for shared memory outside the ring (the protocol orders the ring's
        # stages across tiles): run it when a tile touches such memory, or a value is carried
        other = any(isinstance(x, ir.Ref) and x.space == "shared" and x.base not in plan.buffers
                    for loop in (lp, lc) for x in walk(loop.body)) or bool(others) or bool(counters)
        first = len(self.trace.obligations)
        state = {"exact": False, "per_tile": None, "q": ghost}

        def position(per_tile):
            if state["per_tile"] is not None:  # the next tile: Q plus the steps of tile t
                return state["q"] + state["per_tile"], []
            state["per_tile"] = per_tile
            t2 = z3.Int(f"{lp.var}@{self.fresh_id}'")
            s = solver(4000)
            s.add(*self.ctx.constraints, *self.path, t2 >= as_int(b), t2 < as_int(n),
                  per_tile != z3.substitute(per_tile, (t, t2)))
            if s.check() == z3.unsat:
                # Q is j * n: put it in the registers that carry Q (so a role's counter and the other
                # role's closed form index the same stage terms) and in the path
                state["exact"], state["q"] = True, j * per_tile
                self.path.extend([j >= 0, t == as_int(b) + j * as_int(g), ghost == j * per_tile])
                for agent in (prod, cons):
                    for name, v in agent.env.items():
                        if isinstance(v, z3.ExprRef):
                            agent.env[name] = z3.substitute(v, (ghost, j * per_tile))
                return j * per_tile, [ghost == j * per_tile]
            return ghost, []

        for k, tile in enumerate((t, t + as_int(g))):
            if k == 1 and (not other or not self.decide(tile < as_int(n), lp.span)):
                break
            for agent, loop in ((prod, lp), (cons, lc)):
                agent.env[loop.var] = tile
            self.steps[lp.var] = tile
            if plan.tile is not None:  # the per-tile ring at position j (this tile) or j + 1 (the next)
                self.tile_ring = (plan.tile, RingStep(j + k, list(facts)))
            try:
                self._plain(prod, np_[2])
                self._plain(cons, nc[2])
                yield from self._ring_steps(plan, prod, cons, np_[3], nc[3], position, facts)
                self._plain(prod, np_[4])
                self._plain(cons, nc[4])
                if plan.tile is not None:
                    self._end_tile(plan.tile, lc.span)
            finally:
                self.tile_ring = None
            if k == 0 and counters:
                self._counters_inductive(counters, state, lp.span)
            if k == 0 and tile_counters:
                bad = [name for agent, name, c0, inc in tile_counters
                       if not self.provably_equal(agent.env.get(name), c0 + inc * (j + 1), 4000)]
                if bad:
                    self.carried_unknown(sorted(set(bad)), lp.span)
        self.steps.pop(lp.var, None)
        if not state["exact"]:
            # Q is exact at j = 0 only: prove the protocol there, and say so for the later tiles
            for o in self.trace.obligations[first:]:
                if o.extra.get("ring"):
                    o.domain.append(j == 0)
            self.trace.unknowns.extend(Unknown(c, lp.span, "the step count of a tile varies with the tile, so the "
                                               "ring position of a block's third and later tiles is the sum of its "
                                               "earlier tiles' counts; carry it in a counter (step0 = step0 + n at "
                                               "the tile's end) to have it proved") for c in RING_CHECKS)

    def _end_tile(self, tile: RingPlan, span) -> None:
        """The per-tile ring at the end of a tile: the consumer released the tile's buffer."""
        saved = (self.ring_plan_, self.ring)
        self.ring_plan_, self.ring = self.tile_ring
        try:
            if self.ring.arrives == 0:
                self.ring_check("deadlock", span, f"the consumer never releases '{tile.empty}' in its tile: the "
                                "producer's next tile waits forever", z3.BoolVal(True))
            if not self.ring.waited:
                self.ring_check("async-read-before-wait", span, f"the consumer never waits on '{tile.full}' in "
                                "its tile", z3.BoolVal(True))
        finally:
            self.ring_plan_, self.ring = saved

    def _counters_inductive(self, counters, state, span) -> None:
        """A carried integer c with c = c0 + Q at tile t's start ends it at c0 + Q + n(t): by induction over
        the block's tiles it is c0 plus the ring position at every tile, so Q is exact. Any other carried
        integer is unknown past the first two tiles."""
        per_tile = state["per_tile"] if state["per_tile"] is not None else z3.IntVal(0)
        bad = []
        for agent, name, c0 in counters:
            if self.provably_equal(agent.env.get(name), c0 + state["q"] + per_tile, 4000):
                state["exact"] = True
            else:
                bad.append(name)
        if bad:
            self.carried_unknown(sorted(set(bad)), span)

    def _ring_steps(self, plan, prod, cons, sp: ir.For, sc: ir.For, position, facts):
        start = self._same(prod, cons, sp.start, sc.start, "step loops (start)", sp.span)
        step = self._same(prod, cons, sp.step, sc.step, "step loops (step)", sp.span)
        stop = self._same(prod, cons, sp.stop, sc.stop, "step loops (stop)", sp.span)
        start = self.concrete(start, sp.span, what="loop start")
        step = self.concrete(step, sp.span, what="loop step")
        if step <= 0:
            raise Unsupported("loops with a non-positive step", sp.span)
        count = (as_int(stop) - start + step - 1) / step
        per_tile = z3.If(count > 0, count, 0)
        q0, more = position(per_tile) if position is not None else (0, [])
        facts.extend(more)
        trips = count if not isinstance(stop, int) else max(0, -(-(stop - start) // step))
        truncated = len(self.trace.truncated)
        if not isinstance(trips, int):
            trips = self.concrete(z3.If(count > 0, count, 0), sp.span, self.trip_cap.get(id(sp), 8), "trip count")
        # the loop's end bounds the steps that exist only when this path runs all of them (past the trip cap
        # it runs a prefix: the steps after it exist and the end is unknown)
        end = as_int(q0) + per_tile if len(self.trace.truncated) == truncated else None
        # the protocol is proved once for an arbitrary step from `checked` on (a lagged consumer's first
        # step releases nothing, so its arbitrary step may need to start past it); earlier steps, or
        # every unrolled step when no arbitrary one can be run, carry the obligations themselves
        checked = None
        for first in sorted({0, plan.lag}):
            if self._symbolic_step(plan, prod, cons, sp, sc, start, step, count, q0, facts, first, end):
                checked = first
                break
        self._ring_end = (as_int(q0) + per_tile, list(facts))
        for kidx in range(trips):
            k = start + kidx * step
            prod.env[sp.var] = k
            cons.env[sc.var] = k
            self.steps[sp.var] = k
            self.ring = RingStep(as_int(q0) + kidx, list(facts), check=checked is None or kidx < checked, end=end)
            self.agent = prod
            yield from self._ring_body(sp.body)
            self.agent = cons
            yield from self._ring_body(sc.body)
            self._end_step(plan, sp, sc)
        self.ring = None
        self.steps.pop(sp.var, None)

    def _symbolic_step(self, plan, prod, cons, sp, sc, start, step, count, q0, facts, first: int = 0,
                       end=None) -> bool:
        """Prove the protocol obligations once for an arbitrary step kidx in [first, trips): run both step
        bodies with the loop variable start + kidx * step, keep only the ring obligations, and undo
        every other effect. False when a step's decision depends on kidx (the unrolled steps then
        carry the obligations)."""
        kidx = z3.Int(f"ring_step{self.fresh_id}")
        self.fresh_id += 1
        tr = self.trace
        lens = {f: len(getattr(tr, f)) for f in ("obligations", "accesses", "records", "stores", "global_accesses",
                                                 "bulk_copies", "mmas", "unknowns", "truncated")}
        envs = (dict(prod.env), dict(cons.env))
        saved = (self.pos, dict(self.steps), list(self.path), self.agent, len(self.taken),
                 len(self.alternatives), self.uncommitted, list(self.groups))
        k = as_int(start) + kidx * step
        prod.env[sp.var] = k
        cons.env[sc.var] = k
        self.steps[sp.var] = k
        self.path.extend([kidx >= first, kidx < count])
        self.ring = RingStep(as_int(q0) + kidx, list(facts) + [kidx >= first, kidx < count], check=True, end=end)
        self.dry = True
        ok = True
        try:
            self.agent = prod
            self._plain_step(sp.body)
            self.agent = cons
            self._plain_step(sc.body)
            self._end_step(plan, sp, sc)
        except DryAbort:
            ok = False
        finally:
            self.dry = False
        kept = [o for o in tr.obligations[lens["obligations"]:] if o.extra.get("ring")] if ok else []
        for f, n in lens.items():
            del getattr(tr, f)[n:]
        tr.obligations.extend(kept)
        prod.env.clear()
        prod.env.update(envs[0])
        cons.env.clear()
        cons.env.update(envs[1])
        self.pos, self.steps, self.path, self.agent = saved[0], saved[1], saved[2], saved[3]
        del self.taken[saved[4]:]
        del self.alternatives[saved[5]:]
        self.uncommitted, self.groups = saved[6], saved[7]
        return ok

    def _plain_step(self, stmts) -> None:
        for s in stmts:
            for _ in self.exec_stmt(s):
                raise DryAbort()

    def _ring_body(self, stmts):
        for s in stmts:
            for _ in self.exec_stmt(s):
                raise Unsupported("a ring step blocks", s.span)
        return
        yield  # a generator, like exec_stmt

    # ---- the ring operations ----
    def ring_check(self, code: str, span, message: str, bad, variables: dict | None = None) -> None:
        r = self.ring
        if not r.check:
            return
        self.trace.obligations.append(Obligation(
            code, span, message, bad, list(r.facts), {"ring position q": r.q, **(variables or {})},
            self.step_snapshot(), extra={"nonlinear": True, "ring": True}))

    def ring_index(self, ref: ir.BarrierRef, span, what: str, code: str) -> None:
        plan, r = self.ring_plan_, self.ring
        i = as_int(self.scalar(ref.index)) if ref.index is not None else z3.IntVal(0)
        self.ring_check(code, span, f"{what} uses {ref.name}[{'?' if ref.index is None else '…'}] but the ring "
                        f"position q needs {ref.name}[q % {plan.stages}]", i != r.q % plan.stages, {"index": i})

    def ring_wait(self, s: ir.WaitBarrier) -> None:
        plan, r = self.ring_plan_, self.ring
        parity = as_int(self.scalar(s.phase))
        producer = self.agent.name.startswith("producer")
        want = (r.q / plan.stages + (1 if producer else 0)) % 2
        code = "deadlock" if producer else "async-read-before-wait"
        who = "the producer's wait for a free stage" if producer else "the consumer's wait for the stage's data"
        self.ring_index(s.barrier, s.span, who, code)
        need = f"(q // {plan.stages} + 1) % 2" if producer else f"(q // {plan.stages}) % 2"
        self.ring_check(code, s.span, f"{who} must wait on parity {need} at the ring position q; the code's "
                        f"parity {show_expr(s.phase)} waits for another phase", parity % 2 != want, {"parity": parity})
        if producer:
            r.free = True
        if not producer:
            r.waited = True
            for rec in r.pending:
                if rec.land_pos is None:
                    self.land(rec)
            total = z3.IntVal(0)
            for e in r.expected:
                total = total + as_int(e)
            if r.expects:
                self.ring_check("deadlock", s.span, "the step's expect_tx announces more bytes than its bulk copies "
                                "bring: the phase never completes", total > r.copied, {"expected bytes": total})
                self.ring_check("async-read-before-wait", s.span, "the step's expect_tx announces fewer bytes than "
                                "its bulk copies bring: the phase completes before the data has landed",
                                total < r.copied, {"expected bytes": total})

    def ring_expect(self, s: ir.ExpectTx) -> None:
        self.ring_index(s.barrier, s.span, "the producer's expect_tx", "deadlock")
        self.ring.expected.append(self.scalar(s.nbytes))
        self.ring.expects += 1

    def ring_arrive(self, s: ir.Arrive) -> None:
        plan, r = self.ring_plan_, self.ring
        if not plan.lag:
            self.ring_index(s.barrier, s.span, "the consumer's release", "async-overwrite")
        else:  # step q releases the stage of step q - 1 (after the loop: the last step's)
            i = as_int(self.scalar(s.barrier.index)) if s.barrier.index is not None else z3.IntVal(0)
            self.ring_check("async-overwrite", s.span, f"the consumer holds stages q and q - 1 and releases "
                            f"{s.barrier.name}[(q - 1) % {plan.stages}]; this release names another stage",
                            i != (r.q - 1) % plan.stages, {"index": i})
            self.ring_check("async-overwrite", s.span, "the consumer releases the stage of the step before "
                            "the first one: that stage's next fill would not wait for its reads",
                            r.q < 1)
        if r.released:
            self.ring_check("async-overwrite", s.span, "the consumer releases a stage twice in one step",
                            z3.BoolVal(True))
        r.arrives += 1
        r.released = True

    def ring_copy(self, s: ir.Copy, dst, rec) -> None:
        plan, r = self.ring_plan_, self.ring
        self.ring_index(s.barrier, s.span, "the bulk copy", "async-read-before-wait")
        stage = as_int(dst.starts[0]) if len(dst.starts) and dst.extents[0] is None else None
        if stage is not None:
            self.ring_check("async-overwrite", s.span, f"the bulk copy writes stage {dst.base}[…] but the ring "
                            f"position q owns stage q % {plan.stages}", stage != r.q % plan.stages, {"stage": stage})
        if self.agent.name.startswith("producer") and not r.free:
            # the protocol's order: wait for the free stage, then fill it. A fill issued before the wait
            # (the first S steps' waits pass at once) overwrites, from step S on, the stage the consumer's
            # step q - S may still be reading
            self.ring_check("async-overwrite", s.span, f"the bulk copy into {dst.base}[q % {plan.stages}] is issued "
                            "before the producer's wait for that stage to be free: from step S on it overwrites "
                            "a stage the consumer's step q - S may still read", r.q >= plan.stages)
        r.pending.append(rec)
        r.copied += math.prod(dst.shape) * dst.dtype.bytes

    def ring_read(self, v, span) -> None:
        plan, r = self.ring_plan_, self.ring
        if self.agent.name.startswith("producer"):
            return
        stage = as_int(v.starts[0]) if len(v.starts) and v.extents[0] is None else None
        if not plan.lag:
            if r.released:
                self.ring_check("async-overwrite", span, f"the consumer reads {v.base} after releasing its stage: "
                                "the producer may already overwrite it", z3.BoolVal(True))
            if stage is not None:
                self.ring_check("async-read-before-wait", span, f"the consumer reads stage {v.base}[…] but the "
                                f"ring position q delivered stage q % {plan.stages}", stage != r.q % plan.stages,
                                {"stage": stage})
            return
        # held: stage q % S once waited (not after the loop), stage (q - 1) % S until released (q >= 1)
        if stage is None:  # the whole ring: every stage, one or two of them held
            self.ring_check("async-read-before-wait", span, f"the consumer reads every stage of {v.base} but "
                            "holds at most two", z3.BoolVal(plan.stages > 1 + plan.lag))
            return
        prev = z3.And(r.q >= 1, stage == (r.q - 1) % plan.stages)
        cur = z3.And(z3.BoolVal(not r.post), stage == r.q % plan.stages)
        if r.released:  # a hazard when the producer has a step q - 1 + S to refill it with
            refill = z3.BoolVal(True) if r.end is None else r.q - 1 + plan.stages < r.end
            self.ring_check("async-overwrite", span, f"the consumer reads stage {v.base}[(q - 1) % {plan.stages}] "
                            "after releasing it: the producer's step q - 1 + S may already overwrite it",
                            z3.And(prev, z3.Not(cur), refill), {"stage": stage})
        self.ring_check("async-read-before-wait", span, f"the consumer reads stage {v.base}[…] but holds only "
                        f"stage q % {plan.stages} (delivered at step q) and (q - 1) % {plan.stages} (until it "
                        "releases it)", z3.Not(z3.Or(prev, cur)), {"stage": stage})

    def _end_step(self, plan: RingPlan, sp: ir.For, sc: ir.For) -> None:
        r = self.ring
        if r.arrives == 0:
            self.ring_check("deadlock", sc.span, "the consumer's step never releases its stage: the producer "
                            "waits forever", r.q >= plan.lag)
        if plan.lag >= plan.stages:
            self.ring_check("deadlock", sc.span, f"the consumer holds {plan.lag + 1} stages of a {plan.stages}-stage "
                            "ring: from this step the producer waits for a release the consumer makes only after "
                            "it receives the next stage", r.q >= plan.stages)


def _tile_increment(body: tuple[ir.Stmt, ...], name: str) -> int | None:
    """k when the only assignment of `name` in a tile loop's body is a top-level `name = name + k` (k an
    integer constant): a counter of the block's tiles."""
    lets = [s for s in walk(body) if isinstance(s, ir.Let) and s.name == name]
    if len(lets) != 1 or not any(s is lets[0] for s in body):
        return None
    v = lets[0].value
    if isinstance(v, ir.Bin) and v.op == "+":
        for x, c in ((v.a, v.b), (v.b, v.a)):
            if isinstance(x, ir.Var) and x.name == name and isinstance(c, ir.Const) and type(c.value) is int:
                return c.value
    return None


def ring_step_loops(kernel: ir.Kernel) -> dict[int, frozenset[str]]:
    """Step loops of the kernel's producer/consumer rings (by id), each with the names of its lets that
    only feed ring positions (barrier indices and parities, the stage a ring buffer is viewed at): the
    protocol obligations cover those for every step, so they do not make the loop's data flow periodic."""
    out: dict[int, frozenset[str]] = {}
    plan = kernel_ring_plan(kernel)
    if plan is None:
        return out
    for role in (plan.producer, plan.consumer):
        step = _nest(role)[3]
        out[id(step)] = ring_only_lets(step.body, plan.buffers)
    return out


def ring_only_lets(body: tuple[ir.Stmt, ...], buffers: frozenset[str]) -> frozenset[str]:
    lets = {s.name: s.value for s in body if isinstance(s, ir.Let) and not isinstance(s.value.type, ir.TileT)}
    ring_exprs: list = []
    other_exprs: list = []
    for s in walk(body):
        if isinstance(s, ir.BarrierRef):
            ring_exprs.append(s.index)
        elif isinstance(s, ir.WaitBarrier):
            ring_exprs.append(s.phase)
        elif isinstance(s, ir.Ref) and s.space == "shared" and s.base in buffers and s.starts and s.extents[0] is None:
            ring_exprs.append(s.starts[0])
            other_exprs.extend(s.starts[1:])
        elif isinstance(s, ir.Ref):
            other_exprs.extend(s.starts)
        elif isinstance(s, ir.Let) and s.name not in lets:
            other_exprs.append(s.value)
        elif isinstance(s, (ir.Store, ir.If, ir.For, ir.Assume, ir.ExpectTx)):
            for f in ("cond", "start", "stop", "step", "value", "mask", "over", "nbytes"):
                v = getattr(s, f, None)
                if isinstance(v, ir.Expr):
                    other_exprs.append(v)
    used_elsewhere: set[str] = set()
    for e in other_exprs:
        used_elsewhere |= {x.name for x in walk(e) if isinstance(x, ir.Var)}
    # a let used elsewhere taints the lets it is computed from
    changed = True
    while changed:
        changed = False
        for n in list(used_elsewhere):
            if n in lets:
                for x in walk(lets[n]):
                    if isinstance(x, ir.Var) and x.name not in used_elsewhere:
                        used_elsewhere.add(x.name)
                        changed = True
    return frozenset(n for n in lets if n not in used_elsewhere)


def ring_positions(s) -> list:
    """Sub-expressions of a statement that only position a ring (a barrier index, a wait's parity)."""
    if isinstance(s, ir.WaitBarrier):
        return list(walk(s.phase)) + (list(walk(s.barrier.index)) if s.barrier.index is not None else [])
    if isinstance(s, (ir.Arrive, ir.ExpectTx)) and s.barrier.index is not None:
        return list(walk(s.barrier.index))
    return []
