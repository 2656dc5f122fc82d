"""Symbolic execution of the IR for one block with symbolic dims and block ids.

Control flow is concrete on each explored path: a condition or loop bound that the constraints do not
fix forks the path (trip counts are explored from 0 up to a cap; see `trip_cap`). Memory is symbolic:
each copy into shared memory becomes a *record* (the region it covers, the tags of what it wrote, which
thread wrote each element, when it was issued and when it landed), and a read of shared memory gets,
per element, the tags of the latest landed record covering it (an If-chain over records). The result
of a path is a Trace: the obligations the checks turn into Z3 queries.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import z3

from argus.analysis import terms as T
from argus.analysis.carried import prefetch_slice, written_tensors
from argus.analysis.periodicity import loop_shapes
from argus.analysis.ring import DryAbort, RingRules
from argus.analysis.symbolic import Context, Evaluator, Unsupported, as_int, simplify_int, solver, to_bool
from argus.analysis.tiles import TileRules
from argus.analysis.trace import Access, Obligation, Record, StoreEvent, Trace, Unknown, View
from argus.analysis.values import UNWRITTEN, ElemTags, SymTile, ambiguous, lookup, memo, merge_if
from argus.dsl.diagnostics import Span
from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir
from argus.ir.rings import ring_plan
from argus.ir.threads import MULTI, Holders, copy_thread
from argus.ir.transform import read_before_assigned, role_groups, walk

MAX_PATHS = 96
# the checks whose verdicts come from the explored paths (all but the kernel-only swizzle check)
TRACE_CHECKS = ("mma-contraction", "mma-accumulator", "store-coordinates", "accumulation-coverage",
                "reference-footprint", "tag-assertion", "uninitialized-read", "async-read-before-wait",
                "async-overwrite", "race", "oob-global", "oob-shared", "output-unwritten", "output-written-twice",
                "mma-layout", "misaligned-copy", "deadlock")


class AmbiguousField(Exception):
    """An assert_tag names a field two of an element's source tensors carry at different coordinates."""


class _Fork(Exception):
    pass


class _Deadlock(Exception):
    pass


@dataclass
class _Barrier:
    count: int
    arrivals: int = 0
    tx_expected: int = 0
    tx_issued: int = 0
    completed: int = 0
    pending: list = field(default_factory=list)  # bulk copies of the current phase
    vc: dict = field(default_factory=dict)  # joined clocks of the arrivals of the current phase
    phase_vcs: list = field(default_factory=list)  # vc of each completed phase
    phase_copies: list = field(default_factory=list)  # bulk copies completed by each phase


class _Agent:
    def __init__(self, name: str, threads: int, env: dict):
        self.name = name
        self.threads = threads
        self.env = env
        self.epoch = 0
        self.vc: dict[str, int] = {name: 0}
        self.acquired: dict[int, int] = {}  # per mbarrier (id): how many of its phases this agent acquired


