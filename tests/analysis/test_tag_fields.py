"""A tag field two source tensors of an element carry at different coordinates is ambiguous: the assertion
is unknown with the reason, never checked against whichever coordinate came first (a user's Q and K both
[B, H, S, D] got a 'violated' score row whose replay found nothing wrong)."""

from __future__ import annotations

from argus.dsl.parser import parse
from argus.verification import verify_kernel

SRC = """
kernel shifted_sum(A: f32[M, {NB}], B: f32[M, N], C: f32[M, N]):
    param BM = 16
    param BN = 64
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    assume({NB} == N)
    r = block_id(0) * BM
    c = block_id(1) * BN
    x = load(A[r : +BM, c : +BN]) + load(B[r : +BM, c + 1 : +BN])
    assert_tag(lambda i, j: x[i, j].N == c + 1 + j)
    store(C[r : +BM, c : +BN], x)
reference:
    C = A + concatenate([B[:, 1:], zeros((M, 1))], axis=1)
"""


def _verify(nb: str):
    (k,) = parse(SRC.replace("{NB}", nb), "<tags>").kernels
    return verify_kernel(k, {}, file="<tags>", replay=False, test=False)


def test_a_field_two_sources_carry_at_different_coordinates_is_unknown() -> None:
    v = _verify("N")
    (f,) = [f for f in v.findings if f.check == "tag-assertion"]
    assert f.status == "unknown" and "ambiguous" in f.message and "A and of B" in f.message


def test_named_apart_the_field_is_proved() -> None:
    v = _verify("NA")  # A's axis is NA: N names B's coordinate only
    assert not [f for f in v.findings if f.check == "tag-assertion"]
    assert dict((r.check, r.status) for r in v.report.results)["tag-assertion"] == "verified"
