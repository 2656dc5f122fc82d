"""Inputs built from a kernel's assumes: the contract holds, and entries it leaves free stay in range."""

from __future__ import annotations

from pathlib import Path

from argus.analysis import verify
from argus.analysis.contract_inputs import solve_contents
from argus.ir.build import build_file

CORPUS = Path(__file__).parent / "corpus"


def test_entries_the_contract_leaves_free_take_values_in_range():
    # the kernel reads pos[t, k] for k < KTOP - 1 only; the reference gathers through all of pos
    k = build_file(CORPUS / "broken" / "moe_combine_drops_last_k.arg")
    dims = {"M": 3, "HID": 65, "T": 3, "KTOP": 3}
    for seed in range(4):
        got = solve_contents(k, dims, {}, {}, seed)
        assert not isinstance(got, str), got
        pos, row_token = got["pos"], got["row_token"]
        assert ((0 <= pos) & (pos < dims["M"])).all(), pos
        for t in range(dims["T"]):
            for kk in range(dims["KTOP"] - 1):  # the contract: row pos[t, k] holds token t
                assert row_token[pos[t, kk]] == t


def test_the_numeric_tier_runs_where_the_reference_reads_free_entries():
    r = verify(build_file(CORPUS / "broken" / "moe_combine_drops_last_k.arg"), do_replay=False)
    assert r.tested is not None and r.tested.shapes and not any(s.ok for s in r.tested.shapes)
