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
