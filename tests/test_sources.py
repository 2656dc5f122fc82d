"""`.py` files of @argus.kernel definitions on every command, with diagnostics at the .py's lines."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from argus.cli import main
from argus.sources import load_source

TWO_KERNELS = textwrap.dedent('''\
    """Two kernels, one with decorator params; module-level code runs on import."""
    from __future__ import annotations

    import argus

    ROWS = 32  # module-level values may feed the decorator


    @argus.kernel(BR=ROWS)
    def scale(X: f32[R, C], Y: f32[R, C], alpha: f32 = 2.0):
        BR = param(64)
        BC = param(64)
        launch(grid=(cdiv(R, BR), cdiv(C, BC)), threads=128)
        r = block_id(0)
        c = block_id(1)
        store(Y[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * alpha)
        with reference:
            Y = X * alpha


    @argus.kernel
    def shift(X: f32[N], Y: f32[N]):
        B = param(128)
        launch(grid=(cdiv(N, B),), threads=128)
        i = block_id(0)
        store(Y[i * B : +B], load(X[i * B : +B]) + 1.0)
        with reference:
            Y = X + 1.0
    ''')

BROKEN = textwrap.dedent('''\
    from __future__ import annotations

    import argus


    @argus.kernel
    def bad(X: f32[N], Y: f32[N]):
        launch(grid=(1,), threads=128)
        store(Y[0:+128], load(Z[0:+128]))
    ''')


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_load_source_finds_the_kernels_in_order(tmp_path):
    src = load_source(_write(tmp_path, "two.py", TWO_KERNELS))
    assert [k.name for k in src.kernels] == ["scale", "shift"]
    assert src.kernels[0].params == {"BR": 32} and src.kernels[1].params == {}
    assert src.select("shift").node.span.line == 22
    k = src.build("scale", {"BC": 32})
    assert k.param_dict["BR"] == 32 and k.param_dict["BC"] == 32


def test_check_a_py_file_with_several_kernels(tmp_path, capsys):
    f = _write(tmp_path, "two.py", TWO_KERNELS)
    code, out, _ = run(capsys, "check", f)
    assert code == 0 and "kernel 'scale': verified" in out and "kernel 'shift': verified" in out
    code, out, _ = run(capsys, "check", f, "--format", "json", "--kernel", "shift", "-D", "N=1000")
    j = json.loads(out)
    assert code == 0 and j["kernel"] == "shift" and j["status"] == "verified" and j["file"] == f
    code, out, _ = run(capsys, "check", f, "--format", "json", "--no-verify")
    j = json.loads(out)
    assert code == 0 and [r["kernel"] for r in j["kernels"]] == ["scale", "shift"] and j["status"] == "ok"


def test_errors_point_at_the_py_lines(tmp_path, capsys):
    f = _write(tmp_path, "broken.py", BROKEN)
    code, _, err = run(capsys, "check", f)
    assert code == 1 and "Traceback" not in err
    assert err.splitlines()[0] == f"{f}:9:27: error: undefined name 'Z' [undefined-name]"
    assert "store(Y[0:+128], load(Z[0:+128]))" in err
    code, out, _ = run(capsys, "build", f, "--format", "json")
    d = json.loads(out)["diagnostics"][0]
    assert code == 1 and d["span"]["path"] == f and d["span"]["line"] == 9


def test_import_failures_are_located(tmp_path, capsys):
    f = _write(tmp_path, "raises.py", "import argus\n\nx = 1\nraise RuntimeError('no GPU here')\n")
    code, _, err = run(capsys, "check", f)
    assert code == 1 and "Traceback" not in err
    assert err.splitlines()[0] == f"{f}:4:1: error: importing {f} raised RuntimeError: no GPU here [python]"
    f = _write(tmp_path, "syntax.py", "def f(:\n    pass\n")
    code, _, err = run(capsys, "check", f)
    assert code == 1 and err.startswith(f"{f}:1:") and "[python]" in err
    f = _write(tmp_path, "empty.py", "import argus\n")
    code, _, err = run(capsys, "check", f)
    assert code == 1 and "no @argus.kernel definition" in err
    # valid Python, not Argus: the grammar's error at the .py line (raised while the decorator runs)
    f = _write(tmp_path, "parse.py", "from __future__ import annotations\nimport argus\n\n@argus.kernel\n"
               "def k(X: f32[N]):\n    launch(grid=(1,), threads=32)\n    x = {1: 2}\n")
    code, _, err = run(capsys, "check", f)
    assert code == 1 and err.startswith(f"{f}:7:9: error: unexpected character '{{'") and "[syntax]" in err


def test_kernels_imported_from_elsewhere_are_not_this_files(tmp_path, capsys):
    _write(tmp_path, "lib_kernels.py", TWO_KERNELS)
    f = _write(tmp_path, "user.py", "from lib_kernels import scale  # a sibling import, as under python FILE\n")
    code, _, err = run(capsys, "check", f)
    assert code == 1 and "no @argus.kernel definition" in err


def test_run_a_py_kernel_in_the_interpreter(tmp_path, capsys):
    f = _write(tmp_path, "two.py", TWO_KERNELS)
    code, out, _ = run(capsys, "run", f, "--interp", "-D", "R=70", "-D", "C=150", "--format", "json")
    j = json.loads(out)
    assert code == 0 and j["ok"] and j["kernel"] == "scale" and j["dims"] == {"R": 70, "C": 150}
    code, out, _ = run(capsys, "run", f, "--interp", "--kernel", "shift", "-D", "N=333")
    assert code == 0 and "ok   Y" in out


def test_build_every_kernel_of_a_file(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    f = _write(tmp_path, "two.py", TWO_KERNELS)
    out_dir = tmp_path / "out"
    code, out, _ = run(capsys, "build", f, "--arch", "sm_80", "--emit", "cuda", "-o", str(out_dir), "--format", "json")
    j = json.loads(out)
    assert code == 0 and [r["kernel"] for r in j["kernels"]] == ["scale", "shift"]
    for r in j["kernels"]:
        text = Path(r["output"]).read_text()
        assert Path(r["output"]).parent == out_dir and "#line" in text and r["functions"]
    code, out, _ = run(capsys, "build", f, "--arch", "sm_80", "--emit", "cuda", "--kernel", "shift", "-o", "-")
    assert code == 0 and "__global__" in out
    code, _, err = run(capsys, "build", f, "--arch", "sm_80", "-o", "-")
    assert code == 1 and "several cubins cannot go to stdout" in err
    code, _, err = run(capsys, "build", f, "--arch", "sm_80", "-o", str(out_dir), "-D", "NOPE=1")
    assert code == 1 and "[unknown-define]" in err


def test_build_into_a_folder_never_follows_links_or_overwrites(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch):
    """-o for several kernels goes through argus.files like a single artefact: no symbolic link followed
    (the folder or a file in it), no existing file replaced without --force, all checked before compiling."""
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    f = _write(tmp_path, "two.py", TWO_KERNELS)
    build = ["build", f, "--arch", "sm_80", "--emit", "cuda", "-o"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    code, _, err = run(capsys, *build, str(link))
    assert code == 1 and "symbolic link" in err and not any(elsewhere.iterdir())
    code, _, err = run(capsys, *build, f)  # a file, not a folder
    assert code == 1 and "is not one" in err
    out_dir = tmp_path / "out"
    assert run(capsys, *build, str(out_dir))[0] == 0
    (out_dir / "shift.cu").write_text("mine")
    code, out, err = run(capsys, *build, str(out_dir))
    assert code == 1 and "refusing to overwrite" in err and "--force" in err and "built for" not in out
    assert (out_dir / "shift.cu").read_text() == "mine"
    victim = tmp_path / "victim"
    (out_dir / "scale.cu").unlink()
    (out_dir / "scale.cu").symlink_to(victim)
    code, _, err = run(capsys, *build, str(out_dir), "--force")
    assert code == 1 and "symbolic link" in err and not victim.exists()
    (out_dir / "scale.cu").unlink()
    assert run(capsys, *build, str(out_dir), "--force")[0] == 0
    assert "__global__" in (out_dir / "shift.cu").read_text() and not (out_dir / "scale.cu").is_symlink()


def test_build_every_kernel_of_an_arg_file(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    moe = str(Path(__file__).parent.parent / "examples" / "moe.arg")
    code, out, _ = run(capsys, "build", moe, "--arch", "sm_90a", "--emit", "cuda", "-o", str(tmp_path), "-D", "BM=64",
                       "-D", "BN=64", "-D", "STAGES=2", "-D", "CONSUMERS=1")
    assert code == 0
    names = sorted(p.name for p in tmp_path.glob("*.cu"))
    assert len(names) == 3 and all("moe" in n for n in names), names
    assert out.count("built for sm_90a") == 3


def test_tune_a_py_kernel(tmp_path, capsys):
    f = _write(tmp_path, "two.py", TWO_KERNELS)
    out = tmp_path / "tune"
    code, text, err = run(capsys, "tune", f, "--kernel", "scale", "--budget", "1", "--out", str(out), "--verifier",
                          "interp", "--evaluator", "model", "--check-shapes", "R=64,C=64;R=40,C=72",
                          "--shapes", "R=1024,C=1024")
    assert code == 0, err
    head = json.loads((out / "record.jsonl").read_text().splitlines()[0])
    assert head["kernel"] == "scale" and head["file"] == f and head["start"]["params"]["BR"] == 32
