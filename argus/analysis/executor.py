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

from argus.analysis.symbolic import Context, Evaluator, Unsupported, as_int, simplify_int, solver, to_bool
from argus.analysis.tags import MISSING, Contribution, ElemTags, SymTile, combine, const_tags, merge_if, unary
from argus.dsl.diagnostics import Span
from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.threads import MULTI, copy_thread
from argus.ir.transform import role_groups, walk

MAX_PATHS = 96


# ---- what a path leaves behind ----
@dataclass
class View:
    """A concrete-shaped view of a buffer or tensor, with symbolic starts."""

    space: str
    base: str
    starts: tuple
    extents: tuple[int | None, ...]
    transposed: bool
    shape: tuple[int, ...]
    dtype: object
    keep: object = None  # store(..., where=m): view idx -> z3 Bool, the element is written

    def coords(self, idx: tuple) -> tuple:
        """Base coordinates of view element `idx`."""
        idx = tuple(idx)[::-1] if self.transposed else tuple(idx)
        out, it = [], iter(idx)
        for s, e in zip(self.starts, self.extents):
            out.append(s if e is None else as_int(s) + next(it))
        return tuple(out)

    def covers(self, coords: tuple):
        conds = []
        for c, s, e in zip(coords, self.starts, self.extents):
            if e is None:
                conds.append(as_int(c) == as_int(s))
            else:
                conds += [as_int(c) >= as_int(s), as_int(c) < as_int(s) + e]
        return z3.And(*conds) if conds else z3.BoolVal(True)

    def local(self, coords: tuple) -> tuple:
        """View index of base coordinates (inverse of `coords` on the covered region)."""
        idx = tuple(as_int(c) - as_int(s) for c, s, e in zip(coords, self.starts, self.extents) if e is not None)
        return idx[::-1] if self.transposed else idx

    def may_overlap(self, other: View) -> bool:
        """Cheap concrete test; True when unsure."""
        for s1, e1, s2, e2 in zip(self.starts, self.extents, other.starts, other.extents):
            if isinstance(s1, int) and isinstance(s2, int):
                hi1 = s1 + (e1 or 1)
                hi2 = s2 + (e2 or 1)
                if hi1 <= s2 or hi2 <= s1:
                    return False
        return True

    def describe(self) -> str:
        parts = []
        for s, e in zip(self.starts, self.extents):
            parts.append(str(s) if e is None else f"{s}:+{e}")
        return f"{self.base}[{', '.join(parts)}]{'.T' if self.transposed else ''}"


@dataclass
class Record:
    """One copy into shared memory."""

    rid: int
    view: View
    tags: object  # TagFn over view indices
    writer: object  # view idx -> thread term
    mode: str
    span: Span | None
    issue_pos: int
    issue_epoch: int
    agent: str
    issue_vc: dict
    step: dict
    land_pos: int | None = None
    land_epoch: int | None = None
    completion: str | None = None  # bulk copies: the mbarrier phase that completes them


@dataclass
class Access:
    """A shared-memory read or write, for the race checks."""

    kind: str  # "read" | "write"
    view: View
    thread: object  # view idx -> thread term, or MULTI
    pos: int
    epoch: int
    agent: str
    vc: dict
    span: Span | None
    step: dict
    record: Record | None = None  # for writes


@dataclass
class Obligation:
    """A property to prove: `bad` must be unsatisfiable (with `domain` and the path constraints)."""

    check: str  # the check's code
    span: Span | None
    message: str
    bad: object  # z3 Bool: a violation
    domain: list  # constraints on the fresh variables
    variables: dict  # name -> z3 term, reported in counterexamples
    step: dict
    sides: dict = field(default_factory=dict)  # label -> {field: term}: tag values to print
    extra: dict = field(default_factory=dict)


@dataclass
class StoreEvent:
    span: Span | None
    view: View
    masked: bool
    step: dict


