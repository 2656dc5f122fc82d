"""The tune loop end to end on the CPU (interpreter + cost model), the built-in planner, and the CLI."""

from __future__ import annotations

import json

import pytest

from argus.agent.gate import build
from argus.agent.loop import Tuner, tune
from argus.agent.planners import Attempt, Proposal
from argus.agent.planners.builtin import BuiltinPlanner
from argus.agent.program import Edit
from argus.cli import main
from argus.interp.run import run_interp
from tests.agent import helpers as h


def test_tune_from_a_naive_gemm(tmp_path):
    lines: list[str] = []
    res = tune(h.config(tmp_path / "run", budget=8), progress=lines.append)
    recs = h.records(res.record)
    assert recs[0]["kind"] == "run" and recs[0]["estimate"] is True
    steps = [r for r in recs if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(9))
    assert steps[0]["reward"] == 0.0 and steps[0]["status"] == "ok"
    # Learned something: several evaluated improvements, the best well above the start.
    assert res.best_reward > 0.9 and sum(1 for s in steps if (s["reward"] or 0) > 0) >= 3
    for s in steps:  # every step carries what the issue asks to record
        for key in ("proposal", "verify", "compile", "evaluation", "status", "reward", "planner", "attempts"):
            assert key in s
        assert s["estimate"] is True
    ok = [s for s in steps if s["status"] == "ok"]
    assert all(s["verify"]["source"] in ("frontend+interp", "argus.analysis+interp") for s in ok)
    assert all(t["estimate"] for s in ok for t in s["evaluation"]["timings"])
    assert all(s["diagnosis"] and s["diagnosis"][0]["signal"] == "roofline" for s in ok)
    # Progress: one line per step with the best and its ratio to the library, marked as estimates.
    # (After one line saying what the run does: kernel, family, shapes, budget.)
    assert lines[0].startswith("tuning kernel 'gemm'") and "budget 8" in lines[0]
    lines = lines[1:]
    assert len(lines) == 9 and all("est." in ln and "best" in ln for ln in lines)
    assert "library est." in lines[-1]
    # Outputs: a standalone best kernel that is correct, a report and a plot.
    best = res.best_path.read_text()
    assert best.startswith("# Tuned by `argus tune`")
    k = build(res.best)
    assert run_interp(k, {"M": 100, "N": 72, "K": 40}, seed=5).ok
    report = res.report.read_text()
    assert "estimate" in report and "## Key steps" in report and "reward.png" in report
    assert h.png_size(res.plot) == (720, 400)


def test_builtin_planner_is_deterministic_and_repairs(tmp_path):
    cfg = h.config(tmp_path / "a", budget=0)
    t = Tuner(cfg)
    t.run()
    ctx = t.context(1)
    p1, p2 = BuiltinPlanner().propose(ctx), BuiltinPlanner().propose(ctx)
    assert p1 == p2 and p1.action and p1.parent == t.start.key
    assert "mma-sync-on-hopper" in p1.reasoning or "diagnosis" in p1.reasoning
    # A swizzle the rows cannot hold: the repair raises BK (or lowers the swizzle), keeping the edit.
    bad = Proposal((Edit("rewrite", name="swizzle", args={"bytes": 128}),), action="swizzle-128:swizzle 128",
                   technique="swizzle-128", parent=t.start.key)
    msg = "verifier (frontend): line 19: [swizzle] swizzle=128 needs rows of a multiple of 128 bytes; " \
          "this buffer's rows are 64 bytes"
    fix = BuiltinPlanner().repair(ctx, [Attempt(bad, "violated", msg)])
    assert fix is not None and fix.edits[0] == bad.edits[0] and fix.edits[1].args == {"BK": 64}
    assert BuiltinPlanner().repair(ctx, [Attempt(bad, "violated", "[race] two threads ...")]) is None


def test_cli_tune(tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["tune", str(h.GEMM), "--budget", "2", "--out", str(out), "--verifier", "interp", "--evaluator", "model",
            "--check-shapes", "64,64,64;72,40,56", "--shapes", "M=4096,N=4096,K=4096"]
    argv += [x for k, v in h.NAIVE.items() for x in ("-D", f"{k}={v}" if k != "MMA" else f'{k}="{v}"')]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "step   2/2" in text and "est." in text and "wrote" in text
    head = json.loads((out / "record.jsonl").read_text().splitlines()[0])
    assert head["targets"] == [{"M": 4096, "N": 4096, "K": 4096}]
    assert main(argv) == 1  # the folder holds a run: refuse to overwrite without --resume
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("extra,err", [(["--shapes", "1,2"], "give 3 sizes"), (["-D", "NOPE=3"], "NOPE"),
                                       (["--budget", "-1"], "budget"), (["--seed", "-1"], "seed"),
                                       (["--timeout", "nan"], "timeout"), (["--memory-limit", "lots"], "memory"),
                                       (["--out", "/dev/null"], "not a folder")])
def test_cli_tune_rejects_bad_arguments(tmp_path, capsys, extra, err):
    try:
        code = main(["tune", str(h.GEMM), "--out", str(tmp_path / "x"), *extra])
    except SystemExit as e:  # argparse's own checks
        code = e.code
    assert code == 2
    assert err in capsys.readouterr().err


def _step(n: int, reward: float | None, verdict: str) -> dict:
    return {"step": n, "reward": reward, "verify": {"status": verdict}}


def test_an_unproved_kernel_is_not_crowned_over_a_proved_one_within_2_percent():
    import math

    from argus.agent.loop import pick_best

    steps = [_step(0, 0.0, "verified"), _step(1, 0.30, "verified"), _step(2, 0.30 + math.log(1.019), "unknown"),
             _step(3, None, "violated")]
    assert pick_best(steps)["step"] == 1
    steps.append(_step(4, 0.30 + math.log(1.05), "unknown"))  # clearly faster: it wins, reported as unproved
    assert pick_best(steps)["step"] == 4
    assert pick_best([_step(0, 0.0, "unknown"), _step(1, 0.1, "unknown")])["step"] == 1


def test_a_time_limit_shortens_the_budget_planners_pace_by(tmp_path):
    """Under a time limit the planner sees the evaluations the run will get at its steps' mean duration,
    not the nominal budget (the built-in planner starts refining its best program halfway through it)."""
    import time as _time

    from argus.agent.loop import Tuner
    tuner = Tuner(h.config(tmp_path / "run", budget=48, time_limit_s=100.0))
    assert tuner.expected_budget(5) == 48  # not started: the budget
    tuner.record.steps.extend([{"seconds": 0.0}] + [{"seconds": 10.0}] * 4)
    tuner._run_t0 = _time.monotonic() - 40.0  # 40 s spent, 60 s left: 6 more steps of 10 s
    assert tuner.expected_budget(5) in (9, 10)
    tuner._run_t0 = _time.monotonic() - 400.0  # past the limit: no fewer than the step at hand
    assert tuner.expected_budget(5) == 5
