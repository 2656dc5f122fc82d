"""Run a function in a child process with a timeout, so a hang or a crash costs one step, not the tuner.

The child sends back ("ok", value) or ("error", text) through a pipe; a child that dies without an
answer (os.abort, a segfault, a CUDA fault taking the process down) is reported as a fault with its
signal, and one still running at the timeout is killed (SIGKILL) and reported as a timeout.
"fork" is cheap and used on the CPU; "spawn" is for GPU work (a CUDA context must not be forked).
With `memory_bytes` the child caps its address space (argus.limits): a MemoryError there comes back
as status "memory"; inside the child `argus.limits.remaining_s()` tells long work its time left.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from argus.limits import Limits, enter, format_bytes


@dataclass(frozen=True)
class ChildResult:
    status: str  # "ok" | "error" | "timeout" | "fault" | "memory"
    value: Any = None
    error: str = ""
    exitcode: int | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        if self.status == "timeout":
            return f"did not finish within its time limit ({self.seconds:.1f} s): killed"
        if self.status == "fault":
            sig = -self.exitcode if self.exitcode and self.exitcode < 0 else None
            name = signal.Signals(sig).name if sig and sig in signal.Signals._value2member_map_ else None
            return f"the child process died ({name or f'exit code {self.exitcode}'}) without a result"
        if self.status == "memory":
            return f"ran out of memory (the limit is {self.error})"
        if self.status == "error":
            return self.error
        return "ok"


def _child(conn, fn, args, kwargs, limits: Limits) -> None:
    faulthandler.disable()  # a candidate's crash is an expected outcome, reported by the parent
    try:
        enter(limits)
        value = fn(*args, **kwargs)
        _answer(conn, ("ok", value))
    except MemoryError:
        _answer(conn, ("memory", format_bytes(limits.memory_bytes) if limits.memory_bytes else "the machine's"))
    except BaseException as e:  # report everything, including SystemExit, to the parent
        _answer(conn, ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
    finally:
        conn.close()


def _answer(conn, msg) -> None:
    """Send the result; a parent that stopped listening (its timeout passed as the child finished) has
    already reported a timeout and will kill this process, so a closed pipe is not an error to print."""
    try:
        conn.send(msg)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass


def run_isolated(fn: Callable[..., Any], *args: Any, timeout_s: float = 60.0, start_method: str = "fork",
                 memory_bytes: int | None = None, **kwargs: Any) -> ChildResult:
    ctx = mp.get_context(start_method)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args, kwargs, Limits(timeout_s, memory_bytes)), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    msg = None
    try:
        if recv.poll(timeout_s):
            try:
                msg = recv.recv()
            except EOFError:
                msg = None
    finally:
        recv.close()
    if msg is None and proc.is_alive() and time.perf_counter() - t0 >= timeout_s * 0.999:
        proc.kill()
        proc.join(5)
        return ChildResult("timeout", seconds=time.perf_counter() - t0, exitcode=proc.exitcode)
    proc.join(max(1.0, timeout_s - (time.perf_counter() - t0)))
    if proc.is_alive():
        proc.kill()
        proc.join(5)
        if msg is None:
            return ChildResult("timeout", seconds=time.perf_counter() - t0, exitcode=proc.exitcode)
    dt = time.perf_counter() - t0
    if msg is None:
        return ChildResult("fault", exitcode=proc.exitcode, seconds=dt)
    kind, payload = msg
    if kind == "ok":
        return ChildResult("ok", payload, exitcode=proc.exitcode, seconds=dt)
    if kind == "memory":
        return ChildResult("memory", error=payload, exitcode=proc.exitcode, seconds=dt)
    return ChildResult("error", error=payload, exitcode=proc.exitcode, seconds=dt)
