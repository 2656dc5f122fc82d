"""--resume: a run interrupted at any point continues without losing or repeating a step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from argus.agent.loop import tune
from argus.agent.record import RecordError
from argus.cli import main
from tests.agent import helpers as h
from tests.conftest import ROOT


class Boom(Exception):
    pass


def steps_of(out) -> list[dict]:
    return [r for r in h.records(out / "record.jsonl") if r["kind"] == "step"]


def trajectory(out) -> list[tuple]:
    return [(s["step"], s["proposal"]["action"], s["key"], s["status"]) for s in steps_of(out)]


def test_resume_after_an_exception_matches_an_uninterrupted_run(tmp_path):
    ref = tmp_path / "ref"
    tune(h.config(ref, budget=5))

    out = tmp_path / "cut"

    def explode(rec):
        if rec["step"] == 3:
            raise Boom

    with pytest.raises(Boom):
        tune(h.config(out, budget=5), on_step=explode)
    assert [s["step"] for s in steps_of(out)] == [0, 1, 2, 3]
    with pytest.raises(RecordError, match="seed"):
        tune(h.config(out, budget=5, seed=9, resume=True))
    res = tune(h.config(out, budget=5, resume=True))
    assert res.steps == 6
    # No step lost or repeated, and the same choices as without the interruption (the planner's state
    # is rebuilt from the record).
    assert trajectory(out) == trajectory(ref)


def test_resume_after_a_kill(tmp_path):
    out = tmp_path / "killed"
    argv = ["tune", str(h.GEMM), "--budget", "6", "--out", str(out), "--verifier", "interp", "--evaluator", "model",
            "--check-shapes", "64,64,64;72,56,40", "--shapes", "M=4096,N=4096,K=4096"]
    argv += [x for k, v in h.NAIVE.items() for x in ("-D", f"{k}={v}")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "argus.cli", *argv], cwd=str(tmp_path), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rec = out / "record.jsonl"
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            if rec.exists() and len(rec.read_text().splitlines()) >= 4:  # header + steps 0..2
                break
            time.sleep(0.05)
        else:
            pytest.fail("the tune subprocess did not record 3 steps in time")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its referee children, mid-step
        proc.wait(10)
    done = len(steps_of(out))
    assert 3 <= done <= 6
    with open(rec, "a") as f:  # and a line torn by the kill
        f.write('{"kind": "step", "step": 99, "stat')
    assert main([*argv, "--resume"]) == 0
    steps = steps_of(out)
    assert [s["step"] for s in steps] == list(range(7))
    keys = [s["key"] for s in steps if s["status"] == "ok"]
    assert len(keys) == len(set(keys))
