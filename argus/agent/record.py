"""The run record: one JSON object per line — a header, then one line per completed step.

A step is appended (and fsync'ed) only when it is complete, so a kill at any moment loses at most the
step in progress. The record is held under an exclusive lock (`record.jsonl.lock`, fcntl) for as
long as a run uses it, so two tuners can never interleave their steps. `resume` repairs what a kill
can leave — a torn last line is dropped; a complete last step that lost only its final newline is
kept — and refuses, with the line and the reason, anything else: a damaged header, bytes that are not
UTF-8, a line that is not a JSON object, a missing field or one of the wrong type. It then checks the
header matches the run being resumed and hands back the completed steps.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from argus.records import SCHEMA_VERSION

FORMAT = 1  # the layout of the file (a header line, then step lines); schema_version: the keys (docs/json.md)
# Header fields that must match for --resume to continue a run (the budget may grow).
IDENTITY = ("start_key", "planner", "model", "seed", "targets", "checks", "evaluator", "verifier")
MAX_RECORD_BYTES = 1 << 30

_NUM = (int, float)
_HEADER_TYPES: dict[str, tuple] = {
    "file": (str,), "kernel": (str,), "start": (dict,), "start_key": (str,), "planner": (str,),
    "model": (str, type(None)), "seed": (int,), "budget": (int,), "targets": (list,), "checks": (list,),
    "evaluator": (str,), "estimate": (bool,), "verifier": (str,),
}
_STEP_TYPES: dict[str, tuple] = {
    "step": (int,), "status": (str,), "reward": (*_NUM, type(None)), "best_step": (int,), "best_reward": _NUM,
    "proposal": (dict,), "candidate": (dict, type(None)), "evaluation": (dict, type(None)),
    "verify": (dict, type(None)), "attempts": (list,), "key": (str, type(None)),
}


class RecordError(RuntimeError):
    pass


def _type_problem(d: dict[str, Any], types: dict[str, tuple]) -> str | None:
    for name, allowed in types.items():
        if name not in d:
            return f"missing field '{name}'"
        v = d[name]
        if isinstance(v, bool) and bool not in allowed:
            return f"field '{name}' is {type(v).__name__}, expected {'/'.join(t.__name__ for t in allowed)}"
        if not isinstance(v, allowed):
            return f"field '{name}' is {type(v).__name__}, expected {'/'.join(t.__name__ for t in allowed)}"
    return None


def _step_problem(d: dict[str, Any]) -> str | None:
    why = _type_problem(d, _STEP_TYPES)
    if why:
        return why
    cand = d["candidate"]
    if cand is not None and not isinstance(cand.get("source"), str):
        return "the candidate has no source text"
    if d["reward"] is not None:
        ev = d["evaluation"] or {}
        timings = ev.get("timings")
        if not isinstance(timings, list) or not all(isinstance(t, dict) and isinstance(t.get("median_s"), _NUM)
                                                    for t in timings):
            return "an evaluated step without its timings"
    return None


class _Lock:
    """An exclusive, non-blocking fcntl lock on `<record>.lock`, held until released."""

    def __init__(self, record: Path):
        self.path = record.with_name(record.name + ".lock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RecordError(f"{record} is in use by another argus tune (lock {self.path}); wait for it to "
                              "finish or choose another --out") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse_line(raw: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}:{number}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, ValueError, RecursionError) as e:
        raise RecordError(f"{path}:{number}: not a JSON object ({str(e)[:120]})") from None
    if not isinstance(d, dict):
        raise RecordError(f"{path}:{number}: not a JSON object (a {type(d).__name__})")
    return d


class RunRecord:
    def __init__(self, path: Path, header: dict[str, Any], steps: list[dict[str, Any]], lock: _Lock | None = None):
        self.path = path
        self.header = header
        self.steps = steps
        self._lock = lock

    def close(self) -> None:
        """Release the lock (the record stays readable; appending needs a new create/resume)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @staticmethod
    def create(path: str | Path, header: dict[str, Any]) -> RunRecord:
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            lock = _Lock(p)
        except OSError as e:
            raise RecordError(f"cannot create the run record {p}: {e.strerror or e}") from None
        try:
            if os.path.lexists(p) and (p.is_symlink() or not p.is_file() or p.stat().st_size > 0):
                raise RecordError(f"{p} already holds a run: pass --resume to continue it, or choose another --out")
            h = {"schema_version": SCHEMA_VERSION, "kind": "run", "format": FORMAT, **header}
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(h) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            lock.release()
            raise
        return RunRecord(p, h, [], lock)

    @staticmethod
    def load(path: str | Path, lock: _Lock | None = None) -> RunRecord:
        from argus.dsl.diagnostics import ArgusError
        from argus.files import read_regular

        p = Path(path)
        if not os.path.lexists(p):
            raise RecordError(f"no run record at {p}")
        try:
            raw = read_regular(p, MAX_RECORD_BYTES, "run record")
        except ArgusError as e:
            raise RecordError(e.diagnostics[0].message) from None
        lines = raw.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" for a record that ends cleanly
        if tail.strip():
            try:  # a complete step that only lost its newline is kept; a torn line is dropped
                _parse_line(tail, p, len(lines) + 1)
                complete = True
            except RecordError:
                complete = False
            if lock is not None:  # repair on disk only while holding the lock
                with open(p, "r+b") as f:
                    if complete:
                        f.seek(0, os.SEEK_END)
                        f.write(b"\n")
                    else:
                        f.truncate(len(raw) - len(tail))
                    f.flush()
                    os.fsync(f.fileno())
            if complete:
                lines.append(tail)
        numbered = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip()]
        if not numbered:
            raise RecordError(f"{p} is empty: no run header")
        first, head_raw = numbered[0]
        try:
            header = _parse_line(head_raw, p, first)
        except RecordError as e:
            raise RecordError(f"damaged header: {e}; the run cannot be resumed (move the file away or choose "
                              "another --out)") from None
        why = None if header.get("kind") == "run" else "it is not a run header"
        why = why or _type_problem(header, _HEADER_TYPES)
        if why:
            raise RecordError(f"{p}:{first}: damaged header: {why}; the run cannot be resumed (move the file away "
                              "or choose another --out)")
        version = header.get("schema_version", SCHEMA_VERSION)  # absent: written before records were versioned
        if version != SCHEMA_VERSION:
            raise RecordError(f"{p}:{first}: the run was recorded with schema_version {version!r}, and this Argus "
                              f"reads {SCHEMA_VERSION} (docs/json.md); it cannot be resumed")
        steps = []
        for i, ln in numbered[1:]:
            d = _parse_line(ln, p, i)
            if d.get("kind") != "step":
                continue
            why = _step_problem(d)
            if why:
                raise RecordError(f"{p}:{i}: damaged step: {why}; fix or remove that line to resume")
            steps.append(d)
        nums = [s["step"] for s in steps]
        if nums != list(range(len(nums))):
            raise RecordError(f"{p}: steps are not contiguous from 0: {nums[:10]}...")
        return RunRecord(p, header, steps, lock)

    @staticmethod
    def resume(path: str | Path, header: dict[str, Any]) -> RunRecord:
        p = Path(path)
        if not os.path.lexists(p):
            raise RecordError(f"no run record at {p}")
        try:
            lock = _Lock(p)
        except OSError as e:
            raise RecordError(f"cannot lock the run record {p}: {e.strerror or e}") from None
        try:
            r = RunRecord.load(p, lock)
            diff = [k for k in IDENTITY if r.header.get(k) != header.get(k)]
            if diff:
                raise RecordError(f"{r.path} is a different run ({', '.join(diff)} differ); resume needs the same "
                                  "kernel, params, planner, seed, shapes and evaluator")
        except BaseException:
            lock.release()
            raise
        return r

    def append(self, step: dict[str, Any]) -> None:
        if self._lock is None:
            raise RecordError(f"{self.path} is not held by this run (it was closed)")
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
