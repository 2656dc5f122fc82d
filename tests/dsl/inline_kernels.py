"""Kernels written inline in Python (parsed from this file's source by @argus.kernel, never executed)."""
# ruff: noqa: F821

from __future__ import annotations

import argus


@argus.kernel
def scale_rows(X: f32[R, C], Y: f32[R, C], alpha: f32 = 2.0):
    BR = param(32)
    BC = param(64)
    launch(grid=(cdiv(R, BR), cdiv(C, BC)), threads=128)
    r = block_id(0)
    c = block_id(1)
    x = load(X[r * BR : +BR, c * BC : +BC])
    store(Y[r * BR : +BR, c * BC : +BC], x * alpha)
    with reference:
        Y = X * alpha


@argus.kernel(BR=16)
def broken(X: f32[R, C], Y: f32[R, C]):
    BR = param(32)
    launch(grid=(cdiv(R, BR),), threads=128)
    store(Y[0:+BR, 0:+64], load(Z[0:+BR, 0:+64]))
