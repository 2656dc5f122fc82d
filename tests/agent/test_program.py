"""Candidates, edits and structural rewrites: every rewrite yields a program that builds and is correct."""

from __future__ import annotations

import re

import pytest

from argus.agent.gate import build
from argus.agent.program import Candidate, EditError, apply_edits, diff, parse_edit, parse_edits
from argus.agent.rewrites import Env
from argus.agent.rewrites_struct import _aligned
from argus.interp.run import run_interp
from tests.agent.helpers import GEMM, NAIVE, STARTS

ENV = Env(path=str(GEMM))
DIMS = ({"M": 72, "N": 40, "K": 56}, {"M": 130, "N": 70, "K": 33})
# Irregular shapes for the warp-specialised template (examples/gemm_ws.arg); the runtime gives TMA inputs
# a 16-byte row pitch, so no dim needs to be a multiple of 8.
DIMS_TMA = ({"M": 72, "N": 40, "K": 56}, {"M": 130, "N": 70, "K": 33})


def naive() -> Candidate:
    return Candidate.make(GEMM.read_text(), dict(NAIVE))


def naive_tma() -> Candidate:
    """The naive GEMM start of the device run (benchmarks/tune/starts/gemm_naive.arg)."""
    return Candidate.make(STARTS.joinpath("gemm_naive.arg").read_text(), {})


def correct(c: Candidate, dims=DIMS) -> bool:
    k = build(c)
    return all(run_interp(k, d, seed=1).ok for d in dims)


def test_edits_are_validated_data():
    assert parse_edit({"op": "set_param", "name": "BM", "value": 128}).value == 128
    for bad in ({"op": "exec", "code": "import os"}, {"op": "set_param", "name": "1x", "value": 1},
                {"op": "set_param", "name": "BM", "value": [1]}, {"op": "replace_text", "old": "", "new": "x"},
                {"op": "rewrite", "name": "tile", "args": "BM=2"}, "BM=128"):
        with pytest.raises(EditError):
            parse_edit(bad)
    assert len(parse_edits({"edits": [{"op": "set_param", "name": "BM", "value": 128}]})) == 1


def test_set_param_and_keys():
    c = naive()
    d = apply_edits(c, parse_edits([{"op": "set_param", "name": "STAGES", "value": 3}]), ENV)
    assert d.effective_params()["STAGES"] == 3 and d.key != c.key
    with pytest.raises(EditError, match="no param NOPE"):
        apply_edits(c, parse_edits([{"op": "set_param", "name": "NOPE", "value": 3}]), ENV)
    with pytest.raises(EditError, match="already"):
        apply_edits(c, parse_edits([{"op": "set_param", "name": "BM", "value": 64}]), ENV)
    # The same program reached two ways has one key; overrides equal to defaults are dropped.
    back = apply_edits(d, parse_edits([{"op": "set_param", "name": "STAGES", "value": 1}]), ENV)
    assert back.key == c.key
    assert Candidate.make(GEMM.read_text(), {"BM": 128}).params == ()
    assert "param STAGES = 3" in d.materialise() and "STAGES: 1 -> 3" in diff(c, d)


def test_replace_text_must_match_once():
    c = naive()
    with pytest.raises(EditError, match="occurs 0 times"):
        apply_edits(c, parse_edits([{"op": "replace_text", "old": "no such text", "new": "x"}]), ENV)
    d = apply_edits(c, parse_edits([{"op": "replace_text", "old": "threads=256", "new": "threads=128"}]), ENV)
    assert "threads=128" in d.source and correct(d)


@pytest.mark.parametrize("edits", [
    [{"op": "rewrite", "name": "mma_instr", "args": {"instr": "wgmma"}}],
    [{"op": "rewrite", "name": "stages", "args": {"delta": 2}}],
    [{"op": "rewrite", "name": "swizzle", "args": {"bytes": 128}},
     {"op": "rewrite", "name": "tile", "args": {"BK": 64}}],
    [{"op": "rewrite", "name": "tile", "args": {"BM": "*2", "BN": "*2"}}],
    [{"op": "rewrite", "name": "grouped_raster", "args": {"group_m": 2}}],
    [{"op": "rewrite", "name": "persistent", "args": {"num_sms": 3}}],
    [{"op": "rewrite", "name": "grouped_raster", "args": {"group_m": 2}},
     {"op": "rewrite", "name": "persistent", "args": {"num_sms": 5}}],
    [{"op": "rewrite", "name": "persistent", "args": {"num_sms": 5}},
     {"op": "rewrite", "name": "grouped_raster", "args": {"group_m": 3}}],
    [{"op": "rewrite", "name": "warp_specialise", "args": {}}],
    [{"op": "rewrite", "name": "warp_specialise", "args": {}},
     {"op": "rewrite", "name": "role_registers", "args": {"producer": 24, "consumer": 240}}],
    [{"op": "rewrite", "name": "mma_instr", "args": {"instr": "wgmma"}}, {"op": "rewrite", "name": "stages",
                                                                          "args": {"stages": 3}},
     {"op": "rewrite", "name": "warp_specialise", "args": {}}, {"op": "rewrite", "name": "persistent", "args":
                                                                 {"num_sms": 3}},
     {"op": "rewrite", "name": "grouped_raster", "args": {"group_m": 2}}],
    [{"op": "rewrite", "name": "warpgroups", "args": {"consumers": 1}}, {"op": "rewrite", "name": "warp_specialise",
                                                                         "args": {}}],
    [{"op": "rewrite", "name": "cluster", "args": {"shape": [2, 1]}}],
], ids=lambda e: "+".join(x["name"] for x in e))
def test_rewrites_give_correct_programs(edits):
    tma = any(e["name"] == "warp_specialise" for e in edits)
    d = apply_edits(naive_tma() if tma else naive(), parse_edits(edits), ENV)
    assert correct(d, DIMS_TMA if tma else DIMS), d.materialise()


