"""What the verifier reports: per check an outcome, and per violation a counterexample.

Exactly three outcomes: "verified", "violated" (with a counterexample), "unknown" (solver timeout or
an unsupported construct) -- unknown is never reported as verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.dsl.diagnostics import Span

VERIFIED, VIOLATED, UNKNOWN = "verified", "violated", "unknown"

# Every check the verifier runs, with its code and what it proves.
CHECKS = {
    "mma-contraction": "an mma multiplies A and B elements with the same contracted coordinate",
    "mma-accumulator": "an mma updates each accumulator element with its own row of A and column of B",
    "store-coordinates": "a stored element comes from the coordinates it is stored at",
    "accumulation-coverage": "a stored accumulator sums over every contracted coordinate exactly once",
    "reference-footprint": "each output element is computed from exactly the input elements its reference "
                           "computes it from (same tensors, coordinates, masks; sums exactly once)",
    "tag-assertion": "every assert_tag relation holds for every block, step and element",
    "uninitialized-read": "shared memory is read only where a landed copy has written it",
    "async-read-before-wait": "an async-copied buffer is read only after the wait that lands it",
    "async-overwrite": "an async copy never overwrites a stage another thread may still be reading",
    "race": "no two threads touch the same shared element, one writing, without a barrier between",
    "oob-global": "global accesses stay inside the tensor (masking clips sliced axes, never an indexed one)",
    "oob-shared": "shared-memory views stay inside their buffer",
    "output-unwritten": "every output element is written",
    "output-written-twice": "no output element is written twice",
    "mma-layout": "mma operands are laid out as the instruction's fragments / descriptors require",
    "swizzle-bijective": "each shared buffer's address map (swizzle or layout) is one-to-one inside its "
                         "allocation",
    "misaligned-copy": "vector and bulk (TMA) copies meet their alignment requirements",
    "deadlock": "every mbarrier wait is eventually satisfied",
    "division-by-zero": "integer division and remainder never divide by zero",
}


@dataclass
class Counterexample:
    dims: dict[str, int] = field(default_factory=dict)
    block: tuple[int, ...] | None = None
    thread: int | None = None
    steps: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)  # element indices and other named variables
    sides: dict[str, dict[str, object]] = field(default_factory=dict)  # tag values on each side
    notes: list[str] = field(default_factory=list)
    scalars: dict[str, int] = field(default_factory=dict)  # integer scalar arguments the model chose

    def to_json(self) -> dict:
        return {"dims": self.dims, "block": list(self.block) if self.block else None, "thread": self.thread,
                "warp": None if self.thread is None else self.thread // 32,
                "lane": None if self.thread is None else self.thread % 32, "steps": self.steps,
                "values": self.values, "tags": self.sides, "notes": self.notes, "scalars": self.scalars}


@dataclass
class Replay:
    confirmed: bool
    summary: str

    def to_json(self) -> dict:
        return {"confirmed": self.confirmed, "summary": self.summary}


@dataclass
class Finding:
    check: str
    status: str  # VIOLATED | UNKNOWN
    message: str
    span: Span | None
    counterexample: Counterexample | None = None
    replay: Replay | None = None
    invariant: str = ""
    # a model of an approximate query (e.g. coverage with guessed witness blocks): a violation only if
    # the interpreter reproduces it, else unknown (argus.analysis.verify settles it after the replay)
    claim: bool = False

    def to_json(self) -> dict:
        return {"check": self.check, "status": self.status, "message": self.message,
                "span": self.span.to_json() if self.span else None, "invariant": self.invariant,
                "counterexample": self.counterexample.to_json() if self.counterexample else None,
                "replay": self.replay.to_json() if self.replay else None}


@dataclass
class CheckResult:
    check: str
    status: str
    seconds: float
    findings: list[Finding] = field(default_factory=list)


@dataclass
class Report:
    kernel: str
    path: str
    results: list[CheckResult]
    notes: list[str] = field(default_factory=list)
    # the numeric tier (argus.analysis.numeric.NumericTier): tested at small shapes, not proved
    tested: object = None

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def status(self) -> str:
        if any(r.status == VIOLATED for r in self.results):
            return VIOLATED
        if self.tested is not None and self.tested.shapes and not self.tested.ok:
            return VIOLATED
        if any(r.status == UNKNOWN for r in self.results):
            return UNKNOWN
        return VERIFIED

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "file": self.path, "status": self.status, "notes": self.notes,
                "checks": [{"check": r.check, "status": r.status, "seconds": round(r.seconds, 4)}
                           for r in self.results],
                "findings": [f.to_json() for f in self.findings],
                "tested": self.tested.to_json() if self.tested is not None else None}


# why an obligation is unknown when z3 answers "unknown" (its reason is not kept: a timeout and an
# undecided quantified or nonlinear query read the same to the caller)
NO_ANSWER = "the solver gave no answer (a timeout, or a query outside what it decides: quantifiers, nonlinear integers)"
