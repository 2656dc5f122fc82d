"""Candidates and edits: what the tuner searches over.

A candidate is DSL source text plus param overrides (the `-D` values). An edit is data — a JSON object
a planner emits — never code: `set_param`, `replace_text`, or `rewrite` (a named source-to-source
transformation from argus/agent/rewrites.py). Applying an edit yields a new candidate or raises
`EditError` with a reason the planner can act on.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from argus.agent.rewrites import Env, Inapplicable, Program, apply_rewrite
from argus.agent.source import SourceError, declared_params, format_value, set_param_default


class EditError(ValueError):
    """An edit that cannot be applied (malformed, not applicable, or a no-op)."""


@dataclass(frozen=True)
class Candidate:
    source: str
    params: tuple[tuple[str, object], ...] = ()  # overrides, sorted by name
    kernel: str | None = None
    template: str | None = None  # read from old run records only: no rewrite swaps in a stored program

    @staticmethod
    def make(source: str, params: dict[str, object] | None = None, kernel: str | None = None,
             template: str | None = None) -> Candidate:
        declared = declared_params(source)
        # Overrides equal to the declared default are dropped so equal programs get equal keys.
        kept = {k: v for k, v in (params or {}).items() if not (k in declared and declared[k] == v)}
        return Candidate(source, tuple(sorted(kept.items())), kernel, template)

    @property
    def defines(self) -> dict[str, object]:
        return dict(self.params)

    def effective_params(self) -> dict[str, object]:
        return {**declared_params(self.source), **self.defines}

    @property
    def key(self) -> str:
        """Identity of the program as compiled: the materialised text (overrides folded in)."""
        return hashlib.sha256(self.materialise().encode()).hexdigest()[:16]

    def materialise(self) -> str:
        """Standalone source with the overrides written as the params' defaults."""
        text = self.source
        for name, value in self.params:
            try:
                text = set_param_default(text, name, value)
            except SourceError:
                pass  # an override of a runtime dim or an undeclared name: left as a -D
        return text

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "params": self.defines, "kernel": self.kernel, "template": self.template}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Candidate:
        return Candidate.make(d["source"], d.get("params") or {}, d.get("kernel"), d.get("template"))

    def label(self) -> str:
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.effective_params().items())


@dataclass(frozen=True)
class Edit:
    op: str  # "set_param" | "replace_text" | "rewrite"
    name: str = ""  # param name (set_param) or rewrite name (rewrite)
    value: object = None  # set_param
    old: str = ""  # replace_text
    new: str = ""
    args: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def to_json(self) -> dict[str, Any]:
        if self.op == "set_param":
            return {"op": "set_param", "name": self.name, "value": self.value}
        if self.op == "replace_text":
            return {"op": "replace_text", "old": self.old, "new": self.new}
        return {"op": "rewrite", "name": self.name, "args": dict(self.args)}

    def describe(self) -> str:
        if self.op == "set_param":
            return f"{self.name}={format_value(self.value)}"
        if self.op == "replace_text":
            first = self.old.strip().splitlines()[0] if self.old.strip() else ""
            return f"replace `{first[:40]}`"
        a = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.name}({a})"


EDIT_SCHEMA = {
    "set_param": {"name": "param name", "value": "int | str | bool"},
    "replace_text": {"old": "exact text occurring once in the source", "new": "replacement text"},
    "rewrite": {"name": "a rewrite name", "args": "object of the rewrite's arguments"},
}


