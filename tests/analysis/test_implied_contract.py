"""The contract implied by axis names (a stored element comes from the coordinates it is stored at) is a
guess where the kernel has a reference the verifier cannot analyse: a stencil reads its neighbours. Its
findings are then claims the interpreter must reproduce against that reference: a correct stencil is
unknown (not a false alarm), one reading the wrong neighbour stays violated."""

from __future__ import annotations

from argus.analysis import UNKNOWN, VIOLATED, verify
from argus.ir.build import build_source

STENCIL = """
kernel maxpool3(X: f32[M, N], Y: f32[M, N]):
    param BN = 256
    launch grid=(M, cdiv(N, BN)), threads=128
    r = block_id(0)
    j = block_id(1)
    c = j * BN + arange(BN)
    a = select(c - 1 >= 0, load(X[r, j * BN - 1 : +BN]), -inf)
    b = load(X[r, j * BN : +BN])
    d = select(c + 1 < N, load(X[r, j * BN + 1 : +BN]), -inf)
    store(Y[r, j * BN : +BN], max(max(a, b), d))
reference:
    left = concatenate((full((M, 1), -inf), X[:, :-1]), axis=1)
    right = concatenate((X[:, 1:], full((M, 1), -inf)), axis=1)
    # the flattening reshape is not analysed (and adds nothing): the contract falls back to axis names
    Y = maximum(maximum(left, X), right) + 0.0 * sum(reshape(X, (M * N,)))
"""


def _check(src: str, code: str):
    r = verify(build_source(src), test=False)
    return next(c for c in r.results if c.check == code)


def test_a_correct_stencil_is_not_a_false_alarm():
    assert _check(STENCIL, "store-coordinates").status == UNKNOWN


def test_a_stencil_reading_the_wrong_neighbour_is_violated():
    bad = STENCIL.replace("load(X[r, j * BN - 1 : +BN])", "load(X[r, j * BN - 2 : +BN])")
    c = _check(bad, "store-coordinates")
    assert c.status == VIOLATED and any(f.replay is not None and f.replay.confirmed for f in c.findings)
