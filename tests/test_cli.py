"""The `argus` command line: exit codes, output formats, help text, and never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from argus.cli import main
from tests.conftest import EXAMPLES, ROOT

GEMM = str(EXAMPLES / "gemm.arg")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_ok(capsys):
    code, out, _ = run(capsys, "check", GEMM)
    assert code == 0 and "kernel 'gemm': verified" in out
    code, out, _ = run(capsys, "check", GEMM, "--no-verify")
    assert code == 0 and "kernel 'gemm' ok" in out and "not verified" in out


def test_check_emit_ir(capsys):
    code, out, _ = run(capsys, "check", GEMM, "--emit-ir", "-D", "MMA=mma.sync")
    assert code == 0 and "wait_group(1)" in out and "instr='mma.sync'" in out


def test_check_error_text_and_json(tmp_path, capsys):
    bad = tmp_path / "bad.arg"
    bad.write_text("kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n    x = y\n")
    code, _, err = run(capsys, "check", str(bad))
    assert code == 1
    assert err.splitlines()[0] == f"{bad}:3:9: error: undefined name 'y' [undefined-name]"
    assert "^" in err and "Traceback" not in err
    code, out, _ = run(capsys, "check", str(bad), "--format", "json")
    j = json.loads(out)
    assert code == 1 and j["status"] == "error"
    (d,) = j["diagnostics"]
    assert d["code"] == "undefined-name" and d["span"]["line"] == 3 and d["span"]["col"] == 9


def test_check_json_ok(capsys):
    code, out, _ = run(capsys, "check", GEMM, "--format", "json")
    j = json.loads(out)
    assert code == 0 and j["status"] == "verified" and j["findings"] == []
    code, out, _ = run(capsys, "check", GEMM, "--format", "json", "--no-verify")
    assert code == 0 and json.loads(out)["status"] == "ok"


def test_missing_file_is_a_diagnostic(capsys):
    code, _, err = run(capsys, "check", "no/such/file.arg")
    assert code == 1 and "cannot read no/such/file.arg" in err


@pytest.mark.parametrize("dims", [("256", "256", "256"), ("200", "136", "72"), ("64", "320", "520")])
def test_run_interp(capsys, dims):
    M, N, K = dims
    code, out, _ = run(capsys, "run", GEMM, "--interp", "-D", f"M={M}", "-D", f"N={N}", "-D", f"K={K}")
    assert code == 0 and "ok   C: relative error" in out


def test_run_interp_json_and_failure(tmp_path, capsys):
    bad = tmp_path / "wrong.arg"
    shifted = GEMM_TEXT().replace("C[bm * BM : +BM, bn * BN : +BN]", "C[bm * BM : +BM, bn * BN + 1 : +BN]")
    bad.write_text(shifted)
    code, out, _ = run(capsys, "run", str(bad), "--interp", "-D", "M=64", "-D", "N=64", "-D", "K=64",
                       "--format", "json")
    j = json.loads(out)
    assert code == 1 and j["ok"] is False and j["outputs"][0]["wrong_elements"] > 0


def GEMM_TEXT() -> str:
    return (EXAMPLES / "gemm.arg").read_text()


def test_run_requires_dims_and_interp(capsys):
    code, _, err = run(capsys, "run", GEMM, "--interp", "-D", "M=64")
    assert code == 1 and "no value for dimensions K, N" in err and "-D K=256" in err
    with pytest.raises(SystemExit) as e:
        main(["run", GEMM, "-D", "M=64"])
    assert e.value.code == 2


def test_bad_define_syntax(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", GEMM, "-D", "BM"])
    assert e.value.code == 2
    assert "write NAME=VALUE" in capsys.readouterr().err


def test_help_lists_every_command(capsys):
    code, out, _ = run(capsys)
    assert code == 2
    for cmd in ("check", "build", "run", "tune"):
        assert f"    {cmd}" in out, cmd


def test_console_script_entry_point():
    p = subprocess.run([sys.executable, "-m", "argus.cli", "check", GEMM], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr


def test_internal_errors_are_not_tracebacks(monkeypatch, capsys):
    import argus.verification as verification

    def boom(*a, **k):
        raise RuntimeError("simulated bug")
    monkeypatch.setattr(verification, "verify_kernel", boom)
    monkeypatch.delenv("ARGUS_DEBUG", raising=False)
    code, _, err = run(capsys, "check", GEMM)
    assert code == 3 and "internal compiler error: RuntimeError: simulated bug" in err and "Traceback" not in err


def test_run_moe_kernel_with_routing_sizes(capsys):
    """-D T= and KTOP= size the routing of an MoE kernel even where they are not its dimensions
    (moe_up has no T); elsewhere they stay unknown-define errors."""
    moe = str(ROOT / "examples" / "moe.arg")
    code, out, _ = run(capsys, "run", moe, "--interp", "--kernel", "moe_up", "-D", "T=50", "-D", "KTOP=2",
                       "-D", "E=8", "-D", "HID=64", "-D", "F=64")
    assert code == 0 and "ok   Hs" in out and "M=100" in out, out
    code, _, err = run(capsys, "run", GEMM, "--interp", "-D", "T=5", "-D", "M=64", "-D", "N=64", "-D", "K=64")
    assert code == 1 and "[unknown-define]" in err


def test_a_file_without_kernels_is_a_located_error(tmp_path, capsys):
    """Zero kernels is neither one kernel nor several: the 'no kernel' diagnostic, never an internal error."""
    f = tmp_path / "empty.arg"
    f.write_text("# a comment, and nothing else\n")
    for argv in (["check"], ["check", "--format", "json"], ["build"], ["run", "--interp"]):
        code, out, err = run(capsys, argv[0], str(f), *argv[1:])
        assert code == 1 and "[internal]" not in out + err and "no kernel" in out + err, argv
