"""Integer division in the verifier and the interpreter: a divisor that may be zero is a `division-by-zero`
violation replayed by the interpreter (which stops on it instead of crashing), and a divisor of unknown
sign divides as floor division, as the interpreter and the generated code (ag_floordiv) do."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from argus.analysis import VERIFIED, VIOLATED, verify
from argus.analysis.symbolic import zdiv, zmod
from argus.interp.machine import InterpError, execute
from argus.ir.build import build_source

RING = """
kernel ring_rows(Buf: f32[CAP, D], Out: f32[T, D], start: i32 = 0, cap: i32 = 1):
    param BD = 64
    launch grid=(T, cdiv(D, BD)), threads=128
    assume(start >= 0 and {assume})
    t = block_id(0)
    d0 = block_id(1) * BD
    row = (start + t) % cap
    store(Out[t, d0 : +BD], load(Buf[row, d0 : +BD]))
reference:
    Out = one_hot((start + arange(T)) % cap, CAP) @ Buf
"""

BUCKET = """
kernel relative_bucket(Out: i32[T, T], width: i32 = 8):
    param B = 32
    launch grid=(cdiv(T, B), cdiv(T, B)), threads=128
    {assume}
    rel = (block_id(0) * B + arange(B))[:, None] - (block_id(1) * B + arange(B))[None, :]
    store(Out[block_id(0) * B : +B, block_id(1) * B : +B], rel // (width + arange(B)[None, :] * 0))
reference:
    Out = (arange(T)[:, None] - arange(T)[None, :]) // width
"""


def _violations(report) -> dict:
    return {f.check: f for f in report.findings if f.status == VIOLATED}


@pytest.mark.parametrize("a", [7, -7, 0, 13, -1])
@pytest.mark.parametrize("b", [3, -3, 1, -1, 5])
def test_floor_division_terms_agree_with_python(a, b):
    x, y = z3.Int("x"), z3.Int("y")
    s = z3.Solver()
    s.add(x == a, y == b)
    assert s.check() == z3.sat
    m = s.model()
    assert m.eval(zdiv(x, y, positive=False)).as_long() == a // b
    assert m.eval(zmod(x, y, positive=False)).as_long() == a % b


def test_a_runtime_divisor_without_an_assume_is_violated_and_replayed():
    r = verify(build_source(RING.format(assume="cap <= CAP")))
    f = _violations(r)["division-by-zero"]
    assert f.counterexample.scalars.get("cap") == 0
    assert f.replay is not None and f.replay.confirmed, f.replay


def test_a_negative_divisor_takes_the_floor_remainder():
    # cap < 0 is allowed: (start + t) % cap is then <= 0, a row before the buffer (z3's Euclidean remainder,
    # which the verifier used before 2026-12-07, is non-negative and proved this kernel in bounds)
    r = verify(build_source(RING.format(assume="cap != 0 and cap <= CAP")))
    bad = _violations(r)
    assert "division-by-zero" not in bad
    f = bad["oob-global"]
    assert f.counterexample.scalars["cap"] < 0
    assert f.replay is not None and f.replay.confirmed, f.replay


def test_the_assumed_divisor_verifies():
    assert verify(build_source(RING.format(assume="cap >= 1 and cap <= CAP"))).status == VERIFIED


def test_a_tile_divisor_is_obliged_per_element():
    bad = _violations(verify(build_source(BUCKET.format(assume="assume(width != -5)"))))
    assert "division-by-zero" in bad and bad["division-by-zero"].replay.confirmed
    assert verify(build_source(BUCKET.format(assume="assume(width > 0)"))).status == VERIFIED


def test_the_interpreter_stops_on_a_zero_divisor():
    k = build_source(RING.format(assume="cap <= CAP"))
    arrays = {"Buf": np.ones((4, 64), np.float32), "Out": np.full((3, 64), np.nan, np.float32)}
    with pytest.raises(InterpError) as e:
        execute(k, arrays, {"CAP": 4, "D": 64, "T": 3}, {"start": 0, "cap": 0})
    assert e.value.diagnostics[0].code == "division-by-zero"
    assert e.value.diagnostics[0].span.line == 8


CHUNKS = """
kernel row_sum_chunks(X: f32[M, D], Out: f32[M, 1], chunk: i32 = 64):
    param BD = 64
    launch grid=(M,), threads=128
    assume({assume})
    r = block_id(0)
    acc = zeros(f32[1, BD])
    for c in range(cdiv(D, chunk)):
        x = load(X[r : +1, c * chunk : +BD])
        acc = acc + select(arange(BD)[None, :] < chunk, x, 0.0)
    store(Out[r : +1, 0 : +1], sum(acc, axis=1)[:, None])
reference:
    Out = sum(X, axis=1)[:, None]
"""


def test_cdiv_by_a_divisor_of_either_sign_is_a_ceiling():
    # chunk < 0: cdiv(D, chunk) = ceil(D / chunk) <= 0 trips, the row is never summed (ag_cdiv and the
    # interpreter take the ceiling for either sign; (D + chunk - 1) / chunk does not)
    assert verify(build_source(CHUNKS.format(assume="chunk >= 1 and chunk <= BD"))).status == VERIFIED
    r = verify(build_source(CHUNKS.format(assume="chunk != 0 and chunk <= BD")))
    bad = _violations(r)
    assert "division-by-zero" not in bad and bad, r.findings
    f = next(iter(bad.values()))
    assert f.counterexample.scalars["chunk"] < 0 and f.replay.confirmed, (f.check, f.replay)
