"""FlashAttention forward in the interpreter against a float64 softmax(QK^T)V, and verified."""

from __future__ import annotations

import pytest

from argus.analysis import VERIFIED, verify
from argus.interp.run import run_interp
from argus.ir.build import build_file
from tests.conftest import EXAMPLES

FA = EXAMPLES / "flash_attention.arg"
CASES = [
    # dims, params
    ({"B": 1, "H": 2, "HKV": 2, "SQ": 100, "SKV": 100, "D": 128}, {}),
    ({"B": 1, "H": 2, "HKV": 2, "SQ": 100, "SKV": 100, "D": 128}, {"CAUSAL": True}),
    ({"B": 2, "H": 4, "HKV": 2, "SQ": 70, "SKV": 200, "D": 64}, {"HD": 64, "GROUP": 2, "CAUSAL": True}),
    ({"B": 1, "H": 3, "HKV": 1, "SQ": 129, "SKV": 65, "D": 64}, {"HD": 64, "GROUP": 3, "MMA": "mma.sync"}),
]


@pytest.mark.parametrize("dims,params", CASES)
def test_attention_matches_reference(dims, params):
    k = build_file(FA, params)
    res = run_interp(k, {**dims, **params}, seed=7)
    assert res.ok, [c.describe() for c in res.checks]


@pytest.mark.parametrize("params", [{}, {"CAUSAL": True}])
def test_attention_verifies(params):
    r = verify(build_file(FA, params), params)
    assert r.status == VERIFIED, [(f.check, f.message) for f in r.findings]
