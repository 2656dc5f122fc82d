"""atomic_add in the verifier (argus/analysis/checks/coverage_atomic.py): atomic adds to one element do not
race with each other; a plain store by one block and an atomic add by another to the same element do
(blocks are unordered), with a counterexample the interpreter replays; bounds are a store's; the
footprint of an element accumulated over blocks is not modelled, so a correct kernel is unknown, never
verified, with that reason."""

from __future__ import annotations

from argus.analysis import UNKNOWN, VERIFIED, VIOLATED, verify
from argus.ir.build import build_source

COLSUM = """
kernel colsum(X: f32[M, N], S: f32[N]):
    param BM = 32
    param BN = 128
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    bm = block_id(0)
    bn = block_id(1)
    part = sum(load(X[bm * BM : +BM, bn * BN : +BN]), axis=0)
{body}
reference:
    S = {ref}
"""

ATOMIC = "    atomic_add(S[bn * BN : +BN], part)"
# the first row block stores its partial sums, the others add theirs: the store may land after an add
MIXED = """    if bm == 0:
        store(S[bn * BN : +BN], part)
    else:
        atomic_add(S[bn * BN : +BN], part)"""
# an unmasked add one tile too far along N: out of bounds for the last column block
OOB = "    atomic_add(S[bn * BN + 1 : +BN], part, masked=False)"


def _verify(body: str, ref: str = "S + sum(X, axis=0)"):
    k = build_source(COLSUM.format(body=body, ref=ref), {}, None, path="<colsum>")
    r = verify(k, test=False, do_replay=True)
    return r, {c.check: c for c in r.results}


def test_atomic_adds_from_many_blocks_do_not_race_and_the_footprint_is_unknown():
    r, by = _verify(ATOMIC)
    assert by["output-written-twice"].status == VERIFIED
    assert by["output-unwritten"].status == VERIFIED
    assert by["oob-global"].status == VERIFIED
    assert by["reference-footprint"].status == UNKNOWN
    assert "atomic adds" in by["reference-footprint"].findings[0].message
    assert r.status == UNKNOWN  # never verified while the footprint is not proved


def test_a_plain_store_racing_with_another_blocks_atomic_add_is_violated_and_replayed():
    r, by = _verify(MIXED, "sum(X, axis=0)")
    f = next(f for f in by["output-written-twice"].findings if f.status == VIOLATED)
    assert "adds to them atomically" in f.message
    assert f.replay is not None and f.replay.confirmed, f.replay
    assert r.status == VIOLATED


def test_an_out_of_bounds_atomic_add_is_violated():
    r, by = _verify(OOB)
    assert by["oob-global"].status == VIOLATED