def test_persistent_rewrite_keeps_allocations_outside_and_barrier_inside():
    d = apply_edits(naive(), parse_edits([{"op": "rewrite", "name": "persistent", "args": {}}]), ENV)
    lines = d.source.splitlines()
    loop = next(i for i, ln in enumerate(lines) if "persistent(" in ln)
    assert all(i < loop for i, ln in enumerate(lines) if "shared(" in ln)
    assert "barrier()" in lines[lines.index("reference:") - 1]
    assert "min(NUM_SMS," in d.source


@pytest.mark.parametrize("edits,why", [
    ([{"op": "rewrite", "name": "split_k", "args": {"splits": 4}}], "turns the kernel into a layer"),
    ([{"op": "rewrite", "name": "role_registers", "args": {"consumer": 240}}], "no producer/consumer roles"),
    ([{"op": "rewrite", "name": "mma_instr", "args": {"instr": "mma.sync"}}], "already"),
    ([{"op": "rewrite", "name": "tile", "args": {"BM": 4096}}], "outside"),
    ([{"op": "rewrite", "name": "no_such", "args": {}}], "unknown rewrite"),
])
def test_inapplicable_rewrites_say_why(edits, why):
    with pytest.raises(EditError, match=why):
        apply_edits(naive(), parse_edits(edits), ENV)


def test_warp_specialise_takes_any_shape_and_refuses_what_tma_cannot_address():
    # examples/gemm.arg accepts any K and N: A and B are read-only, so the runtime re-pitches them and the
    # rewrite applies; a tensor the kernel also writes keeps its caller's pitch, and then the rewrite says
    # which assume a start kernel would need (it never adds one: that would narrow the problem).
    edit = parse_edits([{"op": "rewrite", "name": "warp_specialise", "args": {}}])
    assert correct(apply_edits(naive(), edit, ENV), DIMS_TMA)
    inplace = build(Candidate.make(
        "kernel scale(X: bf16[M, N]):\n    launch grid=(cdiv(M, 64),), threads=128\n"
        "    x = load(X[block_id(0) * 64 : +64, 0 : +64])\n"
        "    store(X[block_id(0) * 64 : +64, 0 : +64], cast(x * 2.0, bf16))\n"
        "reference:\n    X = X * 2\n", {}))
    assert re.search(r"accepts N not a multiple of 8.*assume\(N % 8 == 0\)", _aligned(inplace, "X", 64))
    d = apply_edits(naive_tma(), edit, ENV)
    assert d.template is None and 'role("producer"' in d.source and "copy_bulk(" in d.source
    assert "copy_async" not in d.source and "pipeline(" not in d.source
    with pytest.raises(EditError, match="already warp-specialised"):
        apply_edits(d, edit, ENV)


def test_role_options_are_rewritten_in_place_beside_release():
    """examples/gemm_ws.arg's consumer role has release= after registers=: role_registers replaces the
    number where it stands, and release toggles the param that the role reads."""
    from argus.agent.rewrites import REWRITES, Inapplicable, Program
    from tests.conftest import EXAMPLES

    src = (EXAMPLES / "gemm_ws.arg").read_text()
    p = Program(src)
    d = REWRITES["role_registers"](p, {"consumer": 240}, ENV)
    assert 'role("consumer", warpgroups=CONSUMERS, registers=240, release=RELEASE)' in d.source
    r = REWRITES["release"](p, {"mode": "immediate"}, ENV)
    assert r.params == {"RELEASE": "immediate"} and r.source == src
    with pytest.raises(Inapplicable, match="already deferred"):
        REWRITES["release"](p, {"mode": "deferred"}, ENV)
    # a role without the option: it is added
    plain = src.replace(", release=RELEASE", "").replace('    param RELEASE = "deferred"\n', "").replace(
        ', RELEASE="immediate"', "")
    q = REWRITES["release"](Program(plain), {"mode": "immediate"}, ENV)
    assert 'registers=232, release="immediate")' in q.source


def test_tile_and_stages_scale_params_whose_default_is_an_expression():
    """The naive attention start declares `BKV = 128 if HD == 64 else 64`: the tile rewrite scales the value
    the compiler gives it (64 at HD = 128), as for a literal (before 2026-12-04 it was refused, so no attention
    run ever tried BKV x2)."""
    start = Candidate.make(STARTS.joinpath("flash_attention_naive.arg").read_text(), {})
    env = Env(path=str(STARTS / "flash_attention_naive.arg"))
    d = apply_edits(start, parse_edits([{"op": "rewrite", "name": "tile", "args": {"BKV": "*2"}}]), env)
    assert d.defines["BKV"] == 128
    d = apply_edits(start, parse_edits([{"op": "rewrite", "name": "tile", "args": {"BKV": "/2"}}]), env)
    assert d.defines["BKV"] == 32
    d = apply_edits(start, parse_edits([{"op": "rewrite", "name": "stages", "args": {"delta": 1}}]), env)
    assert d.defines["STAGES"] == 2