@dataclass
class Trace:
    constraints: list
    decisions: list
    obligations: list[Obligation] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    stores: list[StoreEvent] = field(default_factory=list)
    global_accesses: list = field(default_factory=list)  # (view, masked, kind, span, step, thread fn)
    bulk_copies: list = field(default_factory=list)  # (Copy stmt, View src)
    mmas: list = field(default_factory=list)  # (Mma node, operand info)
    truncated: list = field(default_factory=list)  # spans of loops whose trip count was capped
    deadlock: Span | None = None


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
    pending: list = field(default_factory=list)
    ready: list = field(default_factory=list)
    vc: dict = field(default_factory=dict)  # joined clocks of the arrivals of the current phase
    phase_vcs: list = field(default_factory=list)  # vc of each completed phase


class _Agent:
    def __init__(self, name: str, threads: int, env: dict):
        self.name = name
        self.threads = threads
        self.env = env
        self.epoch = 0
        self.vc: dict[str, int] = {name: 0}


class Executor:
    def __init__(self, kernel: ir.Kernel, ctx: Context, decisions: list, trip_cap: dict[int, int]):
        self.k = kernel
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
        ctx.on_load = self._on_scalar_load
        self.axis_names = {d for t in kernel.tensors for d in t.dims if isinstance(d, str)}

    # ---- decisions (path forking) ----
    def _sat(self, extra) -> z3.CheckSatResult:
        s = solver(2000)
        s.add(*self.ctx.constraints, *self.path, extra)
        return s.check()

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
        for a, _ in agents:  # the block continues after every role finished
            for k, v in a.vc.items():
                saved.vc[k] = max(saved.vc.get(k, 0), v)
        saved.epoch += 1

    def step_snapshot(self) -> dict:
        return dict(self.steps)

    def exec_stmt(self, s: ir.Stmt) -> Iterator[None]:
        self.pos += 1
        if isinstance(s, ir.Let):
            self.agent.env[s.name] = self.value(s.value)
            if isinstance(s.value, ir.Load) and not isinstance(s.value.type, TileT):
                # a scalar read from a tensor keeps its origin (tensor and coordinates) as tags
                self.agent.env[f"{s.name}#tags"] = self.scalar_load_tags(s.value)
            else:
                self.agent.env.pop(f"{s.name}#tags", None)
        elif isinstance(s, ir.AllocShared):
            self.buffers[s.name] = s
        elif isinstance(s, ir.AllocBarrier):
            self.barriers[s.name] = [_Barrier(s.count) for _ in range(s.n or 1)]
        elif isinstance(s, ir.Assume) and s.over is not None:
            self.ctx.quantified.append((s.cond, self.scalar(s.over), dict(self.agent.env)))
        elif isinstance(s, ir.Assume):
            c = to_bool(self.scalar(s.cond))
            if not isinstance(c, bool):
                self.ctx.constraints.append(c)
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
            yield from self.exec_block(s.then if self.decide(c, s.span) else s.orelse)
        elif isinstance(s, ir.AssertTag):
            self.assert_tag(s)
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
            # acquire: everything released into the phases completed so far
            for vc in b.phase_vcs:
                for k, v in vc.items():
                    self.agent.vc[k] = max(self.agent.vc.get(k, 0), v)
            for r in b.ready:
                self.land(r)
            b.ready.clear()
        elif isinstance(s, ir.PipelineFor):
            raise Unsupported("pipeline loop was not expanded", s.span)
        else:
            raise Unsupported(f"{type(s).__name__}", s.span)

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
            b.ready.extend(b.pending)
            b.pending.clear()
            b.phase_vcs.append(dict(b.vc))
            b.vc = {}
            b.arrivals = b.tx_expected = b.tx_issued = 0
            b.completed += 1

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
                "oob-shared", span, f"view {v.describe()} reaches outside shared buffer '{v.base}' "
                f"{list(shape)}", z3.Or(*conds), [], {}, self.step_snapshot()))

    def global_tags(self, v: View) -> object:
        t = next(t for t in self.k.tensors if t.name == v.base)
        dims = [as_int(d) if isinstance(d, int) else self.ctx.dims[d] for d in t.dims]
        names = [d if isinstance(d, str) else f"axis{i}" for i, d in enumerate(t.dims)]
        tid = self.tensor_ids[v.base]

        @_memo
        def fn(idx):
            c = v.coords(idx)
            fields = {n: as_int(x) for n, x in zip(names, c)}
            fields["tensor"] = as_int(tid)
            outside = z3.Or(*[z3.Or(as_int(x) < 0, as_int(x) >= d) for x, d in zip(c, dims)])
            return ElemTags(fields, outside, False, v.base)
        return fn

    def shared_tags(self, v: View, pos: int):
        """Tags of each element of a shared view read at `pos`: the latest landed record covering it."""
        cands = [r for r in self.trace.records if r.view.base == v.base and r.land_pos is not None
                 and r.land_pos <= pos and r.view.may_overlap(v)]
        cands.sort(key=lambda r: r.land_pos)
        # a record that covers exactly the view's region hides every older one
        for n in range(len(cands) - 1, -1, -1):
            if _same_region(cands[n].view, v):
                cands = cands[n:]
                break

        @_memo
        def fn(idx):
            x = v.coords(idx)
            out = ElemTags({}, False, True, "uninitialised")
            for r in cands:
                out = merge_if(r.view.covers(x), r.tags(r.view.local(x)), out)
            return out
        return fn

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
                f"{v.describe()} is read while an async copy into it is still in flight",
                bad, self.idx_domain(idx, v.shape), self.idx_vars(idx, "element"), self.step_snapshot(),
                extra={"copy_span": first.span, "copy_step": first.step, "buffer": v.base, "view": v}))
        thread = MULTI if multi else self.copy_threads(v)
        self.trace.accesses.append(Access("read", v, thread, pos, self.agent.epoch, self.agent.name,
                                          dict(self.agent.vc), span, self.step_snapshot()))
        return self.shared_tags(v, pos)

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
        rec = Record(len(self.trace.records), dst, tags, self.copy_threads(dst), s.mode, s.span, self.pos,
                     a.epoch, a.name, dict(a.vc), self.step_snapshot())
        self.trace.records.append(rec)
        if s.mode == "sync":
            self.land(rec)
        elif s.mode == "async":
            self.uncommitted.append(rec)
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
                                          r.issue_epoch, agent, vc, r.span, r.step, r))

    def _on_scalar_load(self, e: ir.Load, idx: tuple) -> None:
        v = View("global", e.ref.base, tuple(simplify_int(i) for i in idx), e.ref.extents, False, (), e.ref.dtype)
        self.trace.global_accesses.append((v, False, "read", e.span, self.step_snapshot(), lambda i: 0))

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

    def store(self, s: ir.Store) -> None:
        v = self.view(s.dst, s.span)
        keep = self.store_mask(s, v.shape)
        if keep is not None:
            v.keep = keep
        value = self.value(s.value)
        self.trace.global_accesses.append((v, s.masked, "write", s.span, self.step_snapshot(), self.copy_threads(v)))
        self.trace.stores.append(StoreEvent(s.span, v, s.masked, self.step_snapshot()))
        t = next(t for t in self.k.tensors if t.name == v.base)
        idx = self.fresh_idx(v.shape, "e")
        coords = v.coords(idx)
        dims = [as_int(d) if isinstance(d, int) else self.ctx.dims[d] for d in t.dims]
        inside = z3.And(*[z3.And(as_int(c) >= 0, as_int(c) < d) for c, d in zip(coords, dims)])
        if keep is not None:
            inside = z3.And(inside, keep(idx))  # masked-off elements are not written: nothing to prove
        if isinstance(value, SymTile) and value.history and len(idx) == 2:
            self.accumulation_coverage(value.history, s.span, idx, self.idx_domain(idx, v.shape) + [inside])
        got = value.tags(idx) if isinstance(value, SymTile) else ElemTags()
        bads, sides_want, sides_got = [], {}, {}
        for d, c in zip(t.dims, coords):
            if isinstance(d, str) and d in got.fields:
                bads.append(as_int(got.fields[d]) != as_int(c))
                sides_want[d], sides_got[d] = c, got.fields[d]
        if not bads:
            return
        self.trace.obligations.append(Obligation(
            "store-coordinates", s.span,
            f"the value stored to {v.base}[...] does not come from the coordinates it is stored at",
            z3.And(inside, z3.Or(*bads)), self.idx_domain(idx, v.shape), self.idx_vars(idx, "element"),
            self.step_snapshot(), {f"destination {v.base}": sides_want, f"value ({got.origin})": sides_got},
            {"view": v}))

    def accumulation_coverage(self, history: tuple, span, idx: tuple, element_domain: list) -> None:
        """Each stored (in-range) accumulator element must sum every contracted coordinate in [0, dim)
        exactly once.

        Coordinate x counts as covered by step j when its candidate term kk = x - base_j (base_j the
        step's first coordinate) has exactly coordinate x: exact for contiguous tiles, quantifier-free,
        and never wrongly "verified" (a non-contiguous step can only produce a claim that replay then
        fails to confirm)."""
        r, col = idx
        for f in history[0].coords:
            dim = self.ctx.dims.get(f)
            if dim is None:
                continue
            if any(f not in c.coords for c in history):
                return
            x = z3.Int(f"{f}_cov{self.fresh_id}")
            self.fresh_id += 1
            spans = [(c.coords[f](r, z3.IntVal(0)), c) for c in history]

            def covered(base, c, x=x, f=f):
                kk = x - base
                return z3.And(kk >= 0, kk < c.extent, c.coords[f](r, kk) == x, c.live(r, col, kk))
            cov = [covered(b, c) for b, c in spans]
            names = {"row": r, "col": col, f: x}
            self.trace.obligations.append(Obligation(
                "accumulation-coverage", span,
                f"the stored accumulator misses some {f} coordinates (never multiplied in)",
                z3.And(*[z3.Not(cv) for cv in cov]), [x >= 0, x < dim] + element_domain, names,
                self.step_snapshot(), extra={"kind": "missing"}))
            if len(cov) > 1:
                twice = z3.Or(*[z3.And(cov[i], cov[j]) for i in range(len(cov)) for j in range(i + 1, len(cov))])
                self.trace.obligations.append(Obligation(
                    "accumulation-coverage", span,
                    f"the stored accumulator sums some {f} coordinates more than once",
                    twice, [x >= 0, x < dim] + element_domain, names, self.step_snapshot(),
                    extra={"kind": "twice"}))

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

    def value(self, e: ir.Expr):
        if not isinstance(e.type, TileT):
            return self.scalar(e)
        m = getattr(self, "_v_" + type(e).__name__, None)
        if m is None:
            raise Unsupported(f"{type(e).__name__} on tiles", e.span)
        return m(e)

    def _v_Var(self, e: ir.Var):
        v = self.agent.env.get(e.name)
        if not isinstance(v, SymTile):
            raise Unsupported(f"'{e.name}' has no tile value here", e.span)
        return v

    def _v_Full(self, e: ir.Full):
        v = self.scalar(e.value)
        minf = _is_neg_inf(e.value)
        zero = isinstance(v, int) and v == 0 or (isinstance(e.value, ir.Const) and e.value.value == 0)
        tags = ElemTags({}, bool(zero), False, "", minf)
        return SymTile(e.type.shape, lambda idx: tags, None, (), (lambda idx: v) if isinstance(v, int) or
                       (not isinstance(v, bool) and z3.is_int(v)) else None)

    def _v_Arange(self, e: ir.Arange):
        return SymTile(e.type.shape, const_tags(), None, (), lambda idx: idx[0])

    def _v_Load(self, e: ir.Load):
        v = self.view(e.ref, e.span)
        if v.space == "global":
            self.trace.global_accesses.append((v, e.masked, "read", e.span, self.step_snapshot(),
                                               self.copy_threads(v)))
            return SymTile(v.shape, self.global_tags(v), None, None)
        return SymTile(v.shape, self.read_shared(v, e.span, False), None, None)

    def operand(self, x, span) -> tuple[SymTile, View | None]:
        if isinstance(x, ir.Ref):
            v = self.view(x, span)
            if v.space == "global":
                return SymTile(v.shape, self.global_tags(v), None, None), v
            return SymTile(v.shape, self.read_shared(v, span, True), None, None), v
        return self.value(x), None

    def _v_Mma(self, e: ir.Mma):
        a, av = self.operand(e.a, e.span)
        b, bv = self.operand(e.b, e.span)
        acc = self.value(e.acc)
        self.trace.mmas.append((e, av, bv, a, b, self.step_snapshot()))
        m, kdim = a.shape
        n = b.shape[1]
        i, kk, j = (z3.Int(f"i{self.fresh_id}"), z3.Int(f"k{self.fresh_id}"), z3.Int(f"j{self.fresh_id}"))
        self.fresh_id += 1
        ta, tb = a.tags((i, kk)), b.tags((kk, j))
        # only origin coordinates (tensor axis names) take part; user fields (kv_step, ...) are the
        # business of assert_tag
        common = sorted(set(ta.fields) & set(tb.fields) & self.axis_names)
        dom = [i >= 0, i < m, kk >= 0, kk < kdim, j >= 0, j < n]
        step = self.step_snapshot()
        if common:
            mismatch = z3.Or(*[as_int(ta.fields[f]) != as_int(tb.fields[f]) for f in common])
            live = z3.And(z3.Not(_bool(ta.zero)), z3.Not(_bool(tb.zero)),
                          z3.Not(_bool(ta.uninit)), z3.Not(_bool(tb.uninit)))
            self.trace.obligations.append(Obligation(
                "mma-contraction", e.span,
                f"mma contracts A and B elements from different {'/'.join(common)} coordinates",
                z3.And(live, mismatch), dom, {"row i": i, "k": kk, "col j": j}, step,
                {f"A ({ta.origin})": {f: ta.fields[f] for f in common if f in ta.fields} |
                 {f: v for f, v in ta.fields.items() if f not in common and f != "tensor"},
                 f"B ({tb.origin})": {f: tb.fields[f] for f in common if f in tb.fields} |
                 {f: v for f, v in tb.fields.items() if f not in common and f != "tensor"}},
                {"operand_views": (av, bv)}))
        uninit = z3.Or(_bool(ta.uninit), _bool(tb.uninit))
        self.trace.obligations.append(Obligation(
            "uninitialized-read", e.span, "mma reads shared memory that no landed copy has written",
            uninit, dom, {"row i": i, "k": kk, "col j": j}, step, {}, {"operand_views": (av, bv)}))
        # accumulator: rows keep A's non-contracted fields, columns B's
        k0 = 0
        row_fields = {f: v for f, v in a.tags((i, k0)).fields.items() if f not in common and f in self.axis_names}
        col_fields = {f: v for f, v in b.tags((k0, j)).fields.items() if f not in common and f in self.axis_names}
        before = acc.tags((i, j))
        bad = [as_int(before.fields[f]) != as_int(v) for f, v in {**row_fields, **col_fields}.items()
               if f in before.fields]
        if bad:
            # only rows and columns that hold data (not zero fill from outside the tensors) matter
            live = z3.And(z3.Not(_bool(a.tags((i, k0)).zero)), z3.Not(_bool(b.tags((k0, j)).zero)))
            self.trace.obligations.append(Obligation(
                "mma-accumulator", e.span,
                "the accumulator element does not belong to the row of A / column of B it is updated with",
                z3.And(live, z3.Or(*bad)), [i >= 0, i < m, j >= 0, j < n], {"row i": i, "col j": j}, step,
                {"accumulator": {f: before.fields[f] for f in before.fields if f != "tensor"},
                 "A row / B col": {**row_fields, **col_fields}}))
        a_tags, b_tags = a.tags, b.tags
        history = None
        if acc.history is not None and common:
            contrib = Contribution({f: (lambda r, kk, f=f: as_int(a_tags((r, kk)).fields[f])) for f in common},
                                   lambda r, c, kk: z3.And(z3.Not(_bool(a_tags((r, kk)).zero)),
                                                           z3.Not(_bool(b_tags((kk, c)).zero))),
                                   kdim, e.span, step)
            history = acc.history + (contrib,)

        def out(idx):
            r, c = idx
            fa = {f: v for f, v in a_tags((r, 0)).fields.items() if f not in common and f != "tensor"}
            fb = {f: v for f, v in b_tags((0, c)).fields.items() if f not in common and f != "tensor"}
            return ElemTags({**fa, **fb}, False, False, "mma")
        return SymTile(e.type.shape, out, e.layout, history)


    def _operands(self, exprs) -> list:
        """Each operand as a SymTile (scalars become constant tiles of rank 0)."""
        out = []
        for x in exprs:
            v = self.value(x)
            if isinstance(v, SymTile):
                out.append(v)
            else:
                if isinstance(x, ir.Var) and f"{x.name}#tags" in self.agent.env:
                    tags = self.agent.env[f"{x.name}#tags"]  # a scalar read from a tensor: its origin
                elif isinstance(x, ir.Load):
                    tags = self.scalar_load_tags(x)
                else:
                    tags = ElemTags({}, False, False, "", _is_neg_inf(x))
                val = v if (isinstance(v, (int, bool)) or z3.is_int(v) or z3.is_bool(v)) else None
                out.append(SymTile((), lambda idx, t=tags: t, None, (), (lambda idx, c=val: c) if val is not None
                                   else None))
        return out

    def _elementwise(self, operands: list[SymTile], shape, tag_fn, value_fn) -> SymTile:
        """Broadcast operands to `shape`; tags by `tag_fn(list of ElemTags)`, values by `value_fn`."""
        n = len(shape)

        def sub(t: SymTile, idx):
            off = n - len(t.shape)
            return tuple(0 if d == 1 else idx[off + k] for k, d in enumerate(t.shape))

        def tags(idx):
            return tag_fn([t.tags(sub(t, idx)) for t in operands])
        value = None
        if value_fn is not None and operands and all(t.value is not None for t in operands):
            def value(idx):
                return value_fn([t.value(sub(t, idx)) for t in operands])
        tiles = [t for t in operands if t.shape]
        layout = next((t.layout for t in tiles if t.layout is not None), None)
        # an elementwise op on one accumulator (cast, scale) keeps its history; mixing tiles loses it
        history = tiles[0].history if len(tiles) == 1 else None
        return SymTile(shape, _memo(tags), layout, history, value)

    def _v_Math(self, e: ir.Math):
        ops = self._operands(e.args)
        if e.fn in ("min", "max"):
            def tf(ts):
                return combine(ts[0], ts[1], "max" if e.fn == "max" else "+")
            def vf(vs):
                a, b = as_int(vs[0]), as_int(vs[1])
                return z3.If(a <= b, a, b) if e.fn == "min" else z3.If(a >= b, a, b)
            return self._elementwise(ops, e.type.shape, tf, vf)
        tiles = [o for o in ops if o.shape]
        return self._elementwise(tiles, e.type.shape, lambda ts: unary(ts[0], e.fn),
                                 (lambda vs: vs[0]) if e.fn == "cast" else None)

    def _v_Bin(self, e: ir.Bin):
        ops = self._operands((e.a, e.b))
        op = e.op

        def vf(vs):
            a, b = vs
            if z3.is_bool(a) or z3.is_bool(b) or isinstance(a, bool):
                return {"&": z3.And, "|": z3.Or}.get(op, lambda x, y: None)(_bool(a), _bool(b))
            return {"+": lambda: as_int(a) + b, "-": lambda: as_int(a) - b, "*": lambda: as_int(a) * b,
                    "//": lambda: as_int(a) / b, "%": lambda: as_int(a) % b}.get(op, lambda: None)()
        return self._elementwise(ops, e.type.shape, lambda ts: combine(ts[0], ts[1], op), vf)

    def _v_Cmp(self, e: ir.Cmp):
        ops = self._operands((e.a, e.b))

        def vf(vs):
            a, b = as_int(vs[0]), as_int(vs[1])
            return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}.get(e.op)
        return self._elementwise(ops, e.type.shape, lambda ts: combine(ts[0], ts[1], "cmp"), vf)

    def _v_Un(self, e: ir.Un):
        ops = self._operands((e.a,))
        vf = (lambda vs: -vs[0]) if e.op == "-" else (lambda vs: z3.Not(_bool(vs[0]))) if e.op == "not" else None
        return self._elementwise(ops, e.type.shape, lambda ts: ts[0], vf)

    def _v_Select(self, e: ir.Select):
        cond, a, b = self._operands((e.cond, e.a, e.b))
        if cond.value is not None:
            # a mask computed from positions: each element takes exactly one side's tags
            n = len(e.type.shape)

            def sub(t, idx):
                off = n - len(t.shape)
                return tuple(0 if d == 1 else idx[off + k] for k, d in enumerate(t.shape))

            def tags(idx):
                c = cond.value(sub(cond, idx))
                c = _bool(c) if not isinstance(c, bool) else c
                return merge_if(c, a.tags(sub(a, idx)), b.tags(sub(b, idx)))
            value = None
            if a.value is not None and b.value is not None:
                def value(idx):
                    return z3.If(_bool(cond.value(sub(cond, idx))), as_int(a.value(sub(a, idx))),
                                 as_int(b.value(sub(b, idx))))
            tiles = [t for t in (a, b) if t.shape]
            history = tiles[0].history if len(tiles) == 1 else None
            layout = next((t.layout for t in tiles if t.layout is not None), None)
            return SymTile(e.type.shape, _memo(tags), layout, history, value)
        return self._elementwise([a, b], e.type.shape, lambda ts: combine(ts[0], ts[1], "select"), None)

    def _v_Reduce(self, e: ir.Reduce):
        x = self.value(e.x)
        ax = e.axis

        def at(idx, k):
            full = list(idx[: len(x.shape) - 1])
            full.insert(ax, k)
            return x.tags(tuple(full))

        @_memo
        def fn(idx):
            # a field that differs along the reduced axis (the key position of a row max) is dropped;
            # the result is treated as live data (a fully masked row is not tracked as -inf)
            k = z3.Int(f"red{id(fn)}")
            t0, tk = at(idx, 0), at(idx, k)
            keep = {f: v for f, v in t0.fields.items()
                    if f in tk.fields and z3.is_true(z3.simplify(as_int(v) == as_int(tk.fields[f])))}
            return ElemTags(keep, False, t0.uninit, t0.origin, False)
        return SymTile(e.type.shape, fn, x.layout, None)

    def _v_Reshape(self, e: ir.Reshape):
        x = self.value(e.x)
        src_shape = x.shape

        def src(idx):
            vals = [idx[d] for d in range(len(idx)) if e.type.shape[d] != 1]
            while len(vals) < len(src_shape):
                vals.append(0)
            return tuple(vals[: len(src_shape)])
        value = (lambda idx: x.value(src(idx))) if x.value is not None else None
        return SymTile(e.type.shape, lambda idx: x.tags(src(idx)), x.layout, x.history, value)

    def _v_Transpose(self, e: ir.Transpose):
        x = self.value(e.x)
        value = (lambda idx: x.value(tuple(idx)[::-1])) if x.value is not None else None
        return SymTile(e.type.shape, lambda idx: x.tags(tuple(idx)[::-1]), x.layout, x.history, value)

    def _v_Shfl(self, e: ir.Shfl):
        return self.value(e.x)

    def _v_Tag(self, e: ir.Tag):
        x = self.value(e.x)
        extra = []
        for name, v in e.fields:
            if isinstance(v, ir.Lambda):
                extra.append((name, v, None))
            else:
                extra.append((name, None, self.scalar(v)))
        env = dict(self.agent.env)

        def fn(idx):
            t = x.tags(idx)
            fields = dict(t.fields)
            for name, lam, val in extra:
                if lam is None:
                    fields[name] = as_int(val)
                else:
                    fields[name] = as_int(Evaluator(self.ctx, {**env, **dict(zip(lam.params, idx))}).scalar(lam.body))
            return ElemTags(fields, t.zero, t.uninit, t.origin)
        return SymTile(x.shape, fn, x.layout, x.history)

    # ---- tag assertions ----
    def assert_tag(self, s: ir.AssertTag) -> None:
        lam = s.predicate
        params = {p: z3.Int(f"{p}_{self.fresh_id}") for p in lam.params}
        self.fresh_id += 1
        domain: list = []
        sides: dict = {}
        cond = self.tag_expr(lam.body, params, domain, sides)
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
            live = z3.And(z3.Not(_bool(t.zero)), z3.Not(_bool(t.uninit)))
            domain.append(live)
            val = t.fields.get(e.field, MISSING)
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


