"""The run record under damage and contention: repaired where a kill explains it, refused with the
line and the reason otherwise, never a lost complete step, never two runs at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from argus.agent.loop import tune
from argus.agent.record import RecordError, RunRecord
from argus.cli import main
from tests.agent import helpers as h


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A complete 2-step run to damage (copied per test)."""
    out = tmp_path_factory.mktemp("run") / "run"
    tune(h.config(out, budget=2))
    return out / "record.jsonl"


def copy_of(finished: Path, tmp_path: Path) -> Path:
    rec = tmp_path / "run" / "record.jsonl"
    rec.parent.mkdir()
    rec.write_bytes(finished.read_bytes())
    return rec


def lines(rec: Path) -> list[bytes]:
    return rec.read_bytes().splitlines()


def resume_cli(rec: Path, capsys) -> tuple[int, str]:
    argv = ["tune", str(h.GEMM), "--budget", "2", "--out", str(rec.parent), "--verifier", "interp", "--evaluator",
            "model", "--check-shapes", "64,64,64;72,40,56", "--shapes", "M=4096,N=4096,K=4096", "--resume"]
    argv += [x for k, v in h.NAIVE.items() for x in ("-D", f"{k}={v}")]
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_complete_last_step_without_its_newline_is_kept(finished: Path, tmp_path: Path) -> None:
    rec = copy_of(finished, tmp_path)
    rec.write_bytes(rec.read_bytes().rstrip(b"\n"))
    header = json.loads(lines(rec)[0])
    r = RunRecord.resume(rec, header)
    try:
        assert [s["step"] for s in r.steps] == [0, 1, 2]
        assert rec.read_bytes().endswith(b"}\n")  # repaired on disk, nothing dropped
        r.append({**r.steps[-1], "step": 3})
    finally:
        r.close()
    assert [json.loads(x)["step"] for x in lines(rec)[1:]] == [0, 1, 2, 3]


def test_a_torn_last_line_is_dropped(finished: Path, tmp_path: Path) -> None:
    rec = copy_of(finished, tmp_path)
    with open(rec, "ab") as f:
        f.write(b'{"kind": "step", "step": 3, "stat\xff')
    r = RunRecord.resume(rec, json.loads(lines(rec)[0]))
    r.close()
    assert [s["step"] for s in r.steps] == [0, 1, 2] and rec.read_bytes() == finished.read_bytes()


@pytest.mark.parametrize("damage,words", [
    (lambda ls: [b'{"kind": "run", "format": 1, "seed": "zero"'] + ls[1:], "damaged header"),
    (lambda ls: [b"[1, 2, 3]"] + ls[1:], "damaged header"),
    (lambda ls: [ls[0].replace(b'"seed": 0', b'"seed": "0"')] + ls[1:], "field 'seed' is str"),
    (lambda ls: [ls[0].replace(b'"planner"', b'"plannr"')] + ls[1:], "missing field 'planner'"),
    (lambda ls: ls[:2] + [ls[2][:40] + b"\xc3\x28" + ls[2][40:]] + ls[3:], "not UTF-8"),
    (lambda ls: ls[:2] + [ls[2].replace(b'"status": ', b'"stat": ')] + ls[3:], "missing field 'status'"),
    (lambda ls: ls[:2] + [ls[2].replace(b'"step": 1,', b'"step": "1",')] + ls[3:], "field 'step' is str"),
    (lambda ls: ls[:2] + [b"{not json"] + ls[3:], "not a JSON object"),
    (lambda ls: ls[:2] + [b'{"kind": "step", "step": 1, "n": ' + b"9" * 5001 + b"}"] + ls[3:], "not a JSON object"),
], ids=["torn-header", "header-not-object", "header-wrong-type", "header-missing-field", "invalid-utf8",
        "step-missing-field", "step-wrong-type", "step-not-json", "step-5001-digits"])
def test_damage_is_refused_with_the_line_and_reason(finished: Path, tmp_path: Path, capsys, damage, words) -> None:
    rec = copy_of(finished, tmp_path)
    rec.write_bytes(b"\n".join(damage(lines(rec))) + b"\n")
    before = rec.read_bytes()
    code, err = resume_cli(rec, capsys)
    assert code == 1 and words in err and "Traceback" not in err, err
    assert rec.read_bytes() == before  # refused, not "repaired" by dropping steps


def test_two_runs_cannot_share_a_record(finished: Path, tmp_path: Path, capsys) -> None:
    rec = copy_of(finished, tmp_path)
    holder = RunRecord.resume(rec, json.loads(lines(rec)[0]))
    try:
        with pytest.raises(RecordError, match="in use by another argus tune"):
            RunRecord.resume(rec, json.loads(lines(rec)[0]))
        code, err = resume_cli(rec, capsys)
        assert code == 1 and "in use by another argus tune" in err
    finally:
        holder.close()
    again = RunRecord.resume(rec, json.loads(lines(rec)[0]))  # free again once released
    again.close()


def test_a_record_that_is_a_fifo_or_a_link_is_refused(tmp_path: Path) -> None:
    import os

    d = tmp_path / "run"
    d.mkdir()
    os.mkfifo(d / "record.jsonl")
    with pytest.raises(RecordError, match="FIFO"):
        RunRecord.resume(d / "record.jsonl", {})
    with pytest.raises(RecordError, match="already holds a run"):
        RunRecord.create(d / "record.jsonl", {})


def test_records_carry_schema_version_and_resume_refuses_another(finished: Path, tmp_path: Path) -> None:
    from argus.records import SCHEMA_VERSION

    rec = copy_of(finished, tmp_path)
    assert all(json.loads(x)["schema_version"] == SCHEMA_VERSION for x in lines(rec))
    header = json.loads(lines(rec)[0])
    rest = rec.read_bytes().split(b"\n", 1)[1]
    rec.write_bytes(json.dumps({**header, "schema_version": SCHEMA_VERSION + 1}).encode() + b"\n" + rest)
    with pytest.raises(RecordError, match="schema_version"):
        RunRecord.resume(rec, header)
