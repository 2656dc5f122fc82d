"""Learning across runs: a persistent store of what each change did to which kind of kernel.

Every evaluated step of every run adds one entry: the kernel's *signature* before the change (family,
MMA instruction, tile, ring depth, warp specialisation, copy mode, persistent, problem scale), the
change (the knowledge-base action or the edits, and a short diff), its measured effect (the log
speedup over the program it was applied to, with both times), the verifier's verdict and the
evaluator (GPU or CPU estimate). Failures are kept too (no effect, the status says why).

Readers: the built-in planner turns entries into priors for its tree search (`Priors.score`: the
similarity-weighted mean effect of an action on kernels like the current one, failures counted as a
loss), so a later run on a related kernel tries what worked first; the Anthropic planner's prompt gets
the strongest contrastive pairs (a faster and a slower variant, their times and how they differ).

The file is JSON (default `$ARGUS_TUNE_STORE`, else `$XDG_CACHE_HOME/argus/tune-store.json`, else
`~/.cache/argus/tune-store.json`; `argus tune --store PATH`). Writes are atomic (a temporary file in the
same folder, fsync, rename) under an exclusive lock, so concurrent runs never lose each other's
entries and a kill never leaves half a file. A damaged file is set aside (`.corrupt`), never trusted.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = 1
MAX_ENTRIES = 20000  # oldest dropped first
FAIL_EFFECT = -0.3  # a change that failed (violated, wrong, did not compile): a loss in reward units
WEIGHTS = {"family": 3.0, "instr": 2.0, "warp_specialised": 2.0, "stages": 1.0, "tile": 1.0, "copy": 1.0,
           "persistent": 1.0, "scale": 0.5, "kernel": 0.5}


def default_path() -> Path:
    env = os.environ.get("ARGUS_TUNE_STORE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "argus" / "tune-store.json"


def signature(kernel, dims: dict[str, int], family: str) -> dict[str, Any]:
    """What the store compares kernels by (read from the lowered IR, not from names)."""
    from argus.agent.features import extract

    try:
        f = extract(kernel, dims)
    except Exception:  # noqa: BLE001 - a kernel the feature walk cannot read still gets an entry
        return {"family": family, "kernel": kernel.name}
    s = f.main
    scale = sum(math.log2(max(1, v)) for v in dims.values())
    return {"family": family, "kernel": kernel.name, "instr": s.instr if s else "none",
            "tile": [s.m, s.n, s.k] if s else [], "stages": f.ring_depth, "warp_specialised": f.warp_specialised,
            "copy": f.copy_mode, "persistent": f.persistent, "scale": round(scale)}


def similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """0..1: weighted share of equal features (a different family counts as unrelated)."""
    if a.get("family") != b.get("family"):
        return 0.0
    total = same = 0.0
    for k, w in WEIGHTS.items():
        if k not in a and k not in b:
            continue
        total += w
        if k == "scale":
            same += w * max(0.0, 1.0 - abs(float(a.get(k, 0)) - float(b.get(k, 0))) / 8.0)
        elif a.get(k) == b.get(k):
            same += w
    return same / total if total else 0.0


@dataclass(frozen=True)
class Prior:
    value: float  # shrunk similarity-weighted mean effect (reward units)
    weight: float  # total similarity behind it
    wins: int
    fails: int


def _gain(step: int, by_step: dict[int, dict[str, Any]], memo: dict[int, float | None]) -> float | None:
    """Summed measured effect from a run's start (step 0) to `step` along parent links; None if a step on
    the way failed or is missing."""
    chain = []
    while step not in memo:
        e = by_step.get(step)
        if e is None or e.get("effect") is None or step in chain:
            memo[step] = None
            break
        chain.append(step)
        step = e["parent_step"]
    up = memo[step]
    for st in reversed(chain):
        up = None if up is None else up + float(by_step[st]["effect"])
        memo[st] = up
    return memo[chain[0]] if chain else memo[step]


PATH_SIMILARITY = 0.6  # an earlier run's best path is replayed on a start at least this similar


@dataclass(frozen=True)
class BestPath:
    run: str
    similarity: float
    gain: float  # summed measured effect along the path (reward units)
    steps: tuple[dict[str, Any], ...]  # store entries, start first


class Priors:
    """Per-action priors for one family, from the store's entries."""

    def __init__(self, entries: list[dict[str, Any]], family: str, exclude_run: str | None = None):
        self.entries = [e for e in entries if e.get("family") == family and e.get("action")
                        and e.get("run") != exclude_run]
        self.by_action: dict[str, list[dict[str, Any]]] = {}
        for e in self.entries:
            self.by_action.setdefault(e["action"], []).append(e)

    def score(self, action: str, sig: dict[str, Any], shrink: float = 1.0) -> Prior | None:
        num = den = 0.0
        wins = fails = 0
        for e in self.by_action.get(action, ()):
            w = similarity(sig, e.get("before") or {})
            if w <= 0:
                continue
            effect = e.get("effect")
            if effect is None:
                fails += 1
                effect = FAIL_EFFECT
            elif effect > 0:
                wins += 1
            num += w * float(effect)
            den += w
        if den == 0:
            return None
        return Prior(num / (den + shrink), den, wins, fails)

    def best_path(self, start: dict[str, Any], min_similarity: float = PATH_SIMILARITY) -> BestPath | None:
        """The change sequence from the start to the best kernel of the earlier run whose starting kernel is
        most like `start` (ties: the larger gain): what a second run on a related kernel tries first. A run
        counts when its entries link each step to its parent (`parent_step`, stores from 2026-12-02 on)."""
        runs: dict[str, list[dict[str, Any]]] = {}
        for e in self.entries:
            runs.setdefault(e["run"], []).append(e)
        best: BestPath | None = None
        for run, es in runs.items():
            by_step = {e["step"]: e for e in es}
            roots = [e for e in es if e.get("parent_step") == 0]
            if not roots or any("parent_step" not in e for e in es):
                continue
            sim = similarity(start, roots[0].get("before") or {})
            if sim < min_similarity:
                continue
            gain: dict[int, float | None] = {0: 0.0}
            ends = [(g, step) for step in by_step if (g := _gain(step, by_step, gain)) is not None]
            if not ends:
                continue
            g, step = max(ends, key=lambda t: (t[0], -t[1]))
            path = []
            while step != 0:
                path.append(by_step[step])
                step = by_step[step]["parent_step"]
            cand = BestPath(run, sim, g, tuple(reversed(path)))
            if g > 0 and (best is None or (sim, g) > (best.similarity, best.gain)):
                best = cand
        return best

    def __len__(self) -> int:
        return len(self.entries)



