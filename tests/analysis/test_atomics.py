"""atomic_add in the verifier. The value an accumulated element ends with is its input plus a sum over
the blocks that add to it (argus/analysis/atomic_terms.py), compared with the reference like an mma's
steps: a correct column sum verifies; a row block short, a partial added twice, overlapping row tiles or
a shifted column fail the footprint; a column tile no block adds to fails output coverage (a claim the
replay confirms); a plain store by one block and an atomic add by another to one element race
(argus/analysis/checks/coverage_atomic.py). Every violation is replayed by the interpreter."""

from __future__ import annotations

import pytest

from argus.analysis import UNKNOWN, VERIFIED, VIOLATED, verify
from argus.ir.build import build_source

COLSUM = """
kernel colsum(X: f32[M, N], S: f32[N]):
    param BM = 32
    param BN = 128
    launch grid=({grid}), threads=128
    bm = block_id(0)
    bn = block_id(1)
    part = sum(load(X[{rows} : +BM, bn * BN : +BN]), axis=0)
{body}
reference:
    S = {ref}
"""
GRID = "cdiv(M, BM), cdiv(N, BN)"
ROWS = "bm * BM"
ADD = "    atomic_add(S[bn * BN : +BN], part)"
REF = "S + sum(X, axis=0)"


def _verify(body: str = ADD, ref: str = REF, grid: str = GRID, rows: str = ROWS):
    k = build_source(COLSUM.format(body=body, ref=ref, grid=grid, rows=rows), {}, None, path="<colsum>")
    r = verify(k, test=False, do_replay=True)
    return r, {c.check: c for c in r.results}


def test_a_column_sum_accumulated_by_atomic_adds_over_row_blocks_verifies():
    r, by = _verify()
    assert r.status == VERIFIED, [(c.check, [f.message for f in c.findings]) for c in r.results if c.findings]


BROKEN = {
    # the last partial row block is not launched: its rows are never added
    "rows_short": ({"grid": "M // BM, cdiv(N, BN)"}, "accumulation-coverage"),
    # each block adds its partial twice
    "twice": ({"body": ADD + "\n" + ADD}, "accumulation-coverage"),
    # row tiles overlap by one row: that row is added by two blocks
    "overlap": ({"rows": "bm * (BM - 1)"}, "accumulation-coverage"),
    # the sums are added one column to the right
    "shifted": ({"body": "    atomic_add(S[bn * BN + 1 : +BN], part)"}, "store-coordinates"),
    # the last partial column tile is not launched: its elements keep their input value
    "cols_short": ({"grid": "cdiv(M, BM), N // BN"}, "output-unwritten"),
    # the first row block stores its partial sums, the others add theirs: the store may land last
    "store_and_add": ({"body": "    if bm == 0:\n        store(S[bn * BN : +BN], part)\n    else:\n"
                               "        atomic_add(S[bn * BN : +BN], part)", "ref": "sum(X, axis=0)"},
                      "output-written-twice"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_accumulation_is_violated_and_replayed(name):
    kw, code = BROKEN[name]
    r, by = _verify(**kw)
    f = next((f for f in by[code].findings if f.status == VIOLATED), None)
    assert f is not None, [(c.check, c.status) for c in r.results]
    assert f.replay is not None and f.replay.confirmed, f.replay
    assert r.status == VIOLATED


def test_an_accumulation_whose_blocks_take_different_paths_is_unknown():
    body = "    if bm == 0:\n        atomic_add(S[bn * BN : +BN], part)\n    else:\n" \
           "        atomic_add(S[bn * BN : +BN], part * 1.0)"
    r, by = _verify(body=body)
    assert by["reference-footprint"].status == UNKNOWN
    assert r.status == UNKNOWN


def test_an_out_of_bounds_atomic_add_is_violated():
    r, by = _verify(body="    atomic_add(S[bn * BN + 1 : +BN], part, masked=False)")
    assert by["oob-global"].status == VIOLATED


TWO_SITES = """
kernel two_sites(X: f32[M, N], S: f32[N]):
    param BM = 32
    param BN = 64
    launch grid=(cdiv(M, BM), cdiv(N, 2 * BN)), threads=128
    bm = block_id(0)
    bn = block_id(1)
    a = sum(load(X[bm * BM : +BM, bn * 2 * BN : +BN]), axis=0)
    b = sum(load(X[bm * BM : +BM, bn * 2 * BN : +BN]), axis=0)
    atomic_add(S[bn * 2 * BN : +BN], a)
    atomic_add(S[bn * 2 * BN + BN : +BN], b)
reference:
    S = S + sum(X, axis=0)
"""


def test_a_wrong_value_at_the_second_add_site_is_violated():
    """Each add site observes the elements its own view covers: the second half's adds read the first
    half's columns."""
    k = build_source(TWO_SITES, {}, None, path="<two_sites>")
    r = verify(k, test=False, do_replay=True)
    bad = [f for c in r.results for f in c.findings if f.status == VIOLATED and f.span.line == 11]
    assert bad and all(f.replay is not None and f.replay.confirmed for f in bad), [f.message for f in bad]
