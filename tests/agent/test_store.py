"""Learning across runs: the store's file, its priors, and a second run that finds the best sooner."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from argus.agent.loop import Tuner, tune
from argus.agent.prompt import build_prompt
from argus.agent.store import Priors, Store, contrastive, entries_from_record, similarity
from argus.cli import main
from tests.agent import helpers as h

SIG = {"family": "gemm", "kernel": "gemm", "instr": "mma.sync", "tile": [64, 64, 32], "stages": 1,
       "warp_specialised": False, "copy": "async", "persistent": False, "scale": 36}


def _entry(run: str, step: int, action: str, effect: float | None, **before) -> dict:
    return {"run": run, "step": step, "family": "gemm", "kernel": "gemm", "action": action, "effect": effect,
            "before": {**SIG, **before}, "time_s": [1e-3], "parent_time_s": [2e-3], "status": "ok" if effect
            is not None else "violated", "verify": "verified", "estimate": True, "diff": "-a\n+b"}


def _add(path: str, run: str) -> None:
    Store(path).add([_entry(run, i, "x:y", 0.1) for i in range(1, 21)])


def test_store_writes_atomically_under_a_lock_and_sets_damage_aside(tmp_path):
    path = tmp_path / "sub" / "store.json"
    s = Store(path)
    assert s.load() == []
    s.add([_entry("r1", 1, "wgmma:wgmma", 0.5)])
    s.add([_entry("r1", 1, "wgmma:wgmma", 0.5)])  # the same (run, step) twice: kept once
    assert len(s.load()) == 1 and json.loads(path.read_text())["schema"] == 1
    procs = [mp.get_context("fork").Process(target=_add, args=(str(path), f"p{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert len(s.load()) == 1 + 4 * 20  # no writer lost another's entries
    assert not [f for f in path.parent.iterdir() if f.name.startswith(".tune-store-")]  # no temporaries left
    path.write_text('{"schema": 1, "entries": [')  # a torn or damaged file is never trusted ...
    assert s.load() == []
    s.add([_entry("r2", 1, "wgmma:wgmma", 0.2)])  # ... it is set aside and a fresh store begins
    assert len(s.load()) == 1 and (tmp_path / "sub" / "store.json.corrupt").exists()


def test_priors_weigh_similar_kernels_and_count_failures():
    entries = [_entry("a", 1, "wgmma:wgmma", 0.6), _entry("a", 2, "wgmma:wgmma", 0.4, tile=[128, 128, 64]),
               _entry("b", 1, "swizzle:128", None), _entry("b", 2, "swizzle:128", None),
               {**_entry("c", 1, "wgmma:wgmma", -0.9), "family": "attention"}]
    pr = Priors(entries, "gemm")
    w = pr.score("wgmma:wgmma", SIG)
    assert w.wins == 2 and w.fails == 0 and 0.2 < w.value < 0.5  # shrunk toward 0; attention ignored
    assert pr.score("swizzle:128", SIG).value < 0 and pr.score("swizzle:128", SIG).fails == 2
    assert pr.score("never:tried", SIG) is None
    assert Priors(entries, "gemm", exclude_run="a").score("wgmma:wgmma", SIG) is None
    assert similarity(SIG, SIG) == 1.0 and similarity(SIG, {**SIG, "family": "moe"}) == 0.0
    assert similarity(SIG, {**SIG, "instr": "wgmma"}) < similarity(SIG, {**SIG, "scale": 37}) < 1.0
    pairs = contrastive(entries, "gemm", SIG)
    assert [p["effect"] for p in pairs] == [0.6, 0.4]


def test_best_path_is_the_chain_to_the_largest_summed_gain_of_the_most_similar_run():
    def e(run, step, parent, action, effect, **before):
        return {**_entry(run, step, action, effect, **before), "parent_step": parent}
    # run a: 1 (+0.5) is the largest single gain, but 2 -> 3 -> 4 sums to more
    a = [e("a", 1, 0, "p:one", 0.5), e("a", 2, 0, "p:two", 0.2), e("a", 3, 2, "p:three", 0.3),
         e("a", 4, 3, "p:four", 0.4), e("a", 5, 4, "p:five", None)]
    path = Priors(a, "gemm").best_path(SIG)
    assert [x["action"] for x in path.steps] == ["p:two", "p:three", "p:four"] and abs(path.gain - 0.9) < 1e-9
    # a run on a less similar start loses to a similar one, whatever its gain
    far = [e("b", 1, 0, "q:one", 2.0, instr="wgmma", warp_specialised=True, stages=4)]
    assert Priors(a + far, "gemm").best_path(SIG).run == "a"
    assert Priors(far, "gemm").best_path(SIG) is None
    # entries without parent links (stores before 2026-12-02) give no path
    assert Priors([_entry("c", 1, "p:one", 0.5)], "gemm").best_path(SIG) is None


def test_every_step_goes_to_the_store_and_the_prompt_shows_earlier_pairs(tmp_path):
    store = tmp_path / "store.json"
    res = tune(h.config(tmp_path / "a", budget=2, store=str(store), hidden_shapes=0, scale_shapes=0))
    got = Store(store).load()
    assert [e["step"] for e in got] == [1, 2] and all(e["family"] == "gemm" and e["before"] for e in got)
    ok = [e for e in got if e["status"] == "ok"]
    assert ok and all(e["effect"] is not None and e["time_s"] and e["parent_time_s"] and e["verify"] for e in ok)
    assert entries_from_record(res.record)[-1]["step"] == 2  # the same entries from the record file
    # a second run reads them: contrastive pairs with measured times in the anthropic prompt
    t = Tuner(h.config(tmp_path / "b", budget=0, store=str(store), hidden_shapes=0, scale_shapes=0))
    t.run()
    ctx = t.context(1)
    assert len(ctx.priors) == 2 and ctx.lessons
    prompt = build_prompt(ctx)
    assert "## Contrastive pairs from earlier runs" in prompt and " us -> " in prompt and "FASTER is" in prompt


def test_cli_store_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_TUNE_STORE", str(tmp_path / "env-store.json"))
    base = ["tune", str(h.GEMM), "--budget", "1", "--evaluator", "model", "--verifier", "interp",
            "--check-shapes", "64,64,64", "--shapes", "M=512,N=512,K=512"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert len(Store(tmp_path / "env-store.json").load()) == 1
    assert main([*base, "--out", str(tmp_path / "b"), "--store", str(tmp_path / "s.json")]) == 0
    assert len(Store(tmp_path / "s.json").load()) == 1
    assert main([*base, "--out", str(tmp_path / "c"), "--no-store"]) == 0
    assert len(Store(tmp_path / "env-store.json").load()) == 1


def _steps_to(res, target: float) -> int | None:
    steps = [r for r in h.records(res.record) if r["kind"] == "step"]
    return next((r["step"] for r in steps if r["reward"] is not None and r["reward"] >= target - 1e-6), None)


@pytest.mark.slow
def test_a_second_run_on_a_related_kernel_reaches_the_first_runs_best_sooner(tmp_path):
    store = str(tmp_path / "store.json")
    fast = dict(hidden_shapes=0, scale_shapes=0)
    first = tune(h.config(tmp_path / "first", budget=10, store=store, **fast))
    related = ({"M": 2048, "N": 8192, "K": 4096},)  # the same naive GEMM at another shape
    second = tune(h.config(tmp_path / "second", budget=10, store=store, targets=related, **fast))
    alone = tune(h.config(tmp_path / "alone", budget=10, store=None, targets=related, **fast))
    # rewards at another shape are relative to that shape's start: the target is 97% of the first run's best
    target = 0.97 * first.best_reward
    n_first = _steps_to(first, target)
    n_second, n_alone = _steps_to(second, target), _steps_to(alone, target)
    assert n_second is not None and n_second < n_first, (n_second, n_first)
    assert n_alone is None or n_second < n_alone, (n_second, n_alone)
    steps = [r for r in h.records(second.record) if r["kind"] == "step"]
    # the store ordered the search: the first run's best path replayed first
    assert steps[1]["proposal"]["reasoning"].startswith("replaying the best path"), steps[1]["proposal"]["reasoning"]
    replayed = [s for s in steps if (s["proposal"] or {}).get("meta", {}).get("replay")]
    assert replayed and [s["proposal"]["meta"]["replay"] for s in replayed] == list(range(1, len(replayed) + 1))
