"""oob-global (argus/analysis/checks/bounds.py): the counterexample of an out-of-bounds gather is an input
the kernel's contract allows (its quantified assume on the index tensor), not one it rules out."""

from __future__ import annotations

import re

from argus.analysis import VIOLATED, verify
from argus.ir.build import build_source

# the contract admits idx[q] == T (it should say < T): the read X[idx[r], ...] runs one row past X
GATHER = """
kernel gather_rows(X: bf16[T, K], idx: i32[M], Y: bf16[M, K]):
    param BK = 64
    launch grid=(M, cdiv(K, BK)), threads=64
    assume(lambda q: 0 <= load(idx[q]) and load(idx[q]) <= T, over=M)
    r = block_id(0)
    c = block_id(1)
    store(Y[r, c * BK : +BK], load(X[load(idx[r]), c * BK : +BK]))
reference:
    Y = X[idx]
"""


def test_the_oob_counterexample_of_a_gather_obeys_the_index_contract():
    k = build_source(GATHER, {}, None, path="<gather>")
    r = verify(k, test=False, do_replay=True)
    oob = next(c for c in r.results if c.check == "oob-global")
    f = next(f for f in oob.findings if f.status == VIOLATED)
    cx = f.counterexample
    t = cx.dims["T"]
    idx = {k: v for k, v in cx.values.items() if re.fullmatch(r"idx\[\d+\]", k)}
    assert idx and all(0 <= v <= t for v in idx.values()), (cx.dims, idx)
    assert f.replay is not None and f.replay.confirmed, f.replay
