"""The JSON the commands emit has exactly the keys docs/json.md documents, and a schema_version."""

from __future__ import annotations

import json
import re

import pytest

from argus.cli import main
from argus.records import SCHEMA_VERSION
from tests.conftest import EXAMPLES, ROOT

DOC = ROOT / "docs" / "json.md"


def documented() -> dict[str, list[str]]:
    """Record name -> its keys, from the tables between `<!-- schema: NAME -->` and `<!-- end schema -->`."""
    text = DOC.read_text()
    out = {}
    for m in re.finditer(r"<!-- schema: ([\w.]+) -->\n(.*?)<!-- end schema -->", text, re.S):
        out[m.group(1)] = re.findall(r"^\| `(\w+)` \|", m.group(2), re.M)
    return out


SCHEMAS = documented()


def keys(name: str, obj: dict) -> None:
    # the same keys, in any order (JSON objects are unordered; tune's step 0 orders them differently)
    assert sorted(obj) == sorted(SCHEMAS[name]), f"{name}: emitted {sorted(obj)}, documented {sorted(SCHEMAS[name])}"
    if "schema_version" in SCHEMAS[name]:
        assert obj["schema_version"] == SCHEMA_VERSION


def emit(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_doc_has_every_record():
    assert set(SCHEMAS) >= {"span", "diagnostic", "error", "check.kernel", "check.check", "check.finding",
                            "check.counterexample", "check.replay", "check.lowered", "check.layer", "check.file",
                            "build.kernel", "build.function", "build.file", "run", "run.output", "run.first_wrong",
                            "run.timing", "tune.header", "tune.step"}
    assert all(v and len(set(v)) == len(v) for v in SCHEMAS.values())


def test_check_records(capsys):
    code, j = emit(capsys, "check", str(EXAMPLES / "gemm.arg"))
    assert code == 0
    keys("check.kernel", j)
    for c in j["checks"]:
        keys("check.check", c)
    keys("check.tested", j["tested"])
    # three shapes, then the irregular one again on all-negative and on all-positive inputs
    assert j["tested"]["ok"] is True and len(j["tested"]["shapes"]) == 5
    assert [t["summary"].split(":")[0] for t in j["tested"]["shapes"][3:]] == ["all inputs negative",
                                                                               "all inputs positive"]
    for t in j["tested"]["shapes"]:
        keys("check.tested.shape", t)
    code, j = emit(capsys, "check", str(EXAMPLES / "bugs" / "oob_shared_stage_plus_one.arg"))
    assert code == 1 and j["findings"]
    keys("check.kernel", j)
    for f in j["findings"]:
        keys("check.finding", f)
        keys("span", f["span"])
        keys("check.counterexample", f["counterexample"])
        keys("check.replay", f["replay"])
    code, j = emit(capsys, "check", str(EXAMPLES / "gemm.arg"), "--no-verify")
    keys("check.lowered", j)
    code, j = emit(capsys, "check", str(EXAMPLES / "gemm.arg"), "-D", "K=1000000000")  # not attempted: unknown
    assert code == 2 and j["status"] == "unknown" and j["notes"]
    keys("check.kernel", j)
    for c in j["checks"]:
        keys("check.check", c)


@pytest.mark.slow
def test_specialized_check_record(capsys):
    # --time-limit: on CI's 2 cores this shares them with the other test worker (alone: 3 min with 2 cores)
    code, j = emit(capsys, "check", str(EXAMPLES / "gemm_ws.arg"), "--kernel", "gemm_ws", "--no-test", "--no-replay",
                   "--time-limit", "900")
    assert code == 0 and j["status"] == "verified"
    keys("check.specialized", j)
    # gemm_ws.arg's specialize rules: 3 layout routes and 12 split-K routes (layers), 4 routes to gemm_ws_decode,
    # 3 tile sets
    assert len(j["specializations"]) == 22
    for sp in j["specializations"]:
        keys("check.specialization_layer" if "layer" in sp else "check.specialization", sp)
        assert set(sp["specialize"]) == ({"line", "params", "kernel"} if "kernel" in sp["specialize"]
                                         else {"line", "params"})
    assert sum(sp["specialize"].get("kernel") == "gemm_ws_decode" == sp["kernel"] for sp in j["specializations"]) == 4


def test_limit_record(capsys):
    code, j = emit(capsys, "check", str(EXAMPLES / "moe.arg"), "--time-limit", "1")
    assert code == 2 and j["status"] == "unknown"
    keys("error", j)
    keys("diagnostic", j["diagnostics"][0])


def test_multi_kernel_check_record(capsys):
    code, j = emit(capsys, "check", str(EXAMPLES / "moe.arg"), "--no-verify", "-D", "BM=64")
    assert code == 0
    keys("check.file", j)
    assert [r.get("kernel", r.get("layer")) for r in j["kernels"]] == ["moe_up", "moe_down", "moe_combine", "moe"]
    for r in j["kernels"][:3]:
        keys("check.lowered", r)
    keys("check.layer", j["kernels"][3])


def test_error_record(tmp_path, capsys):
    bad = tmp_path / "bad.arg"
    bad.write_text("kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n    x = y\n")
    for cmd in (["check"], ["build"], ["run", "--interp", "-D", "N=4"]):
        code, j = emit(capsys, cmd[0], str(bad), *cmd[1:])
        assert code == 1
        keys("error", j)
        keys("diagnostic", j["diagnostics"][0])
        keys("span", j["diagnostics"][0]["span"])


def test_build_records(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    code, j = emit(capsys, "build", str(EXAMPLES / "gemm.arg"), "-D", "MMA=mma.sync", "--arch", "sm_80", "--emit",
                   "ptx", "-o", str(tmp_path / "g.ptx"))
    assert code == 0
    keys("build.kernel", j)
    for f in j["functions"]:
        keys("build.function", f)
    code, j = emit(capsys, "build", str(EXAMPLES / "moe.arg"), "--arch", "sm_90a", "--emit", "cuda", "-o",
                   str(tmp_path / "moe"), "-D", "BM=64", "-D", "BN=64", "-D", "STAGES=2", "-D", "CONSUMERS=1")
    keys("build.file", j)
    for r in j["kernels"]:
        keys("build.kernel", r)


def test_run_record(capsys):
    code, j = emit(capsys, "run", str(EXAMPLES / "gemm.arg"), "--interp", "-D", "M=70", "-D", "N=40", "-D", "K=24")
    assert code == 0 and j["target"] == "interp" and j["timing"] is None and j["arch"] is None
    keys("run", j)
    keys("run.output", j["outputs"][0])
    code, j = emit(capsys, "run", str(EXAMPLES / "bugs" / "unwritten_half_n.arg"), "--interp", "-D", "M=64",
                   "-D", "N=256", "-D", "K=64", "--seed", "1")
    assert code == 1 and not j["ok"]
    keys("run", j)
    keys("run.first_wrong", j["outputs"][0]["first_wrong"])


@pytest.mark.gpu
def test_run_bench_record(capsys):
    from tests.runtime.test_driver_gpu import ARCH

    if ARCH is None:
        pytest.skip("no CUDA GPU / driver on this machine")
    code, j = emit(capsys, "run", str(EXAMPLES / "gemm.arg"), "--bench", "-D", "M=1024", "-D", "N=1024",
                   "-D", "K=1024", "--iters", "5")
    assert code == 0 and j["target"] == "gpu" and j["arch"]
    keys("run", j)
    keys("run.timing", j["timing"])


def test_tune_record(tmp_path, capsys):
    out = tmp_path / "tune"
    argv = ["tune", str(EXAMPLES / "gemm.arg"), "--budget", "1", "--out", str(out), "--verifier", "interp",
            "--evaluator", "model", "--check-shapes", "64,64,64", "--shapes", "M=4096,N=4096,K=4096",
            "-D", "BM=64", "-D", "BN=64", "-D", "STAGES=1", "-D", "MMA=mma.sync"]
    assert main(argv) == 0
    capsys.readouterr()
    lines = [json.loads(ln) for ln in (out / "record.jsonl").read_text().splitlines()]
    keys("tune.header", lines[0])
    assert len(lines) == 3
    for step in lines[1:]:
        keys("tune.step", step)


def test_an_executable_layer_record(capsys):
    code, j = emit(capsys, "check", str(EXAMPLES / "softmax.arg"), "--kernel", "softmax_long", "--no-replay")
    assert code == 0
    keys("check.layer_calls", j)
    keys("check.composition", j["composition"])
    assert j["status"] == "verified" and [c["kernel"] for c in j["calls"]] == ["softmax_stats", "softmax_normalize"]
    for c in j["calls"]:
        keys("check.kernel", c)

