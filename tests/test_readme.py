"""The README's examples run as written.

Fenced blocks: `sh` lines that start with `argus` run through the CLI (the pip / pytest lines are CI's own
steps); a `python` block after `<!-- file: NAME -->` is saved as NAME; a `python` block that starts with
`kernel` is Argus source and must be in the example it shows; every other `python` block runs as a
script (in a fresh interpreter). Inline commands (`argus check examples/...`) with no placeholders run too;
those that need a GPU (--gpu, --bench) only on one. All of it runs in a folder holding the saved files and
a link to examples/.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from argus.cli import main
from argus.ir.build import build_source
from tests.conftest import EXAMPLES, ROOT

README = (ROOT / "README.md").read_text()
CI_STEPS = ("python3 -m pip install", "python3 -m pytest")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    file: str | None  # <!-- file: NAME --> before it


def blocks() -> list[Block]:
    out = []
    for m in re.finditer(r"(?:<!-- file: (\S+) -->\n)?```(\w*)\n(.*?)```", README, re.S):
        out.append(Block(m.group(2), m.group(3), README[:m.start()].count("\n") + 1, m.group(1)))
    return out


def commands() -> list[tuple[int, str]]:
    """(README line, command) for every `argus ...` command line: fenced sh lines and inline spans."""
    found = []
    for b in blocks():
        if b.lang == "sh":
            for i, ln in enumerate(b.text.splitlines()):
                for part in ln.split("&&"):
                    part = part.strip()
                    if part and not part.startswith(CI_STEPS):
                        found.append((b.line + 1 + i, part))
    for m in re.finditer(r"`(argus (?:check|run|build|tune) [^`]*)`", README):
        cmd = " ".join(m.group(1).split())  # an inline span may wrap across lines
        if "examples/" in cmd and not re.search(r"[\[\]|]|\.\.\.|FILE", cmd):
            found.append((README[:m.start()].count("\n") + 1, cmd))
    return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    (d / "examples").symlink_to(EXAMPLES)
    for b in blocks():
        if b.file:
            (d / b.file).write_text(b.text)
    return d


def test_every_block_is_recognised():
    for b in blocks():
        assert b.lang in ("", "sh", "python"), f"README line {b.line}: a ```{b.lang} block the test does not run"
        if b.lang == "sh":
            assert all(ln.startswith(("argus ", *CI_STEPS)) for ln in b.text.splitlines() if ln.strip()), b.line
    assert sum(b.lang == "python" for b in blocks()) >= 4 and len(commands()) >= 5


def test_argus_source_blocks_are_the_examples():
    for b in blocks():
        if b.lang == "python" and b.text.startswith("kernel "):
            name = re.match(r"kernel (\w+)", b.text).group(1)
            source = (EXAMPLES / f"{name}.arg").read_text()
            assert b.text in source, f"README line {b.line}: not the text of examples/{name}.arg"
            build_source(b.text, path=f"README.md:{b.line}")


@pytest.mark.parametrize("line,cmd", [pytest.param(n, c, id=f"line{n}", marks=[pytest.mark.gpu] if
                                                    re.search(r"--gpu|--bench", c) else [])
                                      for n, c in commands()])
def test_commands(workdir, monkeypatch, capsys, line, cmd):
    if re.search(r"--gpu|--bench", cmd):
        from tests.runtime.test_driver_gpu import ARCH

        if ARCH is None:
            pytest.skip("needs a GPU")
    monkeypatch.chdir(workdir)
    argv = shlex.split(cmd)
    assert argv[0] == "argus"
    code = main(argv[1:])
    out, err = capsys.readouterr()
    assert code == 0, f"README line {line}: `{cmd}` exited {code}\n{out}\n{err}"


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}") for b in blocks()
                                   if b.lang == "python" and not b.file and not b.text.startswith("kernel ")])
def test_python_blocks(workdir, block):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workdir), str(ROOT)])}
    if "import torch" in block.text:
        pytest.importorskip("torch")
    p = subprocess.run([sys.executable, "-c", block.text], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"README line {block.line}:\n{p.stdout}\n{p.stderr}"
