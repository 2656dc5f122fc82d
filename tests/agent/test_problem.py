"""What a run varies, read from the kernel: family, useful work, shapes from its assumes, inputs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from argus.agent.assumes import broken_assumes
from argus.agent.costmodel import model
from argus.agent.family import default_kernel, family
from argus.agent.loop import TuneError, Tuner
from argus.agent.problem import ProblemError, RoutedInputs, problem_for
from argus.agent.refwork import causal_density
from argus.agent.shapes import default_targets
from argus.agent.workload import floor_seconds, min_bytes, useful_flops
from argus.cli import main
from argus.interp.run import run_interp
from argus.ir.build import build_file, build_source
from tests.agent import helpers as h
from tests.conftest import EXAMPLES

FA = EXAMPLES / "flash_attention.arg"
MOE = EXAMPLES / "moe.arg"
FA_BIG = {"B": 4, "H": 16, "SQ": 4096, "SKV": 4096, "D": 128, "HKV": 16}


def kernel(name: str, kernel_name: str | None = None, **params):
    return build_file(EXAMPLES / name, params, kernel_name)


def test_families_come_from_structure():
    assert family(kernel("gemm.arg")) == "gemm" and family(kernel("gemm_ws.arg")) == "gemm"
    assert family(kernel("flash_attention.arg")) == "attention"
    assert {family(kernel("moe.arg", k)) for k in ("moe_up", "moe_down", "moe_combine")} == {"moe"}
    # renaming the kernel changes nothing: nothing is read from names
    src = FA.read_text().replace("kernel flash_attention(", "kernel gemm_like(")
    assert family(build_source(src)) == "attention"


def test_useful_flops_attention_causal_gqa_and_routed_rows():
    fa = kernel("flash_attention.arg")
    assert useful_flops(fa, FA_BIG) == 4 * 4 * 16 * 4096 * 4096 * 128
    causal = kernel("flash_attention.arg", CAUSAL=True)
    assert useful_flops(causal, FA_BIG) == pytest.approx(4 * 4 * 16 * 128 * 4096 * 4096 * causal_density(4096, 4096))
    assert causal_density(4096, 4096) == pytest.approx(0.5, abs=2e-4)
    rect = {**FA_BIG, "SQ": 1024}  # queries aligned to the end of 4096 keys: most pairs are live
    assert useful_flops(causal, rect) / useful_flops(fa, rect) == pytest.approx(causal_density(1024, 4096))
    assert causal_density(1024, 4096) == pytest.approx(1 - 1024 * 1023 / 2 / (1024 * 4096))
    # grouped-query: FLOPs follow the 16 query heads, bytes the 4 kv heads
    gqa = kernel("flash_attention.arg", GROUP=4)
    dims = {**FA_BIG, "HKV": 4}
    assert useful_flops(gqa, dims) == useful_flops(fa, FA_BIG)
    assert min_bytes(gqa, dims) < min_bytes(fa, FA_BIG)
    up, down = kernel("moe.arg", "moe_up"), kernel("moe.arg", "moe_down")
    routed = {"M": 4096, "HID": 1024, "E": 64, "F": 512, "E1": 65, "NT": 90}
    assert useful_flops(up, routed) == 2 * 2 * 4096 * 1024 * 512  # two products over the routed rows only
    assert useful_flops(down, routed) == 2 * 4096 * 512 * 1024
    assert useful_flops(kernel("moe.arg", "moe_combine"), {"M": 64, "HID": 8, "T": 32, "KTOP": 2}) == 0


def test_cost_model_counts_both_attention_products_and_the_softmax():
    dims = {**FA_BIG, "B": 8, "H": 8, "HKV": 8}
    fa = kernel("flash_attention.arg")
    fl = useful_flops(fa, dims)
    est = model(fa, dims, fl)
    assert est.seconds > floor_seconds(fl, min_bytes(fa, dims))  # never faster than light
    assert est.flops_executed >= fl and any("softmax" in n for n in est.notes)
    causal = kernel("flash_attention.arg", CAUSAL=True)
    assert model(causal, dims, fl / 2).seconds < 0.8 * est.seconds  # skipped blocks are not paid for
    naive = kernel("flash_attention.arg", BQ=64, MMA="mma.sync", STAGES=1)
    assert model(naive, dims, fl).seconds > 1.3 * est.seconds


@pytest.mark.parametrize(("name", "dims"), [
    ("transpose.arg", {"M": 4096, "N": 4096}),
    ("rope.arg", {"B": 8, "S": 4096, "H": 8, "D": 128, "D2": 64}),
    ("softmax.arg", {"M": 8192, "N": 2048}),
    ("rmsnorm.arg", {"M": 8192, "N": 2048}),
])
def test_a_bandwidth_bound_estimate_counts_register_loads(name, dims):
    """Kernels that read their inputs with `load` (into registers, or through them into shared memory, as the
    transpose) move those bytes too: an estimate that left them out fell below the speed-of-light floor and
    the referee refused the starting kernel (argus tune on rope.arg and transpose.arg, 2026-12-04)."""
    k = kernel(name)
    est = model(k, dims, useful_flops(k, dims))
    assert est.seconds > floor_seconds(0.0, min_bytes(k, dims))


def test_default_kernel_of_a_file_of_several():
    ks = [kernel("moe.arg", k) for k in ("moe_combine", "moe_down", "moe_up")]
    best, note = default_kernel(ks)
    assert best.name == "moe_up" and "--kernel" in note and "moe_combine" in note
    assert default_kernel([kernel("gemm.arg")])[1] == ""


@pytest.mark.parametrize("name,kname", [("gemm.arg", None), ("gemm_ws.arg", None), ("flash_attention.arg", None),
                                        ("moe.arg", "moe_up"), ("moe.arg", "moe_down"), ("moe.arg", "moe_combine")])
def test_shapes_follow_the_kernels_assumes(name, kname):
    k = kernel(name, kname)
    inputs = problem_for(k)
    space = inputs.space(k)
    checks = space.checks()
    assert checks == space.checks() and len(checks) == 2  # deterministic
    for s in checks + default_targets(space, inputs):
        dims = inputs.dims(k, s)
        assert not broken_assumes(k, dims), (s, dims)
    for s in checks:  # small: cheap in the interpreter, counting dims (batch, heads) tiny
        assert all(v <= 256 for v in s.values())
        assert all(s[d] <= 5 for d in s if d not in space.tiled | space.fixed())
    if name == "flash_attention.arg":
        assert space.fixed() == {"D"} and all(s["D"] == 128 for s in checks)
        assert checks[1]["SQ"] % 8 and checks[1]["SKV"] % 8  # the irregular one is irregular
    if kname:
        assert isinstance(inputs, RoutedInputs) and space.names == ("T", "E", "KTOP", "HID", "F")


@pytest.mark.parametrize("name,kname,bound", [("rmsnorm.arg", "rmsnorm", "BN"), ("softmax.arg", "softmax", "BN"),
                                               ("moe_route.arg", "moe_route", "BE")])
def test_a_dim_the_assumes_bound_is_timed_at_its_bound(name, kname, bound):
    """A row length the kernel takes up to its tile (assume(N <= BN)) is timed at the tile, not at the
    counting default of 8 (a norm at 8 columns: 0.01 TB/s in the cost model)."""
    k = kernel(name, kname)
    inputs = problem_for(k)
    space = inputs.space(k)
    (target,) = default_targets(space, inputs)
    wide = "E" if kname == "moe_route" else "N"
    assert target[wide] == dict(k.params)[bound] and not broken_assumes(k, inputs.dims(k, target))
    assert all(target[d] == 4096 for d in space.tiled)


def test_routed_inputs_satisfy_the_contract_for_each_candidates_tile():
    inputs = RoutedInputs()
    shape = {"T": 37, "E": 4, "KTOP": 2, "HID": 72, "F": 80}
    for bm in (64, 128):
        k = kernel("moe.arg", "moe_up", BM=bm)
        dims, arrays = inputs.arrays(k, shape, np.random.default_rng(3))
        assert dims["M"] == 74 and dims["NT"] >= math.ceil(74 / bm)
        assert run_interp(k, dims, arrays=arrays).ok  # the interpreter checks every assume as it runs


def test_a_data_dependent_kernel_it_cannot_feed_is_refused_clearly(tmp_path):
    src = """kernel gather_rows(X: f32[N, 32], idx: i32[M], Y: f32[M, 32]):
    launch grid=(M,), threads=32
    r = block_id(0)
    i = load(idx[r])
    assume(0 <= i and i < N)
    store(Y[r, 0 : +32], load(X[i, 0 : +32]))
