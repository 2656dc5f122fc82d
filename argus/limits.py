"""Time and memory budgets for work done on behalf of a program or a model's proposal.

The work runs in a child process (argus.agent.isolate.run_isolated) that the parent kills at its
time limit; the child caps its own address space (RLIMIT_AS) at what it already uses plus the memory
budget, so an allocation past the budget is a MemoryError there, never the machine's OOM killer.
Inside the child, `remaining_s()` and `memory_budget()` let long work (the interpreter over a grid of
blocks, a reference allocation) refuse up front or stop early with the reason instead of being killed.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass

DEFAULT_TIME_S = 300.0
DEFAULT_MEMORY = 8 << 30


@dataclass(frozen=True)
class Limits:
    time_s: float = DEFAULT_TIME_S
    memory_bytes: int | None = DEFAULT_MEMORY  # None: not capped (GPU work: a CUDA context maps huge ranges)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_memory(text: str) -> int:
    """'8G', '512M', '1.5GiB', '4096' (bytes) -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtKMGT]?)(?:i?[bB])?\s*", text)
    if m is None or len(m.group(1)) > 15:
        raise ValueError(f"'{text}' is not a size: write e.g. 8G, 512M or 1.5G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 64 << 20:
        raise ValueError(f"'{text}' is below the 64M a Python process needs to start its work")
    return value


def parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > 7 * 86400:
        raise ValueError(f"'{text}': give a positive number of seconds (at most a week)")
    return value


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


# ---- the budget of this process (set in a bounded child) ----
_deadline: float | None = None
_memory: int | None = None


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def enter(limits: Limits) -> None:
    """Apply `limits` to the current process (called at the start of a bounded child)."""
    global _deadline, _memory
    _deadline = time.monotonic() + limits.time_s
    _memory = limits.memory_bytes
    if limits.memory_bytes is None:
        return
    try:
        import resource

        used = _address_space() or 0
        cap = used + limits.memory_bytes
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):
        pass  # no RLIMIT_AS here: the up-front estimates still refuse oversized work


def remaining_s() -> float | None:
    return None if _deadline is None else _deadline - time.monotonic()


def memory_budget() -> int | None:
    return _memory
