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


def test_a_fixed_integer_scalar_the_grid_reads_makes_the_grid_concrete():
    # grid=(cdiv(MAXS, BQ), H, B1 - 1): a counterexample's max_seqlen fixes the grid. It was left symbolic
    # (the explorer keeps scalar arguments symbolic), so no contents were built at any shape and a varlen
    # bug's model went unreplayed (CI on 58e4669: fa_varlen_store_past_sequence unknown)
    k = build_file(Path("examples/flash_attention_varlen.arg"))
    dims = {"T": 3, "H": 1, "HKV": 1, "D": 128, "B1": 3}
    for maxs in (2, 3, 200):  # two sequences of at most MAXS tokens hold the 3
        got = solve_contents(k, dims, {"MAXS": maxs}, {}, 0)
        assert not isinstance(got, str), (maxs, got)
        cu = [int(x) for x in got["cu"]]
        assert cu[0] == 0 and cu[-1] == 3 and all(0 <= b - a <= maxs for a, b in zip(cu, cu[1:])), (maxs, cu)
