"""The run record: one JSON object per line — a header, then one line per completed step.

A step is appended (and fsync'ed) only when it is complete, so a kill at any moment loses at most the
step in progress; `resume` drops a torn last line, checks the header matches the run being resumed,
and hands back the completed steps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from argus.records import SCHEMA_VERSION

FORMAT = 1  # the layout of the file (a header line, then step lines); schema_version: the keys (docs/json.md)
# Header fields that must match for --resume to continue a run (the budget may grow).
IDENTITY = ("start_key", "planner", "model", "seed", "targets", "checks", "evaluator", "verifier")


class RecordError(RuntimeError):
    pass


class RunRecord:
    def __init__(self, path: Path, header: dict[str, Any], steps: list[dict[str, Any]]):
        self.path = path
        self.header = header
        self.steps = steps

    @staticmethod
    def create(path: str | Path, header: dict[str, Any]) -> RunRecord:
        p = Path(path)
        if p.exists() and p.stat().st_size > 0:
            raise RecordError(f"{p} already holds a run: pass --resume to continue it, or choose another --out")
        p.parent.mkdir(parents=True, exist_ok=True)
        h = {"schema_version": SCHEMA_VERSION, "kind": "run", "format": FORMAT, **header}
        with open(p, "w") as f:
            f.write(json.dumps(h) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return RunRecord(p, h, [])

    @staticmethod
    def load(path: str | Path) -> RunRecord:
        p = Path(path)
        if not p.exists():
            raise RecordError(f"no run record at {p}")
        raw = p.read_bytes()
        end = raw.rfind(b"\n") + 1
        if end < len(raw):  # a torn last line from a kill mid-write: drop it
            with open(p, "r+b") as f:
                f.truncate(end)
            raw = raw[:end]
        lines = [ln for ln in raw.decode().splitlines() if ln.strip()]
        if not lines:
            raise RecordError(f"{p} is empty")
        header = json.loads(lines[0])
        if header.get("kind") != "run":
            raise RecordError(f"{p} does not start with a run header")
        steps = []
        for i, ln in enumerate(lines[1:], 2):
            try:
                d = json.loads(ln)
            except json.JSONDecodeError as e:
                raise RecordError(f"{p}:{i}: corrupt record line: {e}") from e
            if d.get("kind") == "step":
                steps.append(d)
        nums = [s["step"] for s in steps]
        if nums != list(range(len(nums))):
            raise RecordError(f"{p}: steps are not contiguous from 0: {nums[:10]}...")
        return RunRecord(p, header, steps)

    @staticmethod
    def resume(path: str | Path, header: dict[str, Any]) -> RunRecord:
        r = RunRecord.load(path)
        diff = [k for k in IDENTITY if r.header.get(k) != header.get(k)]
        if diff:
            raise RecordError(f"{r.path} is a different run ({', '.join(diff)} differ); resume needs the same "
                              "kernel, params, planner, seed, shapes and evaluator")
        return r

    def append(self, step: dict[str, Any]) -> None:
        if step["step"] != len(self.steps):
            raise RecordError(f"step {step['step']} appended after {len(self.steps)} steps")
        line = json.dumps({"schema_version": SCHEMA_VERSION, "kind": "step", **step}, default=_default)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.steps.append(json.loads(line))


def _default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)
