"""Shadow memory for shared buffers: observes races and async-copy hazards while the interpreter runs.

Per element it keeps the last writer thread and the barrier epoch of the write, the last reader (a
thread, or MULTI) and its epoch, and whether an async copy into it is in flight. Epochs count block
barriers, so two accesses in the same epoch by different threads are unordered. This is how the
verifier's counterexamples for races are replayed: the interpreter runs the concrete configuration
and reports the hazard it *observed*, with the element and the two threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from argus.dsl.diagnostics import Span
from argus.ir.threads import MULTI, NONE


@dataclass(frozen=True)
class ObservedHazard:
    code: str  # "race" | "async-read-before-wait" | "async-overwrite" | "uninitialized-read" | "output-written-twice"
    buffer: str
    element: tuple[int, ...]
    first_thread: int  # the earlier access (MULTI: several threads)
    second_thread: int
    first_span: Span | None
    second_span: Span | None
    block: tuple[int, ...]
    detail: str = ""

    def describe(self) -> str:
        if self.code == "output-written-twice":
            return f"{self.buffer}[{', '.join(map(str, self.element))}] {self.detail}"
        t = {MULTI: "several threads", NONE: "?"}
        a = t.get(self.first_thread, f"thread {self.first_thread}")
        b = t.get(self.second_thread, f"thread {self.second_thread}")
        el = f"{self.buffer}[{', '.join(map(str, self.element))}]"
        if self.code == "uninitialized-read":
            return f"{el}: read before any copy has written it, by {b} (block {self.block})"
        what = {"race": "unordered accesses (no barrier between)",
                "async-read-before-wait": "read while an async copy into it is still in flight",
                "async-overwrite": "async copy issued into it while it is still being read"}[self.code]
        return f"{el}: {what}: {a} then {b} (block {self.block})"


class ShadowBuffer:
    def __init__(self, shape: tuple[int, ...]):
        self.w_thread = np.full(shape, NONE, np.int32)
        self.w_epoch = np.full(shape, -1, np.int64)
        self.w_span = np.full(shape, -1, np.int32)
        self.r_thread = np.full(shape, NONE, np.int32)
        self.r_epoch = np.full(shape, -1, np.int64)
        self.r_span = np.full(shape, -1, np.int32)
        self.inflight = np.zeros(shape, bool)
        self.inflight_span = np.full(shape, -1, np.int32)


class Shadow:
    """All shared buffers of one block."""

    def __init__(self, block: tuple[int, ...]):
        self.block = block
        self.buffers: dict[str, ShadowBuffer] = {}
        self.spans: list[Span | None] = []
        self.found: list[ObservedHazard] = []
        self._seen: set[tuple] = set()

    def alloc(self, name: str, shape: tuple[int, ...]) -> None:
        self.buffers[name] = ShadowBuffer(shape)

    def _span_id(self, span: Span | None) -> int:
        self.spans.append(span)
        return len(self.spans) - 1

    def _report(self, code: str, name: str, buf_idx, mask: np.ndarray, first: np.ndarray, second,
                first_span: np.ndarray, span: Span | None) -> None:
        if not mask.any():
            return
        pos = tuple(int(x) for x in np.argwhere(mask)[0])
        # translate the position inside the view back to buffer coordinates
        element = _buffer_coord(buf_idx, pos)
        f = int(first[pos])
        s = int(second[pos]) if isinstance(second, np.ndarray) else int(second)
        fs = int(first_span[pos])
        key = (code, name, self.spans[fs] if fs >= 0 else None, span)
        if key in self._seen:
            return
        self._seen.add(key)
        self.found.append(ObservedHazard(code, name, element, f, s, self.spans[fs] if fs >= 0 else None, span,
                                         self.block))

    def read(self, name: str, idx, readers, epoch: int, span: Span | None) -> None:
        b = self.buffers[name]
        inflight = b.inflight[idx]
        self._report("async-read-before-wait", name, idx, inflight, b.inflight_span[idx] * 0 + NONE,
                     readers, b.inflight_span[idx], span)
        # every copy writes its whole destination (TMA and masked copies write their zero fill), so an
        # element no copy has written holds whatever the block's shared memory held before: garbage
        never = (b.w_epoch[idx] == -1) & ~inflight
        self._report("uninitialized-read", name, idx, never, b.w_thread[idx], readers, b.w_span[idx], span)
        w_t, w_e = b.w_thread[idx], b.w_epoch[idx]
        raw = (w_e == epoch) & (w_t != NONE) & ((readers == MULTI) | (w_t != readers))
        self._report("race", name, idx, raw & ~inflight, w_t, readers, b.w_span[idx], span)
        sid = self._span_id(span)
        r_t, r_e = b.r_thread[idx], b.r_epoch[idx]
        same = (r_e == epoch) & (r_t != NONE) & (r_t != readers)
        b.r_thread[idx] = np.where(same, MULTI, readers)
        b.r_epoch[idx] = epoch
        b.r_span[idx] = sid

    def issue_async(self, name: str, idx, writers, epoch: int, span: Span | None) -> None:
        """An async copy may write its destination any time from issue on: check against open reads."""
        b = self.buffers[name]
        r_t, r_e = b.r_thread[idx], b.r_epoch[idx]
        war = (r_e == epoch) & (r_t != NONE) & ((r_t == MULTI) | (r_t != writers))
        self._report("async-overwrite", name, idx, war, r_t, writers, b.r_span[idx], span)
        b.inflight[idx] = True
        b.inflight_span[idx] = self._span_id(span)

    def write(self, name: str, idx, writers, epoch: int, span: Span | None, asynchronous: bool) -> None:
        b = self.buffers[name]
        if not asynchronous:
            r_t, r_e = b.r_thread[idx], b.r_epoch[idx]
            war = (r_e == epoch) & (r_t != NONE) & ((r_t == MULTI) | (r_t != writers))
            self._report("race", name, idx, war, r_t, writers, b.r_span[idx], span)
        w_t, w_e = b.w_thread[idx], b.w_epoch[idx]
        waw = (w_e == epoch) & (w_t != NONE) & (w_t != writers)
        self._report("race", name, idx, waw, w_t, writers, b.w_span[idx], span)
        b.w_thread[idx] = writers
        b.w_epoch[idx] = epoch
        b.w_span[idx] = self._span_id(span)
        b.inflight[idx] = False


def _buffer_coord(idx, pos: tuple[int, ...]) -> tuple[int, ...]:
    out, p = [], iter(pos)
    for i in idx:
        if isinstance(i, slice):
            out.append((i.start or 0) + next(p))
        else:
            out.append(int(i))
    return tuple(out)
