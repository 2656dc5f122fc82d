# ruff: noqa  (the Argus Python spelling: names such as bf16, M, param are the language's, not Python's)
"""GeGLU gate in the Python spelling: Y = gelu(A) * B over the two halves of X[M, 2F], f16 in, f32 out."""
from __future__ import annotations

import argus


@argus.kernel
def geglu_py(X: f16[M, F2], Y: f32[M, F]):
    BM = param(8)
    BF = param(64)
    launch(grid=(cdiv(M, BM), cdiv(F, BF)), threads=64)
    assume(F2 == 2 * F)
    r = block_id(0)
    c = block_id(1)
    cols = c * BF + arange(BF)
    a = cast(load(X[r * BM : +BM, c * BF : +BF]), f32)
    b = cast(load(X[r * BM : +BM, F + c * BF : +BF]), f32)
    store(Y[r * BM : +BM, c * BF : +BF], gelu(a) * b, where=cols[None, :] < F)
    with reference:
        Y = gelu(X[:, :F]) * X[:, F:]
