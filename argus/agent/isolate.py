"""Run a function in a child process with a timeout, so a hang or a crash costs one step, not the tuner.

The child sends back ("ok", value) or ("error", text) through a pipe; a child that dies without an
answer (os.abort, a segfault, a CUDA fault taking the process down) is reported as a fault with its
signal, and one still running at the timeout is killed (SIGKILL) and reported as a timeout.
"fork" is cheap and used on the CPU; "spawn" is for GPU work (a CUDA context must not be forked).
A `Worker` keeps one child for a sequence of GPU jobs and replaces it after any failure.
With `memory_bytes` the child caps its address space (argus.limits): a MemoryError there comes back
as status "memory"; inside the child `argus.limits.remaining_s()` tells long work its time left.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
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


def _own_group() -> None:
    """Lead a process group of one's own, so that the parent's kill reaches the processes this one starts
    (the verifier's worker pool): killed alone, a timed-out child left them running past the tune run."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass


def kill_tree(proc) -> None:
    """SIGKILL a child started here and every process in its group (its own children), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass  # the group is gone (or not yet made: the child itself is all there is)
    if proc.is_alive():
        proc.kill()
    proc.join(5)


def _child(conn, fn, args, kwargs, limits: Limits) -> None:
    faulthandler.disable()  # a candidate's crash is an expected outcome, reported by the parent
    _own_group()
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
    return start_isolated(fn, *args, timeout_s=timeout_s, start_method=start_method, memory_bytes=memory_bytes,
                          **kwargs).wait()


def start_isolated(fn: Callable[..., Any], *args: Any, timeout_s: float = 60.0, start_method: str = "fork",
                   memory_bytes: int | None = None, **kwargs: Any) -> Pending:
    """run_isolated without waiting: the child starts now, `wait()` collects it (its time limit counts
    from now), so two children can run side by side without threads in the parent."""
    ctx = mp.get_context(start_method)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args, kwargs, Limits(timeout_s, memory_bytes)), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    return Pending(proc, recv, t0, timeout_s)


@dataclass
class Pending:
    proc: Any
    recv: Any
    t0: float
    timeout_s: float

    def cancel(self) -> None:
        """Stop a child whose result is no longer wanted (a no-op once waited for)."""
        kill_tree(self.proc)
        self.recv.close()

    def wait(self) -> ChildResult:
        proc, recv, t0, timeout_s = self.proc, self.recv, self.t0, self.timeout_s
        msg = None
        try:
            if recv.poll(max(0.0, timeout_s - (time.perf_counter() - t0))):
                try:
                    msg = recv.recv()
                except EOFError:
                    msg = None
        finally:
            recv.close()
        if msg is None and proc.is_alive() and time.perf_counter() - t0 >= timeout_s * 0.999:
            kill_tree(proc)
            return ChildResult("timeout", seconds=time.perf_counter() - t0, exitcode=proc.exitcode)
        proc.join(max(1.0, timeout_s - (time.perf_counter() - t0)))
        alive = proc.is_alive()
        kill_tree(proc)  # also whatever it started and left behind (a verifier pool past its own deadline)
        if alive:
            if msg is None:
                return ChildResult("timeout", seconds=time.perf_counter() - t0, exitcode=proc.exitcode)
        dt = time.perf_counter() - t0
        if msg is None:
            return ChildResult("fault", exitcode=proc.exitcode, seconds=dt)
        return _result(msg, dt, proc.exitcode)


def _result(msg, seconds: float, exitcode: int | None = None) -> ChildResult:
    """A child's answer ("ok" | "memory" | "error", payload) as a ChildResult."""
    kind, payload = msg
    if kind == "ok":
        return ChildResult("ok", payload, exitcode=exitcode, seconds=seconds)
    if kind == "memory":
        return ChildResult("memory", error=payload, exitcode=exitcode, seconds=seconds)
    return ChildResult("error", error=payload, exitcode=exitcode, seconds=seconds)


def _serve(conn, after_job) -> None:
    """A Worker's child: run jobs until the parent closes the pipe."""
    faulthandler.disable()
    _own_group()
    while True:
        try:
            fn, args, kwargs, timeout_s = conn.recv()
        except (EOFError, OSError):
            return
        try:
            enter(Limits(timeout_s, None))
            _answer(conn, ("ok", fn(*args, **kwargs)))
        except MemoryError:
            _answer(conn, ("memory", "the machine's"))
        except BaseException as e:  # report everything; the parent ends this worker after an error
            _answer(conn, ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
        if after_job is not None:
            try:
                after_job()
            except Exception:
                pass


class Worker:
    """One long-lived child for a sequence of jobs, for GPU work: the spawn, the imports and the CUDA
    context (several seconds) are paid once per run instead of once per candidate. A job that errs,
    faults or times out ends the worker (a CUDA error can leave the context unusable, and an error may
    have left state behind), so the next job starts a fresh one; results are the same ChildResult as
    run_isolated's. No memory cap: a CUDA context maps more address space than any cap would allow."""

    def __init__(self, start_method: str = "spawn", after_job: Callable[[], None] | None = None):
        self._ctx = mp.get_context(start_method)
        self._after = after_job
        self._proc = None
        self._conn = None
        self.started = 0  # children started (a test reads it)

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        self._proc = self._ctx.Process(target=_serve, args=(child, self._after), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self.started += 1

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 60.0, **kwargs: Any) -> ChildResult:
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._start()
        t0 = time.perf_counter()
        msg, ended = None, False
        try:
            self._conn.send((fn, args, kwargs, timeout_s))
            if self._conn.poll(timeout_s):
                msg = self._conn.recv()
        except (EOFError, OSError):
            ended = True  # the child closed the pipe: it died
        dt = time.perf_counter() - t0
        if msg is None:
            if ended:
                self._proc.join(5)
            code = self._proc.exitcode
            self.close()
            return ChildResult("fault" if ended else "timeout", exitcode=code, seconds=dt)
        if msg[0] != "ok":
            self.close()  # after an error the child's state (a CUDA context) is not trusted
        return _result(msg, dt)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            kill_tree(self._proc)
            self._proc = None
