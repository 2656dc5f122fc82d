"""argus.agent.isolate.Worker: one long-lived child for GPU jobs, replaced after an error, a crash or a
timeout (run_isolated, a child per job, is tested in test_referee.py)."""

from __future__ import annotations

import os
import time

import pytest

from argus.agent.isolate import Worker


def _pid(x: int) -> tuple[int, int]:
    return os.getpid(), x * 2


def _fail() -> None:
    raise ValueError("bad candidate")


def _crash() -> None:
    os._exit(3)


def _hang() -> None:
    time.sleep(60)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_keeps_one_child_across_jobs(method):
    w = Worker(method)
    try:
        a, b = w.run(_pid, 1, timeout_s=60), w.run(_pid, 2, timeout_s=60)
        assert a.status == b.status == "ok" and a.value[0] == b.value[0] != os.getpid()
        assert (a.value[1], b.value[1], w.started) == (2, 4, 1)
    finally:
        w.close()


def test_worker_replaces_its_child_after_an_error_a_crash_or_a_timeout():
    w = Worker("fork")
    try:
        first = w.run(_pid, 1, timeout_s=30).value[0]
        r = w.run(_fail, timeout_s=30)
        assert r.status == "error" and "bad candidate" in r.error
        second = w.run(_pid, 1, timeout_s=30).value[0]
        assert second != first and w.started == 2
        r = w.run(_crash, timeout_s=30)
        assert r.status == "fault" and r.exitcode == 3
        r = w.run(_hang, timeout_s=0.5)
        assert r.status == "timeout"
        assert w.run(_pid, 3, timeout_s=30).value[1] == 6 and w.started == 4
    finally:
        w.close()


def _start_grandchild_and_hang(path: str) -> None:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(path, "w") as f:
        f.write(str(p.pid))
    time.sleep(60)


def _start_grandchild_and_return(path: str) -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(path, "w") as f:
        f.write(str(p.pid))
    return 7  # returns while the process it started still runs (a pool past its own deadline)


def _gone(pid: int) -> bool:
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of the killed group counts as gone once its parent (init) reaps it
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("fn", [_start_grandchild_and_hang, _start_grandchild_and_return])
def test_a_childs_own_children_do_not_outlive_it(tmp_path, fn) -> None:
    """A timed-out (or finished) isolated child takes the processes it started with it: on 2026-12-04 a
    verifier's worker pool kept computing after `argus tune` had ended."""
    from argus.agent.isolate import run_isolated

    path = str(tmp_path / "pid")
    r = run_isolated(fn, path, timeout_s=3.0)
    assert r.status == ("timeout" if fn is _start_grandchild_and_hang else "ok")
    assert _gone(int(open(path).read()))