class StoreError(RuntimeError):
    pass


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ---- reading ----
    def load(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"cannot read the tune store {self.path}: {e.strerror or e}") from None
        try:
            d = json.loads(raw)
            if not isinstance(d, dict) or d.get("schema") != SCHEMA or not isinstance(d.get("entries"), list):
                raise ValueError("not a tune store")
            return [e for e in d["entries"] if isinstance(e, dict)]
        except (ValueError, UnicodeDecodeError):
            return []  # set aside at the next write (`_write`), never trusted

    def priors(self, family: str, exclude_run: str | None = None) -> Priors:
        return Priors(self.load(), family, exclude_run)

    # ---- writing ----
    def add(self, entries: list[dict[str, Any]]) -> None:
        """Append entries (read-modify-write under the lock, atomically replaced)."""
        if not entries:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StoreError(f"cannot write the tune store {self.path}: {e.strerror or e}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self._current()
            keys = {(e.get("run"), e.get("step")) for e in current}
            current += [e for e in entries if (e.get("run"), e.get("step")) not in keys]
            self._write(current[-MAX_ENTRIES:])
        finally:
            os.close(lock)

    def _current(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            d = json.loads(raw)
            if isinstance(d, dict) and d.get("schema") == SCHEMA and isinstance(d.get("entries"), list):
                return [e for e in d["entries"] if isinstance(e, dict)]
        except (ValueError, UnicodeDecodeError):
            pass
        os.replace(self.path, str(self.path) + ".corrupt")  # kept for a human, never read again
        return []

    def _write(self, entries: list[dict[str, Any]]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".tune-store-", dir=str(self.path.parent))
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"schema": SCHEMA, "entries": entries}, f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def entry(run: str, header: dict[str, Any], step: dict[str, Any], parent: dict[str, Any] | None) -> dict[str, Any]:
    """The store's entry for one step of a run record (`parent`: the step it was applied to)."""
    prop = step.get("proposal") or {}
    ev = step.get("evaluation") or {}
    times = [t["median_s"] for t in ev.get("timings") or []]
    ptimes = [t["median_s"] for t in ((parent or {}).get("evaluation") or {}).get("timings") or []]
    effect = None
    if step.get("status") == "ok" and times and len(times) == len(ptimes):
        effect = sum(math.log(a / b) for a, b in zip(ptimes, times)) / len(times)
    return {"run": run, "step": step["step"], "parent_step": (parent or {}).get("step"),
            "kernel": header.get("kernel"), "family": header.get("family"),
            "action": (prop.get("action") or "").split("+repair")[0], "technique": prop.get("technique", ""),
            "edits": prop.get("edits") or [], "program": bool(prop.get("source")),
            "before": (parent or {}).get("signature") or {}, "after": step.get("signature") or {},
            "effect": effect, "time_s": times, "parent_time_s": ptimes, "status": step.get("status"),
            "verify": (step.get("verify") or {}).get("status"), "estimate": bool(step.get("estimate")),
            "evaluator": header.get("evaluator"), "shapes": header.get("targets"), "diff": step.get("diff", ""),
            "time": step.get("time")}


def entries_from_record(path: str | Path) -> list[dict[str, Any]]:
    """Every step of a finished (or killed) run record, as store entries."""
    from argus.agent.record import RunRecord

    rec = RunRecord.load(path)
    return run_entries(str(Path(path).resolve()), rec.header, rec.steps)


def run_entries(run: str, header: dict[str, Any], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key = {s.get("key"): s for s in steps if s.get("key")}
    out = []
    for s in steps[1:]:
        parent = by_key.get(s.get("parent")) or (steps[0] if s.get("parent") is None else None)
        out.append(entry(run, header, s, parent))
    return out


def contrastive(entries: list[dict[str, Any]], family: str, sig: dict[str, Any], limit: int = 3,
                exclude_run: str | None = None) -> list[dict[str, Any]]:
    """The strongest measured pairs from earlier runs on similar kernels: entries whose change made a
    kernel clearly faster or clearly slower, most similar and largest effect first."""
    cand = [e for e in entries if e.get("family") == family and e.get("effect") is not None
            and e.get("run") != exclude_run and abs(e["effect"]) >= 0.05 and e.get("time_s")]
    cand.sort(key=lambda e: -(similarity(sig, e.get("before") or {}) * abs(e["effect"])))
    faster = [e for e in cand if e["effect"] > 0][: max(1, limit - 1)]
    slower = [e for e in cand if e["effect"] < 0][:1]
    return faster + slower
