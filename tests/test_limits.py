"""Time and memory budgets of the command line: every oversized or endless request ends promptly with
a clear message and exit 1 (run, build) or 2 (check: unknown), never a hang or exit 3."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from argus import cli
from argus.cli import main
from argus.limits import parse_memory, parse_seconds
from tests.conftest import EXAMPLES

GEMM = str(EXAMPLES / "gemm.arg")
GEMM_TEXT = (EXAMPLES / "gemm.arg").read_text()
DIMS = ["-D", "M=64", "-D", "N=64", "-D", "K=64"]


def run(capsys, *argv: str, limit_s: float = 60.0) -> tuple[int, str, str]:
    t0 = time.monotonic()
    code = main(list(argv))
    assert time.monotonic() - t0 < limit_s, f"took {time.monotonic() - t0:.1f} s"
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def variant(tmp_path: Path, name: str, *pairs: tuple[str, str]) -> str:
    src = GEMM_TEXT
    for old, new in pairs:
        assert old in src
        src = src.replace(old, new)
    p = tmp_path / name
    p.write_text(src)
    return str(p)


def test_check_with_a_huge_fixed_dim_is_a_prompt_unknown(capsys) -> None:
    code, out, _ = run(capsys, "check", GEMM, "-D", "K=1000000000", limit_s=20)
    assert code == 2 and "unknown" in out and "15624998 steps" in out and "leave the dims symbolic" in out
    code, out, _ = run(capsys, "check", GEMM, "-D", "K=1000000000", "--format", "json", limit_s=20)
    assert code == 2 and json.loads(out)["status"] == "unknown"


def test_interpreter_sizes_beyond_the_memory_budget_are_refused_up_front(capsys) -> None:
    code, _, err = run(capsys, "run", GEMM, "--interp", "-D", "M=65536", "-D", "N=65536", "-D", "K=65536",
                       limit_s=30)
    assert code == 1 and "[too-large]" in err and "more than the memory limit" in err


def test_interpreter_work_beyond_the_time_budget_stops_with_an_estimate(capsys) -> None:
    code, _, err = run(capsys, "run", GEMM, "--interp", "-D", "M=4096", "-D", "N=4096", "-D", "K=4096",
                       "--time-limit", "8", limit_s=30)
    assert code == 1 and ("[too-slow]" in err or "time limit of 8 s was reached" in err), err


def test_an_endless_loop_is_stopped_at_the_time_limit(tmp_path: Path, capsys) -> None:
    f = variant(tmp_path, "spin.arg", ("    bm = block_id(0)\n", "    bm = block_id(0)\n"
                                       "    for spin in range(2000000000):\n        pass\n"))
    code, _, err = run(capsys, "run", f, "--interp", *DIMS, "--time-limit", "3", limit_s=20)
    assert code == 1 and "time limit of 3 s was reached" in err and "--time-limit" in err
    code, out, _ = run(capsys, "check", f, limit_s=20)  # the verifier does not walk 2e9 steps either
    assert code == 2 and "fixed trip count of 2000000000 steps" in out


def test_a_check_past_its_time_limit_is_unknown(capsys) -> None:
    code, out, _ = run(capsys, "check", str(EXAMPLES / "moe.arg"), "--time-limit", "1", "--format", "json",
                       limit_s=20)
    j = json.loads(out)
    assert code == 2 and j["status"] == "unknown" and j["diagnostics"][0]["code"] == "limit"
    assert sorted(j) == ["diagnostics", "file", "schema_version", "status"]  # docs/json.md: the error record


def test_reference_allocations(tmp_path: Path, capsys) -> None:
    huge = variant(tmp_path, "huge.arg", ("    C = A @ B", "    C = zeros(10**12)"))
    code, _, err = run(capsys, "run", huge, "--interp", *DIMS)
    assert code == 1 and "huge.arg:" in err and "ran out of memory" in err
    big = variant(tmp_path, "big.arg", ("    C = A @ B", "    C = A @ B + sum(ones(400000000))"))
    code, _, err = run(capsys, "run", big, "--interp", *DIMS, "--memory-limit", "1G")
    assert code == 1 and "memory" in err and "[internal]" not in err


@pytest.mark.parametrize("argv,words", [
    (["run", GEMM, "--interp", *DIMS, "--seed", "-1"], "--seed"),
    (["run", GEMM, "--interp", *DIMS, "--iters", "0"], "--iters"),
    (["check", GEMM, "--time-limit", "-3"], "--time-limit"),
    (["check", GEMM, "--time-limit", "inf"], "--time-limit"),
    (["check", GEMM, "--memory-limit", "12 parsecs"], "--memory-limit"),
    (["check", GEMM, "-D", "K=" + "9" * 5001], "at most 200 characters"),
    (["check", GEMM, "-D", "K=" + "9" * 30], "64 bits"),
    (["check", GEMM, "-D", "K=1e999"], "finite"),
])
def test_bad_command_lines_are_usage_errors(capsys, argv: list[str], words: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("define", ["K=0", "K=3.5", "K=4294967296"])
def test_bad_dims_are_clean_errors(capsys, define: str) -> None:
    code, _, err = run(capsys, "run", GEMM, "--interp", "-D", "M=64", "-D", "N=64", "-D", define)
    assert code == 1 and "[internal]" not in err


def test_files_that_are_not_programs(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "k.arg"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "check", str(fifo), limit_s=20)
    assert code == 1 and "FIFO" in err
    pyfifo = tmp_path / "k.py"  # a .py file is checked the same way before it is imported
    os.mkfifo(pyfifo)
    for cmd in (["check"], ["build"], ["run", "--interp"]):
        code, _, err = run(capsys, cmd[0], str(pyfifo), *cmd[1:], limit_s=20)
        assert code == 1 and "FIFO" in err, cmd
    raw = tmp_path / "latin1.arg"
    raw.write_bytes(GEMM_TEXT.replace("# or", "# \xe9 or").encode("latin-1"))
    code, _, err = run(capsys, "check", str(raw))
    assert code == 1 and "[encoding]" in err and "latin1.arg:" in err


def test_control_characters_in_source_lines_are_escaped(tmp_path: Path, capsys) -> None:
    f = tmp_path / "esc.arg"
    f.write_text("kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n    x = y  # \x1b[2J\x1b]0;owned\x07\n")
    code, _, err = run(capsys, "check", str(f))
    assert code == 1 and "\x1b" not in err and "\x07" not in err and "\\x1b[2J" in err


def test_a_file_of_many_kernels_is_parsed_once(tmp_path: Path, capsys, monkeypatch) -> None:
    body = GEMM_TEXT.split("kernel gemm", 1)[1]
    f = tmp_path / "many.arg"
    f.write_text("".join(f"kernel gemm{i}{body}\n" for i in range(200)))
    import argus.dsl.parser as parser

    calls = []
    real = parser.parse
    monkeypatch.setattr(parser, "parse", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = cli.build_parser().parse_args(["check", str(f), "--no-verify"])
    t0 = time.monotonic()
    assert cli.cmd_check(args) == 0
    assert len(calls) == 1 and time.monotonic() - t0 < 60
    assert capsys.readouterr().out.count("ok (") == 200


def test_limit_values() -> None:
    assert parse_memory("8G") == 8 << 30 and parse_memory("512M") == 512 << 20 and parse_memory("1.5GiB") == 3 << 29
    assert parse_seconds("2.5") == 2.5
    for bad in ("", "-1G", "1K", "nan", "G"):
        with pytest.raises(ValueError):
            parse_memory(bad)
    for bad in ("0", "-1", "nan", "inf", "1e9"):
        with pytest.raises(ValueError):
            parse_seconds(bad)


def test_verifier_reports_quoting_source_lines_are_escaped_too(tmp_path: Path, capsys) -> None:
    """A violation report quotes its source lines (argus.analysis renders them): the CLI escapes them."""
    evil = "  # \x1b[31m\x9b2J\n"
    f = variant(tmp_path, "bad.arg", ("   # out-of-range elements skipped\n", evil),
                ("pipeline(cdiv(K, BK), stages=STAGES)", "pipeline(cdiv(K, BK) - 1, stages=STAGES)"))
    code, out, err = run(capsys, "check", f, "--no-replay")
    assert code == 1 and "\\x1b[31m" in out + err  # the line was quoted...
    assert "\x1b" not in out + err and "\x9b" not in out + err  # ...escaped


def test_every_line_the_command_prints_is_escaped(tmp_path: Path, capsys) -> None:
    """Even text printed outside the diagnostics renderer (here: the file name in the summary line)."""
    f = tmp_path / "k\x1b]0;owned\x07.arg"
    f.write_text(GEMM_TEXT)
    code, out, _ = run(capsys, "check", str(f), "--no-verify")
    assert code == 0 and "\\x1b]0;owned\\x07.arg" in out and "\x1b" not in out and "\x07" not in out
