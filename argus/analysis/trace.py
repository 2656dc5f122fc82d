"""What one explored path of a kernel leaves behind for the checks: views, shared-memory records,
accesses, obligations (properties to prove), unknowns (sites a check cannot prove), stores."""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from argus.analysis.symbolic import as_int
from argus.dsl.diagnostics import Span


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
    exempt: bool = False  # ordered by a verified protocol (a producer/consumer ring), not by the race check


@dataclass
class Obligation:
    """A property to prove: `bad` must be unsatisfiable (with `domain` and the path constraints)."""

    check: str  # the check's code
    span: Span | None
    # the message, or a function that builds it: most obligations are proved and never reported, and
    # printing the z3 terms a message names costs more than building the obligation
    msg: object
    bad: object  # z3 Bool: a violation
    domain: list  # constraints on the fresh variables
    variables: dict  # name -> z3 term, reported in counterexamples
    step: dict
    sides: dict = field(default_factory=dict)  # label -> {field: term}: tag values to print
    extra: dict = field(default_factory=dict)
    # bad is an over-approximation: refine(model) says whether a model is a real violation (None) or
    # gives a formula excluding it (the model only satisfies the approximation)
    refine: object = None

    @property
    def message(self) -> str:
        return self.msg() if callable(self.msg) else self.msg


@dataclass
class StoreEvent:
    span: Span | None
    view: View
    masked: bool
    step: dict
    value: object = None  # the stored SymTile (or an ElemTags for a scalar value)
    inside: object = None  # idx -> z3 Bool: element idx of the view is in range and written
    atomic: bool = False  # an atomic_add: the element accumulates (other adds to it do not race with it)


@dataclass(frozen=True)
class Unknown:
    """A site in a check's scope that the executor could not turn into an obligation: the check is
    unknown (never verified) with this reason."""

    check: str
    span: Span | None
    reason: str


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
    trip_constraints: list = field(default_factory=list)  # the path's choices of loop trip counts
    unknowns: list[Unknown] = field(default_factory=list)
    tiles: list = field(default_factory=list)  # persistent loops: (tile variable, loop, first tile, stride, count)
    deadlock: Span | None = None




def path_decisions(trace: Trace, ctx) -> list:
    """The path's own constraints: the trace's beyond the kernel's (grid ranges, assumes) in `ctx`."""
    known = {x.get_id() for x in ctx.constraints if hasattr(x, "get_id")}
    return [x for x in trace.constraints if hasattr(x, "get_id") and x.get_id() not in known]
