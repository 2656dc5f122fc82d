"""argus/check_pool.py: `argus check` verifies a command's (kernel, params) sets in forked workers and
prints exactly what the ordered, one-at-a-time command prints."""

from __future__ import annotations

import re

from argus.check_pool import run_parallel
from argus.cli import main


def _item(n: int):
    def fn():
        print(f"item {n}")
        if n == 3:
            raise ValueError("left to the ordered walk")
        return n * n
    return fn


def test_workers_return_each_value_with_what_it_printed() -> None:
    got = run_parallel([(n, _item(n)) for n in range(6)], 2)
    assert got == {n: (n * n, f"item {n}\n") for n in range(6) if n != 3}  # the raising item is not there
    assert run_parallel([(0, _item(0))], 2) == {}  # one item: nothing to do side by side


def _without_times(text: str) -> str:
    return re.sub(r"\d+(\.\d+)? ?(ms|s)\b", "T", text)


SRC = """
kernel scale(X: f32[R, C], Y: f32[R, C]):
    param BR = 32
    param BC = 64
    specialize R * C <= 4096: BR=8, BC=32
    specialize C <= 64: kernel="scale_cols", BC=32
    specialize cdiv(C, BC) > 4: BC=128
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Y[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * 2.0)
reference:
    Y = X * 2


kernel scale_cols(X: f32[R, C], Y: f32[R, C]):
    param BC = 64
    launch grid=(cdiv(C, BC),), threads=128
    c = block_id(0)
    for r in range(R):
        store(Y[r, c * BC : +BC], load(X[r, c * BC : +BC]) * 2.0)
reference:
    Y = X * 2
"""


def test_parallel_check_prints_what_the_ordered_check_prints(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "k.arg"
    path.write_text(SRC)
    out = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("ARGUS_CHECK_JOBS", jobs)
        assert main(["check", str(path)]) == 0
        out[jobs] = _without_times(capsys.readouterr().out)
    assert out["1"] == out["2"]
    # every set verified once: scale 3 times (its own params and two tile sets), scale_cols with BC=32 (the route)
    # and with its own BC (checked as a kernel of the file)
    assert out["1"].count("verified (") == 5, out["1"]
