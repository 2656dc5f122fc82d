"""The knowledge base: curated Hopper techniques (knowledge/hopper.json) and library baselines.

Both planners read it: the built-in planner's action space is the `actions` of the expressible
entries, weighted by the profile signals they answer; the Anthropic planner's prompt quotes the
entries relevant to the current diagnosis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from argus.agent.program import Edit, parse_edits

KNOWLEDGE = Path(__file__).resolve().parent / "knowledge"
REQUIRED = ("id", "title", "changes", "preconditions", "signals", "expected", "pitfalls", "breaks", "actions",
            "expressible", "applies_to")


class KnowledgeError(ValueError):
    pass


@dataclass(frozen=True)
class Action:
    technique: str
    name: str
    edits: tuple[Edit, ...]
    # the diagnoses this action answers, when narrower than its technique's (a tile technique's "BN /2"
    # answers spills, not a small tile); None: every signal of the technique
    signals: tuple[str, ...] | None = None

    def answers(self, signal: str, techniques: tuple[str, ...]) -> bool:
        return signal in self.signals if self.signals is not None else self.technique in techniques

    @property
    def id(self) -> str:
        return f"{self.technique}:{self.name}"


@dataclass(frozen=True)
class Technique:
    id: str
    title: str
    changes: str
    preconditions: tuple[str, ...]
    signals: tuple[str, ...]
    expected: str
    pitfalls: tuple[str, ...]
    breaks: tuple[str, ...]
    actions: tuple[Action, ...]
    expressible: bool
    applies_to: tuple[str, ...]

    def render(self) -> str:
        lines = [f"### {self.id}: {self.title}", f"- changes: {self.changes}"]
        if self.preconditions:
            lines.append(f"- preconditions: {'; '.join(self.preconditions)}")
        lines += [f"- suggested by: {', '.join(self.signals)}", f"- expected: {self.expected}"]
        if self.pitfalls:
            lines.append(f"- pitfalls: {'; '.join(self.pitfalls)}")
        if self.breaks:
            lines.append(f"- invariants it tends to break: {', '.join(self.breaks)}")
        if not self.expressible:
            lines.append("- not expressible in the language yet")
        return "\n".join(lines)


@dataclass(frozen=True)
class KnowledgeBase:
    name: str
    version: str
    techniques: tuple[Technique, ...]

    def get(self, tid: str) -> Technique:
        for t in self.techniques:
            if t.id == tid:
                return t
        raise KeyError(tid)

    def by_signal(self, signal: str, kind: str | None = None) -> list[Technique]:
        return [t for t in self.techniques if signal in t.signals and (kind is None or kind in t.applies_to)]

    def actions(self, kind: str | None = None) -> list[Action]:
        """Every action of an expressible technique (deduplicated by edits, first technique wins)."""
        seen, out = set(), []
        for t in self.techniques:
            if not t.expressible or (kind is not None and kind not in t.applies_to):
                continue
            for a in t.actions:
                key = json.dumps([e.to_json() for e in a.edits], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append(a)
        return out


def _technique(d: dict[str, Any]) -> Technique:
    missing = [f for f in REQUIRED if f not in d]
    if missing:
        raise KnowledgeError(f"entry {d.get('id', '?')}: missing {', '.join(missing)}")
    actions = []
    for a in d["actions"]:
        try:
            sig = tuple(a["signals"]) if "signals" in a else None
            if sig is not None and not set(sig) <= set(d["signals"]):
                extra = sorted(set(sig) - set(d["signals"]))
                raise KnowledgeError(f"entry {d['id']}: action {a['name']}: signals {extra} are not the technique's")
            actions.append(Action(d["id"], a["name"], parse_edits(a["edits"]), sig))
        except (KeyError, ValueError) as e:
            raise KnowledgeError(f"entry {d['id']}: action {a.get('name', '?')}: {e}") from e
    return Technique(d["id"], d["title"], d["changes"], tuple(d["preconditions"]), tuple(d["signals"]),
                     d["expected"], tuple(d["pitfalls"]), tuple(d["breaks"]), tuple(actions), bool(d["expressible"]),
                     tuple(d["applies_to"]))


def load(path: str | Path | None = None) -> KnowledgeBase:
    p = Path(path) if path else KNOWLEDGE / "hopper.json"
    return _load(str(p))


@lru_cache(maxsize=4)
def _load(path: str) -> KnowledgeBase:
    d = json.loads(Path(path).read_text())
    ts = tuple(_technique(e) for e in d["entries"])
    ids = [t.id for t in ts]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise KnowledgeError(f"duplicate technique ids: {', '.join(sorted(dup))}")
    return KnowledgeBase(d["name"], d["version"], ts)


@lru_cache(maxsize=1)
def _baselines() -> dict[str, Any]:
    return json.loads((KNOWLEDGE / "baselines.json").read_text())


def library_tflops(kind: str, dims: dict[str, int]) -> tuple[float, str] | None:
    """Recorded library TFLOP/s for this problem (and its source), if the table has it."""
    b = _baselines()
    for e in b["entries"]:
        if e["kernel"] == kind and e["dims"] == {k: int(v) for k, v in dims.items()}:
            return float(e["tflops"]), f"{e['library']} on {b['device']} ({b['version']}, recorded)"
    return None
