"""What planners see and what they return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from argus.agent.kb import KnowledgeBase
from argus.agent.program import Candidate, Edit, parse_edits
from argus.agent.rewrites import Env


class PlannerError(RuntimeError):
    """A planner cannot run (bad configuration, missing API key, service error)."""


@dataclass(frozen=True)
class Proposal:
    edits: tuple[Edit, ...] = ()
    source: str | None = None  # a whole new program instead of edits
    reasoning: str = ""
    action: str = ""  # KB action id ("technique:name") or "llm"
    technique: str = ""
    parent: str | None = None  # key of the candidate the edits apply to (None: the best so far)
    raw: str = ""  # the model's raw reply, for the record
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"edits": [e.to_json() for e in self.edits], "source": self.source, "reasoning": self.reasoning,
                "action": self.action, "technique": self.technique, "parent": self.parent, "raw": self.raw,
                "meta": self.meta}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Proposal:
        return Proposal(parse_edits(d["edits"]) if d.get("edits") else (), d.get("source"), d.get("reasoning", ""),
                        d.get("action", ""), d.get("technique", ""), d.get("parent"), d.get("raw", ""),
                        d.get("meta") or {})

    def label(self) -> str:
        if self.source is not None:
            return "new program"
        return self.action or " + ".join(e.describe() for e in self.edits) or "(nothing)"


@dataclass(frozen=True)
class Attempt:
    """A proposal that did not make it to evaluation, and why (fed back for repair)."""

    proposal: Proposal
    problem: str  # "invalid" | "violated" | "duplicate" | "compile-error"
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"proposal": self.proposal.to_json(), "problem": self.problem, "message": self.message}


@dataclass(frozen=True)
class Node:
    """One step of the trajectory as planners see it."""

    step: int
    key: str | None
    parent: str | None
    candidate: Candidate | None
    action: str
    technique: str
    status: str
    reward: float | None
    tflops: tuple[float, ...]
    message: str = ""
    diagnosis: tuple[dict[str, Any], ...] = ()
    edits: tuple[dict[str, Any], ...] = ()
    attempts: tuple[dict[str, Any], ...] = ()
    signature: dict[str, Any] = field(default_factory=dict, compare=False)  # argus.agent.store.signature

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.reward is not None

    @staticmethod
    def from_record(d: dict[str, Any]) -> Node:
        prop = d.get("proposal") or {}
        cand = Candidate.from_json(d["candidate"]) if d.get("candidate") else None
        ev = d.get("evaluation") or {}
        msg = ev.get("message") or ""
        if d.get("status") in ("invalid", "violated", "duplicate") and d.get("attempts"):
            msg = d["attempts"][-1].get("message", "")
        return Node(d["step"], d.get("key"), d.get("parent"), cand, prop.get("action", ""), prop.get("technique", ""),
                    d.get("status", "error"), d.get("reward"), tuple(d.get("tflops") or ()), msg,
                    tuple(d.get("diagnosis") or ()), tuple(prop.get("edits") or ()), tuple(d.get("attempts") or ()),
                    d.get("signature") or {})


@dataclass(frozen=True)
class PlannerContext:
    step: int
    budget: int  # evaluations this run is expected to get: its budget, or fewer where its time limit ends it first
    seed: int
    history: tuple[Node, ...]  # step 0 (the starting kernel) first
    kb: KnowledgeBase
    kind: str  # "gemm" | "attention" | "moe"
    env: Env
    visible_shapes: tuple[dict[str, int], ...]
    target_shapes: tuple[dict[str, int], ...]
    estimate: bool
    library: str = ""  # e.g. "cuBLAS 720/687 TFLOP/s (recorded)"
    priors: Any = None  # argus.agent.store.Priors from earlier runs (None: no store)
    lessons: tuple[dict[str, Any], ...] = ()  # contrastive entries from earlier runs (argus.agent.store)

    @property
    def start(self) -> Node:
        return self.history[0]

    @property
    def best(self) -> Node:
        ok = [n for n in self.history if n.ok]
        return max(ok, key=lambda n: (n.reward, -n.step)) if ok else self.history[0]

    def node(self, key: str | None) -> Node | None:
        return next((n for n in self.history if n.key == key and n.candidate is not None), None)


class Planner(Protocol):
    name: str

    def propose(self, ctx: PlannerContext) -> Proposal:
        ...

    def repair(self, ctx: PlannerContext, attempts: list[Attempt]) -> Proposal | None:
        """Another try after `attempts` failed verification/compilation (None: give up this step)."""
        ...
