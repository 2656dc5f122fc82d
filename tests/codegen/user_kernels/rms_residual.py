# ruff: noqa  (the Argus Python spelling: names such as bf16, M, param are the language's, not Python's)
"""Residual add + RMSNorm in the Python spelling: H = X + R (stored), Y = H / sqrt(mean(H^2) + eps) * W."""
from __future__ import annotations

import argus


@argus.kernel
def rms_residual(X: bf16[M, N], R: bf16[M, N], W: bf16[N], H: bf16[M, N], Y: bf16[M, N], eps: f32 = 1e-5):
    BM = param(2)
    BN = param(512)
    launch(grid=(cdiv(M, BM),), threads=128)
    assume(N <= BN)
    r = block_id(0)
    h = cast(load(X[r * BM : +BM, 0 : +BN]), f32) + cast(load(R[r * BM : +BM, 0 : +BN]), f32)
    store(H[r * BM : +BM, 0 : +BN], cast(h, bf16))
    inv = rsqrt(sum(h * h, axis=1) * (1.0 / N) + eps)
    w = cast(load(W[0 : +BN]), f32)
    store(Y[r * BM : +BM, 0 : +BN], cast(h * inv[:, None] * w[None, :], bf16))
    with reference:
        H = X + R
        Y = H / sqrt(mean(H * H, axis=1, keepdims=True) + eps) * W