def _is_neg_inf(e) -> bool:
    if isinstance(e, ir.Const):
        return isinstance(e.value, float) and e.value == float("-inf")
    if isinstance(e, ir.Un) and e.op == "-" and isinstance(e.a, ir.Const):
        return isinstance(e.a.value, float) and e.a.value == float("inf")
    return False


def _key(x):
    return ("z3", x.get_id()) if isinstance(x, z3.ExprRef) else x


def _memo(fn):
    """Memoise a tags function on the identity of its (symbolic) indices: the same element is asked
    for many times (operands, accumulator rows, coverage), and rebuilding z3 terms dominates."""
    cache: dict = {}

    def wrapped(idx):
        k = tuple(_key(i) for i in idx)
        if k not in cache:
            cache[k] = (fn(idx), idx)  # keep idx alive so its ids stay unique
        return cache[k][0]
    return wrapped


def _same_region(a: View, b: View) -> bool:
    return a.transposed == b.transposed and a.extents == b.extents and \
        all(isinstance(x, int) and isinstance(y, int) and x == y for x, y in zip(a.starts, b.starts))


def zceil(a, b: int):
    return (a + b - 1) / b


def _bool(v):
    return z3.BoolVal(v) if isinstance(v, bool) else v


def _divisors_product(e) -> int:
    p = 1
    for sub in walk(e):
        if isinstance(sub, ir.Bin) and sub.op == "//" and isinstance(sub.b, ir.Const) and isinstance(sub.b.value, int):
            p *= max(1, sub.b.value)
    return p