reference:
    Y = X[idx]
"""
    with pytest.raises(ProblemError, match="integer inputs \\(idx\\)"):
        problem_for(build_source(src))
    f = tmp_path / "g.arg"
    f.write_text(src)
    assert main(["tune", str(f), "--budget", "0", "--out", str(tmp_path / "o")]) == 1


def test_shapes_that_break_an_assume_are_refused_with_the_line(tmp_path):
    cfg = h.config(tmp_path / "a", file=str(FA), params={}, checks=({"B": 1, "H": 2, "SQ": 64, "D": 64, "HKV": 2,
                                                                       "SKV": 64},),
                   targets=({"B": 1, "H": 2, "SQ": 64, "D": 128, "HKV": 2, "SKV": 64},))
    with pytest.raises(TuneError, match=r"flash_attention.arg:25: check shape .*assume\(D == 128\) does not hold"):
        Tuner(cfg)


def test_tune_a_file_of_several_kernels_and_a_layer(tmp_path, capsys):
    from argus.agent.cli import choose_kernel
    from argus.sources import load_source

    args = ["--budget", "0", "--evaluator", "model", "--verifier", "interp",
            "--shapes", "T=300,E=4,KTOP=2,HID=256,F=256"]
    assert main(["tune", str(MOE), "--out", str(tmp_path / "a"), *args]) == 0
    out = capsys.readouterr().out
    assert "tuning kernel 'moe_up' (the most matrix-product work" in out and "step   0/0 ok" in out
    tuned = (tmp_path / "a" / "moe_up_tuned.arg").read_text()
    assert re.findall(r"^kernel (\w+)", tuned, re.M) == ["moe_up"]  # just the one kernel, no layer
    name, note = choose_kernel(load_source(MOE), "moe", {})
    assert name == "moe_up" and note.startswith("'moe' is a layer")
    assert choose_kernel(load_source(MOE), "moe_down", {}) == ("moe_down", "")


def test_routed_inputs_leave_a_routing_kernels_outputs_poisoned():
    """moe_sort's outputs (pos, offs) are routing metadata names: the referee's inputs must keep them
    poisoned, or a candidate that writes nothing would be judged correct (the metadata holds the answer)."""
    from argus.ir.build import build_file

    k = build_file(EXAMPLES / "moe_route.arg", {}, "moe_sort")
    assert isinstance(problem_for(k), RoutedInputs)
    dims, arrays = RoutedInputs().arrays(k, {"T": 300, "E": 8, "KTOP": 2, "HID": 64, "F": 64},
                                         np.random.default_rng(0))
    assert (arrays["pos"] == -1).all() and (arrays["offs"] == -1).all()
    assert ((arrays["topk_ids"] >= 0) & (arrays["topk_ids"] < 8)).all()
