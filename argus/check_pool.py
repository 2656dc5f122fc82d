"""Verify the (kernel, params) sets of one `argus check` command side by side, in forked workers.

A file such as examples/gemm_ws.arg holds kernels whose `specialize` routes and layers make one command
verify some seventy (kernel, params) sets, each a few seconds of Z3; one after another they outgrew the
default time limit on a 2-core machine. `argus check` therefore first walks the command without verifying
(collecting the sets `_check_params` would verify), verifies the distinct sets in `jobs()` forked workers,
each capturing what it would have printed, and then walks the command again in order: every set's text and
record come from the workers, so the output is the sequential one. A set a worker could not finish or send
(it raised, or its record does not pickle) is verified again in order, where its error surfaces as before.

Workers are plain `os.fork` children (the bounded child running the command is a daemon process, which
multiprocessing does not let have children); each asks the kernel to kill it when its parent dies, so the
command's time limit still stops everything. Each inherits the command's address-space cap.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
from collections.abc import Callable, Hashable
from typing import Any

JOBS_ENV = "ARGUS_CHECK_JOBS"  # workers for one `argus check` (default: the usable cores, at most 8)


def jobs() -> int:
    env = os.environ.get(JOBS_ENV, "")
    if env.strip().isdigit():
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(items: list[tuple[Hashable, Callable[[], Any]]], fd: int) -> None:
    _die_with_parent()
    out: dict = {}
    for key, fn in items:
        text = io.StringIO()
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
                value = fn()
            pickle.dumps(value)
        except BaseException:  # noqa: BLE001 - verified again in order, where the error is reported
            continue
        out[key] = (value, text.getvalue())
    try:
        data = pickle.dumps(out)
    except Exception:  # noqa: BLE001
        data = pickle.dumps({})
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def run_parallel(items: list[tuple[Hashable, Callable[[], Any]]], n: int) -> dict[Hashable, tuple[Any, str]]:
    """{key: (fn(), what fn printed)} for the items the workers finished; `n` workers, items dealt round
    robin (the caller lists them in walk order, so neighbouring, similar sets go to different workers)."""
    n = max(1, min(n, len(items)))
    if n <= 1 or not hasattr(os, "fork"):
        return {}
    pids, reads = [], []
    for i in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            os.close(r)
            code = 0
            try:
                _worker(items[i::n], w)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        os.close(w)
        pids.append(pid)
        reads.append(r)
    results: dict = {}
    for pid, r in zip(pids, reads):
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        try:
            results.update(pickle.loads(data))
        except Exception:  # noqa: BLE001 - a worker that died mid-write: its sets are verified in order
            pass
    return results