def loop_periods(kernel: ir.Kernel) -> dict[int, int]:
    """Trip-count cap per loop: 2 * period + 2. The period is the lcm over the loop body's `x % c` of
    c times the divisors of any `//` inside x: (k // 2) % 2 repeats every 4 steps."""
    caps: dict[int, int] = {}
    for node in walk(kernel.body):
        if isinstance(node, ir.For):
            period = 1
            for sub in walk(node.body):
                if isinstance(sub, ir.Bin) and sub.op == "%" and isinstance(sub.b, ir.Const) \
                        and isinstance(sub.b.value, int) and sub.b.value > 0:
                    period = math.lcm(period, sub.b.value * _divisors_product(sub.a))
            caps[id(node)] = 2 * period + 2
    return caps


def explore(kernel: ir.Kernel, defines: dict[str, object]) -> tuple[list[Trace], list[Context], list[str]]:
    """Every path (up to MAX_PATHS) of the kernel for one symbolic block: traces, their contexts, notes."""
    caps = loop_periods(kernel)
    todo: list[list] = [[]]
    traces: list[Trace] = []
    contexts: list[Context] = []
    notes: list[str] = []
    while todo:
        prefix = todo.pop()
        if len(traces) >= MAX_PATHS:
            notes.append(f"more than {MAX_PATHS} paths: the rest were not explored")
            break
        ctx = Context.create(kernel, defines)
        ex = Executor(kernel, ctx, prefix, caps)
        traces.append(ex.run())
        contexts.append(ctx)
        todo.extend(ex.alternatives)
    return traces, contexts, notes