def parse_edit(obj: Any) -> Edit:
    """Validate one JSON edit (dict) and return it; raises EditError with what is wrong."""
    if not isinstance(obj, dict):
        raise EditError(f"an edit is a JSON object, got {type(obj).__name__}")
    op = obj.get("op")
    if op == "set_param":
        name, value = obj.get("name"), obj.get("value")
        if not isinstance(name, str) or not name.isidentifier():
            raise EditError("set_param needs a param name")
        if not isinstance(value, (int, str, bool, float)):
            raise EditError(f"set_param {name}: value must be a number, string or bool")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 63:
            raise EditError(f"set_param {name}: integers fit in 64 bits")
        if isinstance(value, float) and not math.isfinite(value):
            raise EditError(f"set_param {name}: value must be finite")
        if isinstance(value, str) and (len(value) > 200 or not value.isprintable() or '"' in value):
            raise EditError(f"set_param {name}: a string value is at most 200 printable characters, without '\"'")
        return Edit("set_param", name=name, value=value)
    if op == "replace_text":
        old, new = obj.get("old"), obj.get("new")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise EditError("replace_text needs non-empty 'old' and a string 'new'")
        return Edit("replace_text", old=old, new=new)
    if op == "rewrite":
        name, args = obj.get("name"), obj.get("args", {})
        if not isinstance(name, str):
            raise EditError("rewrite needs a rewrite name")
        if not isinstance(args, dict):
            raise EditError("rewrite args must be an object")
        return Edit("rewrite", name=name, args=dict(args))
    raise EditError(f"unknown edit op {op!r}; use one of {', '.join(EDIT_SCHEMA)}")


def parse_edits(obj: Any) -> tuple[Edit, ...]:
    if isinstance(obj, dict) and "edits" in obj:
        obj = obj["edits"]
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        raise EditError("no edits given")
    return tuple(parse_edit(x) for x in items)


def apply_edit(c: Candidate, e: Edit, env: Env) -> Candidate:
    if e.op == "set_param":
        declared = declared_params(c.source)
        if e.name not in declared:
            raise EditError(f"the kernel has no param {e.name}; its params are {', '.join(declared) or 'none'}")
        if c.effective_params()[e.name] == e.value:
            raise EditError(f"{e.name} is already {format_value(e.value)}")
        return Candidate.make(c.source, {**c.defines, e.name: e.value}, c.kernel, c.template)
    if e.op == "replace_text":
        n = c.source.count(e.old)
        if n != 1:
            raise EditError(f"replace_text: the old text occurs {n} times in the source (it must occur once)")
        src = c.source.replace(e.old, e.new)
        keep = {k: v for k, v in c.defines.items() if k in declared_params(src)}
        return Candidate.make(src, keep, c.kernel, c.template)
    if e.op == "rewrite":
        try:
            p = apply_rewrite(e.name, Program(c.source, c.defines, c.template), e.args, env)
        except (Inapplicable, SourceError) as exc:
            raise EditError(f"rewrite {e.name}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise EditError(f"rewrite {e.name}: bad arguments {e.args}: {exc}") from exc
        return Candidate.make(p.source, p.params, c.kernel, p.template)
    raise EditError(f"unknown edit op {e.op!r}")


def apply_edits(c: Candidate, edits: tuple[Edit, ...], env: Env) -> Candidate:
    out = c
    for e in edits:
        out = apply_edit(out, e, env)
    if out.key == c.key:
        raise EditError("the edits leave the program unchanged")
    return out


def with_source(c: Candidate, source: str) -> Candidate:
    """A whole new program from a planner. It stands alone: planners are shown materialised programs
    (overrides folded into the param defaults), so carrying overrides would undo the planner's changes."""
    return Candidate.make(source, {}, c.kernel, None)


def diff(a: Candidate, b: Candidate, context: int = 1) -> str:
    """How b differs from a: param changes first, then a unified diff of the materialised text."""
    pa, pb = a.effective_params(), b.effective_params()
    lines = [f"{k}: {format_value(pa.get(k))} -> {format_value(pb.get(k))}"
             for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k) and k in pa and k in pb]
    if a.source != b.source:
        lines += list(difflib.unified_diff(a.source.splitlines(), b.source.splitlines(), "a.arg", "b.arg",
                                           n=context, lineterm=""))
    return "\n".join(lines) or "(identical)"


def edits_json(edits: tuple[Edit, ...]) -> str:
    return json.dumps([e.to_json() for e in edits])
