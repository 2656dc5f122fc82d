"""The numeric tier's shapes: a dim an assume (or -D) pins past the tier's usual limit is tested at that size."""

from __future__ import annotations

from argus.dsl.parser import parse
from argus.verification import verify_kernel

ROWMAX = """
kernel rowmax(X: f32[M, N], Y: f32[M]):
    param BM = 4
    param BC = 128
    launch grid=(cdiv(M, BM),), threads=128
    assume(N == 1000)
    r0 = block_id(0) * BM
    mx = full(f32[BM, BC], -inf)
    for j in range(cdiv(N, BC)):
        cols = j * BC + arange(BC)
        mx = max(mx, select(cols[None, :] < N, load(X[r0 : +BM, j * BC : +BC]), -inf))
    store(Y[r0 : +BM], max(mx, axis=1))
reference:
    Y = max(X, axis=1)
"""


def _tested(src: str, defines: dict | None = None):
    (k,) = parse(src, "rowmax.arg").kernels
    return verify_kernel(k, defines or {}, file="rowmax.arg", replay=False)


def test_a_dim_pinned_past_the_limit_is_tested_at_its_size() -> None:
    v = _tested(ROWMAX)
    tested = v.report.tested
    assert tested.shapes and tested.ok and all(s.dims["N"] == 1000 for s in tested.shapes), tested.render()
    # without the mask the zero fill of the last step wins an all-negative row: the proof and the test say so
    bad = _tested(ROWMAX.replace("select(cols[None, :] < N, load(X[r0 : +BM, j * BC : +BC]), -inf)",
                                 "load(X[r0 : +BM, j * BC : +BC])"))
    assert bad.report.tested.shapes and not bad.report.tested.ok
    assert bad.status == "violated"


def test_dims_given_past_the_limit_are_tested_as_given_within_the_element_budget() -> None:
    src = ROWMAX.replace("    assume(N == 1000)\n", "")
    tested = _tested(src, {"N": 3000, "M": 301}).report.tested
    assert tested.shapes and {(s.dims["M"], s.dims["N"]) for s in tested.shapes} == {(301, 3000)}, tested.render()
    too_big = _tested(src, {"N": 3000, "M": 700}).report.tested  # 2.1M elements: refused, and said so
    assert not too_big.shapes and "too large for the interpreter" in too_big.skipped
