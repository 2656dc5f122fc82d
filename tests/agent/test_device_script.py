"""benchmarks/tune/device_tune.py: its CPU path (--dry) end to end, its arguments, and its naive starts."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from argus.agent.verify import verify
from argus.ir.build import build_file
from tests.agent.helpers import STARTS

SCRIPT = STARTS.parent / "device_tune.py"


def load_script():
    spec = importlib.util.spec_from_file_location("device_tune", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["device_tune"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_arguments_are_checked():
    dt = load_script()
    for bad in (["--families", "gemm,conv"], ["--minutes", "0"], ["--parallel", "0"]):
        with pytest.raises(SystemExit):
            dt.parse_args(bad)
    a = dt.parse_args(["--families", "moe", "--budget", "12"])
    assert a.families == ["moe"] and a.budget == 12 and a.minutes == 9.0
    cmd = dt.tune_command("moe", dt.parse_args(["--dry", "--store", "s.json"]), STARTS, 120.0)
    assert cmd[cmd.index("--kernel") + 1] == "moe_up" and cmd[cmd.index("--evaluator") + 1] == "model"
    gpu = dt.tune_command("gemm", dt.parse_args(["--store", "s.json"]), STARTS, 120.0)
    assert gpu[gpu.index("--evaluator") + 1] == "gpu" and gpu[gpu.index("--shapes") + 1].count(";") == 1


def test_resume_continues_only_a_recorded_run(tmp_path):
    """--resume (a device command is limited to 10 minutes) passes argus tune's --resume to a family with a
    record in --out, and starts the others afresh."""
    dt = load_script()
    args = dt.parse_args(["--resume", "--no-compare", "--store", "s.json"])
    assert args.no_compare
    (tmp_path / "moe").mkdir()
    (tmp_path / "moe" / "record.jsonl").write_text("{}\n")
    assert "--resume" in dt.tune_command("moe", args, tmp_path, 120.0)
    assert "--resume" not in dt.tune_command("gemm", args, tmp_path, 120.0)
    assert "--resume" not in dt.tune_command("moe", dt.parse_args(["--store", "s.json"]), tmp_path, 120.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemm_naive.arg", "flash_attention_naive.arg", "moe_up_naive.arg"])
def test_every_naive_start_verifies(name):
    out = verify(build_file(STARTS / name))
    assert out.status == "verified", out.describe()


@pytest.mark.slow
def test_the_dry_run_tunes_all_three_families_and_compares(tmp_path):
    dt = load_script()
    assert dt.main(["--dry", "--out", str(tmp_path), "--budget", "1", "--minutes", "12"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["family"]: r for r in summary["rows"]}
    assert set(rows) == {"gemm", "attention", "moe"} and summary["exit_codes"] == {"gemm": 0, "attention": 0, "moe": 0}
    for fam, r in rows.items():
        assert r["estimate"] and r["evaluations"] == 1 and r["tuned_ms"] > 0 and r["hand_ms"] > 0
        assert r["tuned_vs_hand"] > 0 and r["tuned_vs_start"] >= 0.999  # the best is never worse than the start
        for f in ("record.jsonl", "report.md", "reward.png", "tune.log"):
            assert (tmp_path / fam / f).is_file(), (fam, f)
    assert "| moe | T=128" in (tmp_path / "summary.md").read_text()
    store = json.loads((tmp_path / "tune-store.json").read_text())
    assert {e["family"] for e in store["entries"]} == {"gemm", "attention", "moe"}