class Executor(TileRules, RingRules):
    def __init__(self, kernel: ir.Kernel, ctx: Context, decisions: list, trip_cap: dict[int, int],
                 witnesses: list | None = None):
        self.k = kernel
        # models that answered earlier feasibility questions (of any path of this kernel): a question one of
        # them satisfies is feasible without asking the solver, which is slow to find a model when the index
        # arithmetic is nonlinear (tile counts times heads) and quick to refute
        self.witnesses: list = witnesses if witnesses is not None else []
        self.ctx = ctx
        self.prefix = list(decisions)
        self.taken: list = []
        self.alternatives: list[list] = []
        self.trip_cap = trip_cap
        self.path: list = []
        self.pos = 0
        self.trace = Trace([], [])
        self.buffers: dict[str, ir.AllocShared] = {}
        self.barriers: dict[str, list[_Barrier]] = {}
        self.uncommitted: list[Record] = []
        self.groups: list[list[Record]] = []
        self.steps: dict[str, int] = {}
        self.fresh_id = 0
        self.agent = _Agent("block", kernel.threads, {})
        self.tensor_ids = {t.name: i for i, t in enumerate(kernel.tensors)}
        self.tile_vars: list = []  # (t, loop, first tile b, stride G, count T) of persistent loops met
        self.barrier_allocs: dict[str, ir.AllocBarrier] = {}
        self.dry = False  # a symbolic ring step: decisions that would fork the path abort it
        self.reading_layout: ir.RegLayout | None = None  # the layout of the tile being computed
        ctx.on_load = self._on_scalar_load
        ctx.on_div = self._on_divisor
        self.divisor_sites: set = set()  # (span, divisor id): obliged once
        self.divisor_answers: dict = {}  # (divisor id, constraints, path) -> positive there
        self.axis_names = {d for t in kernel.tensors for d in t.dims if isinstance(d, str)}

    # ---- decisions (path forking) ----
    def _sat(self, extra) -> z3.CheckSatResult:
        asked = [*self.ctx.constraints, *self.path, extra]
        for m in self.witnesses[-WITNESSES:][::-1]:  # the newest first; the new question first
            if all(z3.is_true(m.eval(f, model_completion=True)) for f in reversed(asked)):
                return z3.sat
        s = solver(2000, preprocess=True)
        s.add(*asked)
        r = s.check()
        if r == z3.unknown:  # each pipeline settles queries the other does not (symbolic.PREPROCESS)
            s = solver(2000)
            s.add(*asked)
            r = s.check()
        if r == z3.sat:
            self.witnesses.append(s.model())
        return r

    def _decide(self, options: list) -> object:
        i = len(self.taken)
        if i < len(self.prefix):
            choice = self.prefix[i]
        else:
            choice = options[0]
            for alt in options[1:]:
                self.alternatives.append(self.taken + [alt])
        self.taken.append(choice)
        return choice

    def decide(self, cond, span: Span | None) -> bool:
        c = to_bool(cond)
        if isinstance(c, bool):
            return c
        c = z3.simplify(c)
        if z3.is_true(c):
            return True
        if z3.is_false(c):
            return False
        can_t = self._sat(c) != z3.unsat
        can_f = self._sat(z3.Not(c)) != z3.unsat
        if can_t and can_f and self.dry:
            raise DryAbort()
        if can_t and can_f:
            choice = self._decide([True, False])
        else:
            choice = can_t
        self.path.append(c if choice else z3.Not(c))
        return choice

    def concrete(self, v, span: Span | None, cap: int | None = None, what: str = "value") -> int:
        """A concrete value for `v` on this path, forking over its possible values.

        With `cap` (trip counts): the values 0..cap that are feasible, in order; if larger values are
        feasible too, the loop is recorded as truncated (the periodicity argument covers them). Without
        `cap`: up to 16 feasible values, else the construct is unsupported.
        """
        v = simplify_int(v)
        if isinstance(v, int):
            return v
        if self.dry:
            raise DryAbort()
        if cap is not None:
            values = [t for t in range(cap + 1) if self._sat(v == t) != z3.unsat]
            if self._sat(v > cap) != z3.unsat:
                if not values:  # fixed above the cap by earlier decisions (e.g. a sibling loop's count)
                    s = solver(2000)
                    s.add(*self.ctx.constraints, *self.path)
                    if s.check() == z3.sat:
                        values = [s.model().eval(v, model_completion=True).as_long()]
                self.trace.truncated.append(span)
        else:
            s = solver(2000)
            s.add(*self.ctx.constraints, *self.path)
            values = []
            while len(values) <= 16 and s.check() == z3.sat:
                m = s.model().eval(v, model_completion=True).as_long()
                values.append(m)
                s.add(v != m)
            if len(values) > 16:
                raise Unsupported(f"the {what} takes too many values to enumerate", span)
            values.sort()
        if not values:
            raise Unsupported(f"no feasible {what}", span)
        choice = self._decide(values) if len(values) > 1 else values[0]
        self.path.append(v == choice)
        if cap is not None:
            self.trace.trip_constraints.append(self.path[-1])
        return choice

    # ---- running ----
    def run(self) -> Trace:
        self.trace.constraints = list(self.ctx.constraints)
        gen = self.exec_block(self.k.body)
        try:
            for _ in gen:
                raise _Deadlock()
        except _Deadlock:
            self.trace.deadlock = self.k.span
        self.trace.constraints = list(self.ctx.constraints) + list(self.path)
        self.trace.decisions = list(self.taken)
        self.trace.tiles = list(self.tile_vars)
        return self.trace

    def ev(self) -> Evaluator:
        return Evaluator(self.ctx, self.agent.env)

    def scalar(self, e: ir.Expr):
        return self.ev().scalar(e)

    def exec_block(self, stmts) -> Iterator[None]:
        for item in role_groups(stmts):
            if isinstance(item, tuple):
                yield from self.exec_roles(item)
            else:
                yield from self.exec_stmt(item)

    def exec_roles(self, roles) -> Iterator[None]:
        saved = self.agent
        agents = [(_Agent(f"{r.kind}#{n}", r.warpgroups * 128, dict(saved.env)), r) for n, r in enumerate(roles)]
        for a, _ in agents:
            a.vc = dict(saved.vc)
            a.vc[a.name] = 0
        allocs = {n: self.barrier_allocs[n] for n in self.barriers}
        plan = ring_plan(roles, allocs)
        if not isinstance(plan, str):
            yield from self.exec_ring(plan, {r.kind: a for a, r in agents})
            self.agent = saved
            self._join_roles(saved, [a for a, _ in agents])
            return
        if any(isinstance(x, ir.For) and x.kind == "persistent" for r in roles for x in walk(r.body)):
            raise Unsupported(f"warp-specialised roles with a persistent tile loop are verified as a producer/"
                              f"consumer ring, and these are not one: {plan}", roles[0].span)
        live = [[a, self.exec_block(r.body)] for a, r in agents]
        while live:
            before = self.pos
            for item in list(live):
                a, gen = item
                self.agent = a
                try:
                    next(gen)
                except StopIteration:
                    live.remove(item)
            self.agent = saved
            if live and self.pos == before:
                yield
        self._join_roles(saved, [a for a, _ in agents])

    @staticmethod
    def _join_roles(saved, agents) -> None:
        for a in agents:  # the block continues after every role finished
            for k, v in a.vc.items():
                saved.vc[k] = max(saved.vc.get(k, 0), v)
        saved.epoch += 1

    def step_snapshot(self) -> dict:
        return dict(self.steps)

    def exec_stmt(self, s: ir.Stmt) -> Iterator[None]:
        self.pos += 1
        if isinstance(s, ir.Let):
            self.let(s)
        elif isinstance(s, ir.AllocShared):
            self.buffers[s.name] = s
        elif isinstance(s, ir.AllocBarrier):
            self.barriers[s.name] = [_Barrier(s.count) for _ in range(s.n or 1)]
            self.barrier_allocs[s.name] = s
        elif isinstance(s, ir.Assume) and s.over is not None:
            self.ctx.quantified.append((s.cond, self.scalar(s.over), dict(self.agent.env)))
        elif isinstance(s, ir.Assume):
            c = to_bool(self.scalar(s.cond))
            if not isinstance(c, bool):
                self.ctx.constraints.append(c)
                self.ctx.assumed.add(c.get_id())
        elif isinstance(s, ir.Copy):
            self.copy(s)
        elif isinstance(s, ir.Commit):
            self.groups.append(self.uncommitted)
            self.uncommitted = []
        elif isinstance(s, ir.WaitGroup):
            land = self.groups[:-s.n] if s.n else self.groups
            for g in land:
                for r in g:
                    self.land(r)
            self.groups = self.groups[-s.n:] if s.n else []
        elif isinstance(s, ir.Barrier):
            self.agent.epoch += 1
        elif isinstance(s, ir.Store):
            self.store(s)
        elif isinstance(s, ir.For) and s.kind == "persistent":
            yield from self.exec_persistent(s)
        elif isinstance(s, ir.For):
            start = self.concrete(self.scalar(s.start), s.span, what="loop start")
            step = self.concrete(self.scalar(s.step), s.span, what="loop step")
            if step <= 0:
                raise Unsupported("loops with a non-positive step", s.span)
            stop_v = self.scalar(s.stop)
            trips = simplify_int(zceil(as_int(stop_v) - start, step)) if not isinstance(stop_v, int) \
                else max(0, -(-(stop_v - start) // step))
            if not isinstance(trips, int):
                trips = self.concrete(z3.If(trips > 0, trips, 0), s.span, self.trip_cap.get(id(s), 8),
                                      "trip count")
            trips = max(0, trips)
            for t in range(trips):
                v = start + t * step
                self.agent.env[s.var] = v
                self.steps[s.var] = v
                yield from self.exec_block(s.body)
            self.steps.pop(s.var, None)
        elif isinstance(s, ir.If):
            c = self.scalar(s.cond)
            if not self.merge_scalar_if(s, c):
                yield from self.exec_block(s.then if self.decide(c, s.span) else s.orelse)
        elif isinstance(s, ir.AssertTag):
            self.assert_tag(s)
        elif isinstance(s, ir.Turn):
            pass  # orders warpgroups, moves no data: the lockstep program is what is proved (ir.Turn)
        elif isinstance(s, (ir.Arrive, ir.ExpectTx, ir.WaitBarrier)) and \
                (self.ring is not None or self.tile_ring_owns(s.barrier.name)):
            with self.ring_scope(s.barrier.name):
                {ir.Arrive: self.ring_arrive, ir.ExpectTx: self.ring_expect, ir.WaitBarrier: self.ring_wait}[type(s)](s)
        elif isinstance(s, ir.Arrive):
            b = self.barrier(s.barrier, s.span)
            self.arrive(b)
        elif isinstance(s, ir.ExpectTx):
            b = self.barrier(s.barrier, s.span)
            n = self.concrete(self.scalar(s.nbytes), s.span, what="byte count")
            b.tx_expected += n
            self.arrive(b)
        elif isinstance(s, ir.WaitBarrier):
            b = self.barrier(s.barrier, s.span)
            parity = self.concrete(self.scalar(s.phase), s.span, what="phase parity") & 1
            while b.completed % 2 == parity:
                yield
            self.acquire(b, parity)
        elif isinstance(s, ir.PipelineFor):
            raise Unsupported("pipeline loop was not expanded", s.span)
        elif isinstance(s, ir.AtomicAdd):
            # bounds as a store's; coverage knows that atomic adds to one element do not race with each
            # other (argus/analysis/checks/coverage_atomic.py); the footprint of an element accumulated over
            # blocks is not modelled (an unknown at the store)
            self.store(s, atomic=True)
        else:
            raise Unsupported(f"{type(s).__name__}", s.span)

    def let(self, s: ir.Let) -> None:
        self.reading_layout = s.layout  # shared memory read into this tile is read in its layout
        try:
            self.agent.env[s.name] = self.value(s.value)
        finally:
            self.reading_layout = None
        if isinstance(s.value, ir.Load) and not isinstance(s.value.type, TileT):
            # a scalar read from a tensor keeps its origin (tensor and coordinates) as tags
            self.agent.env[f"{s.name}#tags"] = self.scalar_load_tags(s.value)
        elif (tags := self.scalar_tags(s.value)) is not None:
            # a scalar computed from such reads (`n = max(load(len[r]), 1)`) keeps their origins
            self.agent.env[f"{s.name}#tags"] = tags
        else:
            self.agent.env.pop(f"{s.name}#tags", None)

    def merge_scalar_if(self, s: ir.If, c) -> bool:
        """An `if` whose branches only assign integer scalars is a select, not a fork: `off = off + 64`
        under seven conditions is one path, not 128."""
        cb = to_bool(c)
        if isinstance(cb, bool) or z3.is_true(z3.simplify(cb)) or z3.is_false(z3.simplify(cb)):
            return False
        branches = (s.then, s.orelse)
        if not all(isinstance(x, ir.Let) and isinstance(x.value.type, ScalarT) and not x.value.type.dtype.is_float
                   and not any(isinstance(y, ir.Load) for y in walk(x.value)) for b in branches for x in b):
            return False
        env = self.agent.env
        results = []
        for branch in branches:
            local = dict(env)
            for x in branch:
                local[x.name] = Evaluator(self.ctx, local).scalar(x.value)
            results.append(local)
        for name in {x.name for b in branches for x in b}:
            a, b = results[0].get(name), results[1].get(name)
            if a is None or b is None:
                return False  # defined on one side only: leave it to a fork
            env[name] = a if (isinstance(a, int) and isinstance(b, int) and a == b) else \
                z3.If(cb, as_int(a) if not isinstance(a, bool) else z3.BoolVal(a), as_int(b) if not isinstance(b, bool)
                      else z3.BoolVal(b))
            env.pop(f"{name}#tags", None)
        return True

    # ---- persistent tile loops ----
    def exec_persistent(self, s: ir.For) -> Iterator[None]:
        """`for t in persistent(T)`: block b takes tiles b, b + G, b + 2G, ... (G blocks in the grid), so
        every tile in [0, T) is taken exactly once over the grid. Rather than enumerating them, the body
        runs for an arbitrary tile t in [b, T) (a fresh variable: obligations hold for every tile of every
        block), followed by the next tile t + G when there is one, which covers the interaction of
        consecutive tiles (races between one tile's last accesses and the next one's first).

        Shared memory written in the body holds an earlier tile's data when tile t starts: reading it
        before this tile writes it is opaque (unknown). Nothing may be in flight across tiles: async
        copies still pending at a tile's end make the loop unknown."""
        b, g, n = self.scalar(s.start), self.scalar(s.step), self.scalar(s.stop)
        if not self.decide(as_int(b) < as_int(n), s.span):
            return
        self.fresh_id += 1
        t = z3.Int(f"{s.var}@{self.fresh_id}")
        self.path.extend([t >= as_int(b), t < as_int(n)])
        self.tile_vars.append((t, s, as_int(b), as_int(g), as_int(n)))
        if not self.quiescent():
            self.trace.unknowns.extend(Unknown(c, s.span, "async copies are in flight when the tile loop starts; "
                                               "the tile-loop abstraction needs none") for c in TRACE_CHECKS)
        self.stale_records(s)
        self.carry_into_tile(s, t, as_int(b), as_int(g))
        for k, tile in enumerate((t, t + as_int(g))):
            if k == 1 and not self.decide(tile < as_int(n), s.span):
                break
            self.agent.env[s.var] = tile
            self.steps[s.var] = tile
            yield from self.exec_block(s.body)
            if not self.quiescent():
                self.trace.unknowns.extend(Unknown(c, s.span, "async copies are still in flight at the end of a "
                                                   "tile; the tile-loop abstraction needs none across tiles")
                                           for c in TRACE_CHECKS)
        self.steps.pop(s.var, None)

    def carry_into_tile(self, s: ir.For, t, b, g) -> None:
        """The values tile t starts from. Values the body reads before assigning them come from the tile
        before: when they are a pure function of that tile (argus/analysis/carried.py, the prefetch
        induction), a later tile t >= b + G runs that function at t - G first, and the first tile t = b
        starts from the values before the loop: both exact, a fork. Otherwise only the first tile is
        exact: t is pinned to b (so a violation found is real) and later tiles are unknown."""
        names = sorted(n for n in read_before_assigned(s.body) if n in self.agent.env)
        if not names:
            return
        defining = prefetch_slice(s.body, names, written_tensors(self.k))
        if isinstance(defining, str):
            self.carried_unknown(names, s.span, f" and is not a function of the tile before ({defining})")
            self.path.append(t == b)
            return
        if self.decide(t == b, s.span):
            return
        self.path.append(t >= b + g)
        self.agent.env[s.var] = t - g
        self.steps[s.var] = t - g
        for st in defining:
            if isinstance(st, ir.Let):
                self.let(st)
                continue
            taken = self.decide(self.scalar(st.cond), st.span)
            branch, other = (st.then, st.orelse) if taken else (st.orelse, st.then)
            if {x.name for x in other} - {x.name for x in branch}:
                raise Unsupported("a guarded prefetch whose guard may skip the load at a tile the block runs "
                                  "before another: the next tile would start from an older value", st.span)
            for x in branch:
                self.let(x)

    def carried_unknown(self, names, span, why: str = "") -> None:
        self.trace.unknowns.extend(Unknown(c, span, f"a register value ({', '.join(names)}) is carried across the "
                                           f"tiles of a persistent loop{why}; only a block's first two tiles are "
                                           "modelled") for c in TRACE_CHECKS)

    def quiescent(self) -> bool:
        pending = any(b.pending for bars in self.barriers.values() for b in bars)
        return not self.uncommitted and not any(self.groups) and not pending

    def stale_records(self, s: ir.For) -> None:
        """Buffers the loop body writes hold an earlier tile's data at the start of a tile."""
        written = {x.dst.base for x in walk(s.body) if isinstance(x, ir.Copy)}
        for name in sorted(written):
            buf = self.buffers.get(name)
            if buf is None:
                continue
            view = View("shared", name, (0,) * len(buf.shape), tuple(buf.shape), False, tuple(buf.shape), buf.dtype)
            tags = ElemTags({}, T.opaque("written by an earlier tile of the persistent loop", s.span), "earlier tile")
            a = self.agent
            rec = Record(len(self.trace.records), view, lambda idx, t=tags: t, lambda idx: MULTI, "sync", s.span,
                         self.pos, a.epoch - 1, a.name, dict(a.vc), self.step_snapshot())
            rec.land_pos, rec.land_epoch = self.pos, a.epoch - 1
            self.trace.records.append(rec)

    # ---- mbarriers ----
    def barrier(self, ref: ir.BarrierRef, span) -> _Barrier:
        bars = self.barriers[ref.name]
        i = 0 if ref.index is None else self.concrete(self.scalar(ref.index), span, what="mbarrier index")
        if not 0 <= i < len(bars):
            self.trace.obligations.append(Obligation(
                "oob-shared", span, f"mbarrier index {i} is outside {ref.name}[0:{len(bars)}]",
                z3.BoolVal(True), [], {}, self.step_snapshot()))
            raise Unsupported("mbarrier index out of range", span)
        return bars[i]

    def arrive(self, b: _Barrier) -> None:
        # Release: accesses so far have local time t; publish t + 1 (> t: they are ordered before any
        # acquirer) and continue at t + 2 (later accesses are not).
        a = self.agent
        a.vc[a.name] = a.vc.get(a.name, 0) + 1
        for k, v in a.vc.items():
            b.vc[k] = max(b.vc.get(k, 0), v)
        a.vc[a.name] += 1
        b.arrivals += 1
        self.complete(b)

    def complete(self, b: _Barrier) -> None:
        if b.arrivals >= b.count and b.tx_issued >= b.tx_expected:
            for r in b.pending:
                b.vc[f"tma{r.rid}"] = 1
            b.phase_copies.append(list(b.pending))
            b.pending.clear()
            b.phase_vcs.append(dict(b.vc))
            b.vc = {}
            b.arrivals = b.tx_expected = b.tx_issued = 0
            b.completed += 1

    def acquire(self, b: _Barrier, parity: int) -> None:
        """A wait on `parity` passed. On the GPU it may pass as soon as the first phase of that parity
        after the ones this agent already acquired completes (a fresh barrier passes parity 1 at once),
        however far the barrier has run ahead here: acquire exactly up to that phase, so that what was
        released in later phases stays unordered (and a copy completed by a later phase stays in flight)."""
        a = self.agent
        done = a.acquired.get(id(b), 0)
        if done % 2 != parity:
            return  # the phase before `done` (or the virtual phase -1) already has this parity
        for vc in b.phase_vcs[: done + 1]:
            for k, v in vc.items():
                a.vc[k] = max(a.vc.get(k, 0), v)
        for copies in b.phase_copies[: done + 1]:
            for r in copies:
                if r.land_pos is None:
                    self.land(r)
        a.acquired[id(b)] = done + 1

    # ---- memory ----
    def view(self, r: ir.Ref, span) -> View:
        starts = tuple(simplify_int(self.scalar(s)) for s in r.starts)
        v = View(r.space, r.base, starts, r.extents, r.transposed, r.shape, r.dtype)
        self.check_view_bounds(v, span)
        return v

    def check_view_bounds(self, v: View, span) -> None:
        if v.space != "shared":
            return
        shape = self.buffers[v.base].shape
        conds = []
        for s, e, n in zip(v.starts, v.extents, shape):
            hi = (e or 1)
            if isinstance(s, int):
                if s < 0 or s + hi > n:
                    conds.append(z3.BoolVal(True))
            else:
                conds.append(z3.Or(s < 0, s + hi > n))
        if conds:
            self.trace.obligations.append(Obligation(
                "oob-shared", span, lambda: f"view {v.describe()} reaches outside shared buffer '{v.base}' "
                f"{list(shape)}", z3.Or(*conds), [], {}, self.step_snapshot()))

    def global_tags(self, v: View) -> object:
        t = self.k.tensor(v.base)
        dims = [as_int(d) if isinstance(d, int) else self.ctx.dims[d] for d in t.dims]

        @memo
        def fn(idx):
            c = tuple(as_int(x) for x in v.coords(idx))
            fields = {(v.base, n): x for n, x in enumerate(c)}
            inside = z3.And(*[z3.And(x >= 0, x < d) for x, d in zip(c, dims)]) if c else True
            return ElemTags(fields, T.atom(v.base, c, inside), v.base)
        return fn

    def shared_tags(self, v: View, pos: int):
        """Tags of each element of a shared view read at `pos`: the latest landed record covering it."""
        cands = [r for r in self.trace.records if r.view.base == v.base and r.land_pos is not None
                 and r.land_pos <= pos and r.view.may_overlap(v)]
        cands.sort(key=lambda r: r.land_pos)
        # a record that covers the view's whole region hides every older one; a symbolic stage index is
        # compared under the path's constraints (a read of ring stage (n_kv + S - 1) % S after the loop:
        # without the proof every older record of the buffer stays in an if-chain, and the footprint
        # checks saw V rows summed twice at 10 kv steps in FlashAttention-3's order on split rings)
        for n in range(len(cands) - 1, -1, -1):
            if _contains_region(cands[n].view, v, self.provably_equal):
                cands = cands[n:]
                break

        @memo
        def fn(idx):
            x = v.coords(idx)
            out = UNWRITTEN
            for r in cands:
                out = merge_if(r.view.covers(x), r.tags(r.view.local(x)), out)
            return out
        return fn

    def named(self, fields: dict) -> dict:
        """Fields with printable keys: (A, 1) -> 'A.K' (the axis name), user fields as they are."""
        out = {}
        for k, v in fields.items():
            if isinstance(k, tuple):
                tensor, axis = k
                dims = self.k.tensor(tensor).dims
                out[f"{tensor}.{dims[axis] if axis < len(dims) else axis}"] = v
            else:
                out[k] = v
        return out

    def dims_of(self, tensor: str) -> tuple:
        return self.k.tensor(tensor).dims

    def provably_equal(self, x, y, ms: int = 1000) -> bool:
        """x == y on this path (unsat of x != y under the kernel's and the path's constraints)."""
        s = solver(ms)
        s.add(*self.ctx.constraints, *self.path, as_int(x) != as_int(y))
        return s.check() == z3.unsat

    def read_shared(self, v: View, span, multi: bool) -> object:
        pos = self.pos
        inflight = [r for r in self.trace.records if r.view.base == v.base and r.view.may_overlap(v)
                    and r.issue_pos <= pos and (r.land_pos is None or r.land_pos > pos)]
        if inflight:
            idx = self.fresh_idx(v.shape, "e")
            x = v.coords(idx)
            bad = z3.Or(*[r.view.covers(x) for r in inflight])
            first = inflight[0]
            self.trace.obligations.append(Obligation(
                "async-read-before-wait", span,
                lambda: f"{v.describe()} is read while an async copy into it is still in flight",
                bad, self.idx_domain(idx, v.shape), self.idx_vars(idx, "element"), self.step_snapshot(),
                extra={"copy_span": first.span, "copy_step": first.step, "buffer": v.base, "view": v}))
        thread = MULTI if multi else holders(self.reading_layout, v, False) if self.reading_layout is not None \
            else self.copy_threads(v)
        if self.in_ring(v):
            with self.ring_scope(v.base):
                self.ring_read(v, span)
        self.trace.accesses.append(Access("read", v, thread, pos, self.agent.epoch, self.agent.name,
                                          dict(self.agent.vc), span, self.step_snapshot(), None, self.in_ring(v)))
        return self.shared_tags(v, pos)

    def in_ring(self, v: View) -> bool:
        return (self.ring is not None and v.base in self.ring_plan_.buffers) or self.tile_ring_owns(v.base)

    def copy_threads(self, v: View):
        threads = self.agent.threads
        return lambda idx: copy_thread(tuple(as_int(i) for i in idx), v.shape, v.dtype.bytes, threads)

    def copy(self, s: ir.Copy) -> None:
        dst = self.view(s.dst, s.span)
        if isinstance(s.src, ir.Ref):
            src = self.view(s.src, s.span)
            if src.space == "global":
                self.trace.global_accesses.append((src, s.masked, "read", s.span, self.step_snapshot(),
                                                   self.copy_threads(src)))
                tags = self.global_tags(src)
                if s.mode == "bulk":
                    self.trace.bulk_copies.append((s, src, dst))
            else:
                tags = self.read_shared(src, s.span, False)
        else:
            tile = self.value(s.src)
            tags = tile.tags
        a = self.agent
        # a register tile is written by the threads that hold it (its layout), not as a tile copy
        writer = holders(s.layout, dst, True) if not isinstance(s.src, ir.Ref) and s.layout is not None \
            else self.copy_threads(dst)
        rec = Record(len(self.trace.records), dst, tags, writer, s.mode, s.span, self.pos,
                     a.epoch, a.name, dict(a.vc), self.step_snapshot())
        self.trace.records.append(rec)
        if s.mode == "sync":
            self.land(rec)
        elif s.mode == "async":
            self.uncommitted.append(rec)
        elif self.in_ring(dst):
            with self.ring_scope(dst.base):
                self.ring_copy(s, dst, rec)
        else:
            b = self.barrier(s.barrier, s.span)
            b.pending.append(rec)
            b.tx_issued += math.prod(dst.shape) * dst.dtype.bytes
            self.complete(b)

    def land(self, r: Record) -> None:
        r.land_pos = self.pos
        r.land_epoch = self.agent.epoch
        # A bulk copy is its own agent (the TMA engine): ordered after what its issuer knew, and known
        # to others only through the mbarrier phase it completes.
        agent = self.agent.name if r.mode != "bulk" else f"tma{r.rid}"
        vc = dict(self.agent.vc) if r.mode != "bulk" else {**r.issue_vc, f"tma{r.rid}": 0}
        self.trace.accesses.append(Access("write", r.view, MULTI if r.mode == "bulk" else r.writer, r.issue_pos,
                                          r.issue_epoch, agent, vc, r.span, r.step, r, self.in_ring(r.view)))

    def _on_scalar_load(self, e: ir.Load, idx: tuple) -> None:
        v = View("global", e.ref.base, tuple(simplify_int(i) for i in idx), e.ref.extents, False, (), e.ref.dtype)
        self.trace.global_accesses.append((v, False, "read", e.span, self.step_snapshot(), lambda i: 0))

    def _on_divisor(self, e: ir.Expr, b) -> bool:
        """A divisor that is not a constant: True where it is positive on this path (z3's Euclidean division
        is then floor division); otherwise an obligation that it is not zero (integer division by zero is
        undefined behaviour in CUDA; the interpreter stops on it)."""
        key = b.get_id()
        if self.ctx.positive(b):
            return True
        # a division in a loop body is met once per trip with the same path: ask the solver once
        at = (key, len(self.ctx.constraints), tuple(c.get_id() if isinstance(c, z3.ExprRef) else c for c in self.path))
        hit = self.divisor_answers.get(at)
        if hit is None:
            s = solver(2000, preprocess=True)
            s.add(*self.ctx.constraints, *self.path, b <= 0)
            hit = self.divisor_answers[at] = s.check() == z3.unsat
        if hit:
            return True
        site = (e.span, key)
        if site not in self.divisor_sites:
            self.divisor_sites.add(site)
            self.trace.obligations.append(Obligation(
                "division-by-zero", e.span, lambda: f"the divisor {z3.simplify(b)} may be zero (integer division and "
                "remainder by zero are undefined on the GPU)", b == 0, [], {"divisor": b}, self.step_snapshot()))
        return False

    def scalar_load_tags(self, e: ir.Load) -> ElemTags:
        idx = tuple(simplify_int(self.ev().scalar(x)) for x in e.ref.starts)
        v = View("global", e.ref.base, idx, e.ref.extents, False, (), e.ref.dtype)
        return self.global_tags(v)(())

    def store_mask(self, s: ir.Store, shape: tuple[int, ...]):
        """where=: a function view idx -> z3 Bool (the element is written), or None."""
        if s.mask is None:
            return None
        m = self.value(s.mask)
        if not isinstance(m, SymTile):
            c = to_bool(m)
            return lambda idx: z3.BoolVal(c) if isinstance(c, bool) else c
        if m.value is None:
            raise Unsupported("a where= mask that is not computed from positions and scalars", s.span)
        n = len(shape)

        def keep(idx):
            off = n - len(m.shape)
            sub = tuple(0 if d == 1 else idx[off + k] for k, d in enumerate(m.shape))
            return _bool(to_bool(m.value(sub)))
        return keep

    def store(self, s: ir.Store | ir.AtomicAdd, atomic: bool = False) -> None:
        v = self.view(s.dst, s.span)
        keep = self.store_mask(s, v.shape)
        if keep is not None:
            v.keep = keep
        self.reading_layout = s.layout
        try:
            value = self.value(s.value)
        finally:
            self.reading_layout = None
        if not isinstance(value, SymTile):  # a scalar broadcast over the tile
            tags = self._operands((s.value,))[0].tags
            value = SymTile(v.shape, lambda idx, f=tags: f(()))
        self.trace.global_accesses.append((v, s.masked, "write", s.span, self.step_snapshot(), self.copy_threads(v)))
        t = self.k.tensor(v.base)
        dims = [as_int(d) if isinstance(d, int) else self.ctx.dims[d] for d in t.dims]

        def inside(idx, v=v, dims=dims, keep=keep):
            coords = v.coords(idx)
            ok = z3.And(*[z3.And(as_int(c) >= 0, as_int(c) < d) for c, d in zip(coords, dims)])
            return z3.And(ok, keep(idx)) if keep is not None else ok  # masked-off elements are not written
        self.trace.stores.append(StoreEvent(s.span, v, s.masked, self.step_snapshot(), value, inside, atomic))

    # ---- values ----
    def fresh_idx(self, shape, prefix: str) -> tuple:
        self.fresh_id += 1
        return tuple(z3.Int(f"{prefix}{self.fresh_id}_{d}") for d in range(len(shape)))

    @staticmethod
    def idx_domain(idx, shape) -> list:
        return [c for i, n in zip(idx, shape) for c in (i >= 0, i < n)]

    @staticmethod
    def idx_vars(idx, label: str) -> dict:
        return {f"{label}[{d}]": i for d, i in enumerate(idx)}

    # ---- tag assertions ----
    def assert_tag(self, s: ir.AssertTag) -> None:
        lam = s.predicate
        params = {p: z3.Int(f"{p}_{self.fresh_id}") for p in lam.params}
        self.fresh_id += 1
        domain: list = []
        sides: dict = {}
        try:
            cond = self.tag_expr(lam.body, params, domain, sides)
        except AmbiguousField as exc:  # no obligation on a field the source cannot pin down
            self.trace.unknowns.append(Unknown("tag-assertion", s.span, str(exc)))
            return
        self.trace.obligations.append(Obligation(
            "tag-assertion", s.span, "tag assertion does not hold" + (f" [{s.name}]" if s.name else ""),
            z3.Not(to_bool(cond)), domain, dict(params), self.step_snapshot(), sides))

    def tag_expr(self, e: ir.Expr, params: dict, domain: list, sides: dict):
        if isinstance(e, ir.ElemTag):
            idx = tuple(as_int(self.tag_expr(i, params, domain, sides)) for i in e.indices)
            if isinstance(e.source, ir.Ref):
                v = self.view(e.source, e.span)
                tags = self.global_tags(v) if v.space == "global" else self.shared_tags(v, self.pos)
                shape = v.shape
                label = v.describe()
            else:
                tile = self.value(e.source)
                tags, shape, label = tile.tags, tile.shape, "value"
            domain.extend(c for i, n in zip(idx, shape) for c in (i >= 0, i < n))
            t = tags(idx)
            domain.append(T.zb(T.b_and(T.b_not(t.zero), T.b_not(t.uninit))))
            both = ambiguous(t.fields, e.field, self.dims_of)
            if both:
                raise AmbiguousField(
                    f"{label}[...].{e.field} is ambiguous: the element comes from axis {e.field} of "
                    f"{' and of '.join(dict.fromkeys(both))} at different coordinates; give those axes different "
                    "names (e.g. SQ and SKV) or tag the value with a field of its own")
            val = lookup(t.fields, e.field, self.dims_of)
            key = f"{label}[{', '.join(str(i) for i in idx)}]"
            sides.setdefault(key, {})[e.field] = val
            return as_int(val)
        if isinstance(e, (ir.Bin, ir.Cmp, ir.Un, ir.Select, ir.Math)):
            # rebuild with sub-terms evaluated through tag_expr
            sub = {}
            for f in ("a", "b", "cond"):
                if hasattr(e, f) and getattr(e, f) is not None:
                    sub[f] = self.tag_expr(getattr(e, f), params, domain, sides)
            if isinstance(e, ir.Math):
                args = [self.tag_expr(a, params, domain, sides) for a in e.args]
                env = {f"__a{n}": v for n, v in enumerate(args)}
                fake = ir.Math(e.type, e.span, e.fn,
                               tuple(ir.Var(a.type, a.span, f"__a{n}") for n, a in enumerate(e.args)))
                return Evaluator(self.ctx, {**self.agent.env, **env}).scalar(fake)
            env = {f"__{k}": v for k, v in sub.items()}
            fake_kw = {k: ir.Var(getattr(e, k).type, None, f"__{k}") for k in sub}
            import dataclasses
            fake = dataclasses.replace(e, **fake_kw)
            return Evaluator(self.ctx, {**self.agent.env, **env}).scalar(fake)
        if isinstance(e, ir.Var) and e.name in params:
            return params[e.name]
        if isinstance(e, ir.Load) and not isinstance(e.type, TileT):
            # a tensor read in a specification (load(row_token[y[c].M])): the tensor's contents
            idx = tuple(self.tag_expr(i, params, domain, sides) for i in e.ref.starts)
            return self.ctx.tensor_value(e.ref.base, e.ref.dtype, idx)
        return self.scalar(e)


def holders(layout: ir.RegLayout, view: View, owner_only: bool) -> Holders:
    from argus.ir.passes.layouts import fragment_of

    return Holders(fragment_of(layout), len(view.shape) == 1, owner_only)


def _contains_region(a: View, b: View, equal=None) -> bool:
    """Does record view `a` cover every element of view `b` (concrete starts; transposition is only
    the order of the indices)? `equal(x, y)` proves two symbolic starts equal on the path (a ring stage
    one role indexes with a counter and the other with a closed form)."""
    for sa, ea, sb, eb in zip(a.starts, a.extents, b.starts, b.extents):
        if not (isinstance(sa, int) and isinstance(sb, int)):
            if ea == eb and (z3.eq(as_int(sa), as_int(sb)) or (equal is not None and equal(sa, sb))):
                continue
            return False
        if not (sa <= sb and sb + (eb or 1) <= sa + (ea or 1)):
            return False
    return True


def zceil(a, b: int):
    return (a + b - 1) / b


def _bool(v):
    return z3.BoolVal(v) if isinstance(v, bool) else v


WITNESSES = 12  # the models an executor tries before it asks the solver


def explore(kernel: ir.Kernel, defines: dict[str, object]) -> tuple[list[Trace], list[Context], list[str]]:
    """Every path (up to MAX_PATHS) of the kernel for one symbolic block: traces, their contexts, notes."""
    caps = {k: v.cap for k, v in loop_shapes(kernel).items()}
    todo: list[list] = [[]]
    traces: list[Trace] = []
    contexts: list[Context] = []
    notes: list[str] = []
    witnesses: list = []
    while todo:
        prefix = todo.pop()
        if len(traces) >= MAX_PATHS:
            notes.append(f"more than {MAX_PATHS} paths: the rest were not explored")
            break
        ctx = Context.create(kernel, defines)
        ex = Executor(kernel, ctx, prefix, caps, witnesses)
        try:
            traces.append(ex.run())
        except Unsupported as exc:
            exc.context = ctx  # its assumes still give the numeric tier valid shapes
            raise
        contexts.append(ctx)
        todo.extend(ex.alternatives)
    return traces, contexts, notes
