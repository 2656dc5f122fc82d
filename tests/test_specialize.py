"""`specialize COND: P=v, ...` (argus/specialize.py): parsing and its checks, the launch-time choice,
the caller's params winning, and `argus check` verifying every specialization's param set."""

from __future__ import annotations

import json

import numpy as np
import pytest

import argus
from argus.cli import main
from argus.dsl.diagnostics import ArgusError
from argus.dsl.parser import parse
from argus.ir.build import build_kernel, select_kernel
from argus.specialize import pick, specializations, with_specialization
from tests.conftest import EXAMPLES

SRC = """
kernel scale(X: f32[R, C], Y: f32[R, C]):
    param BR = 32
    param BC = 64
    specialize R * C <= 4096 and BR == 32: BR=8, BC=BC // 2
    specialize cdiv(C, BC) > 4: BC=128
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Y[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * 2.0)
reference:
    Y = X * 2
"""


def _node(src: str = SRC):
    return select_kernel(parse(src, "k.arg"), None)


def test_first_matching_specialization_wins() -> None:
    node = _node()
    specs = specializations(node)
    assert [s.params for s in specs] == [{"BR": 8, "BC": 32}, {"BC": 128}]
    assert pick(node, {}, {"R": 16, "C": 64}).params == {"BR": 8, "BC": 32}
    assert pick(node, {}, {"R": 1000, "C": 1000}).params == {"BC": 128}  # cdiv(1000, 64) = 16 > 4
    assert pick(node, {}, {"R": 1000, "C": 64}) is None


def test_a_param_the_caller_sets_is_never_overridden() -> None:
    node = _node()
    # BR set by the caller: the first specialization (which sets BR) is skipped whole
    assert pick(node, {"BR": 16}, {"R": 16, "C": 64}) is None
    assert pick(node, {"BR": 16}, {"R": 16, "C": 1000}).params == {"BC": 128}
    # -D style: params and dims together; a dim the conditions read but -D lacks: the file's params
    assert with_specialization(node, {"R": 16, "C": 64}) == (node, {"R": 16, "C": 64, "BR": 8, "BC": 32})
    assert with_specialization(node, {"R": 16}) == (node, {"R": 16})


@pytest.mark.parametrize("line, message", [
    ("    specialize T > 4: BR=8", "reads dims and params only; 'T' is neither"),
    ("    specialize R > 4: BQ=8", "sets 'BQ', which is not a param declared above"),
    ("    specialize R > 4: BR=R", "must be known at compile time"),
    ("    specialize exp(R) > 4: BR=8", "may call min, max and cdiv only"),
])
def test_bad_specializations_are_refused_at_their_line(line: str, message: str) -> None:
    src = SRC.replace("    specialize cdiv(C, BC) > 4: BC=128", line)
    with pytest.raises(ArgusError) as e:
        build_kernel(_node(src), {})
    assert message in str(e.value)
    assert "k.arg:6:" in str(e.value)


def test_specialize_inside_a_loop_is_refused() -> None:
    src = SRC.replace("    store(Y", "    for i in range(1):\n        specialize R > 4: BR=8\n    store(Y")
    with pytest.raises(ArgusError, match="belongs at the top level"):
        build_kernel(_node(src), {})


def test_kernel_call_builds_the_selected_param_set() -> None:
    k = argus.load(EXAMPLES / "gemm_ws.arg")
    small = k.specialized({"M": 128, "N": 4096, "K": 4096})
    assert small.params == {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6}
    assert dict(small.lower().params)["BM"] == 64 and dict(k.lower().params)["BM"] == 128
    assert k.specialized({"M": 4096, "N": 4096, "K": 4096}) is k
    assert k.specialized({"M": 128, "N": 4096, "K": 64}) is small  # built once per param set
    # the caller's BM stands: every tile rule sets BM, so none applies and the kernel keeps its own tiles
    assert argus.load(EXAMPLES / "gemm_ws.arg", BM=128).specialized({"M": 128, "N": 4096, "K": 64}).params == \
        {"BM": 128}
    # the rules of gemm_ws.arg by shape class (measured on the H200: benchmarks/results/gemm_tiles_probe_*,
    # benchmarks/probes/results/gemm_tile_model_2026-12-03.md), the same in linear, gemm_tn and gemm_tt
    t64x128 = {"BM": 64, "BN": 128, "BK": 128, "CONSUMERS": 1, "STAGES": 4}
    t64x256 = {"BM": 64, "BN": 256, "CONSUMERS": 1, "STAGES": 4}
    picked = {shape: k.specialized(dict(zip("MNK", shape))).params for shape in
              [(16, 8192, 8192), (128, 14336, 4096), (256, 4096, 4096), (2048, 2048, 2048), (1000, 1000, 1000),
               (3072, 3072, 3072), (4096, 4096, 4096)]}
    assert picked == {(16, 8192, 8192): {"BT": 16, "BK": 256, "STAGES": 5}, (128, 14336, 4096): t64x256,
                      (256, 4096, 4096): t64x128, (2048, 2048, 2048): {}, (1000, 1000, 1000): t64x128,
                      (3072, 3072, 3072): t64x128, (4096, 4096, 4096): {}}
    for name in ("linear", "gemm_tn", "gemm_tt"):
        other = argus.load(EXAMPLES / "gemm_ws.arg", name)
        assert [other.specialized(dict(zip("MNK", s))).params for s in [(1000, 1000, 1000), (768, 1536, 2048),
                                                                         (128, 4096, 4096), (4096, 4096, 4096)]] == \
            [t64x128, t64x256, {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6}, {}], name
    # few rows go to the decode kernel of the same file (same arguments and reference)
    assert {m: k.specialized({"M": m, "N": 8192, "K": 8192}).name for m in (1, 16, 64, 65)} == \
        {1: "gemm_ws_decode", 16: "gemm_ws_decode", 64: "gemm_ws_decode", 65: "gemm_ws"}
    # long K over few tiles goes to the split-K layer in every layout (gemm_tt's since 2026-12-04)
    tt = argus.load(EXAMPLES / "gemm_ws.arg", "gemm_tt").specialized({"M": 256, "N": 256, "K": 262144})
    assert tt.name == "gemm_tt_splitk" and tt.params == {"KCHUNK": 8192, "CONSUMERS": 2}


def test_gemm_fp8_routes_by_shape_class() -> None:
    """gemm_fp8.arg's routes (measured on the H200 2026-12-04): split-K over chunks of at most 32768 for a long
    K (which also keeps the 8-bit wgmma's short accumulation exact enough), swapped operands for few rows,
    64x64 tiles for few tiles."""
    k = argus.load(EXAMPLES / "gemm_fp8.arg")
    got = {s: (r.name, r.params) for s in [(256, 256, 262144), (16, 8192, 8192), (64, 8192, 8192), (128, 4096, 4096),
                                           (8192, 8192, 8192), (128, 128, 8388608)]
           for r in [k.specialized(dict(zip("MNK", s)))]}
    assert got == {(256, 256, 262144): ("gemm_fp8_splitk", {"KCHUNK": 8192}),
                   (16, 8192, 8192): ("gemm_fp8_decode", {"BT": 16, "BK": 256, "STAGES": 10}),
                   (64, 8192, 8192): ("gemm_fp8_decode", {"BT": 64, "BK": 256, "STAGES": 6}),
                   (128, 4096, 4096): ("gemm_fp8", {"BM": 64, "BN": 64, "BK": 256, "CONSUMERS": 1, "STAGES": 6}),
                   (8192, 8192, 8192): ("gemm_fp8", {}),
                   # past 132 chunks of 32768 no split route applies: the plain kernel (less exact at this K)
                   (128, 128, 8388608): ("gemm_fp8", {"BM": 64, "BN": 64, "BK": 256, "CONSUMERS": 1, "STAGES": 6})}


@pytest.mark.slow
def test_check_verifies_every_specialization(capsys) -> None:
    path = str(EXAMPLES / "gemm_ws.arg")
    # --time-limit: on CI's 2 cores this shares them with the other test worker (alone: 3 min with 2 cores)
    assert main(["check", path, "--kernel", "gemm_ws", "--no-test", "--no-replay", "--format", "json",
                 "--time-limit", "900"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "verified"
    specs = [(s["specialize"].get("kernel"), s["specialize"]["params"]) for s in rec["specializations"]]
    # the layout routes (layers), the split-K routes (a layer, verified with each param set), the few-row
    # routes, then the tile sets of gemm_ws itself
    assert specs[:3] == [("gemm_ws_at_bt", {}), ("gemm_ws_at", {}), ("gemm_ws_bt", {})]
    split = specs[3:15]
    assert all(k == "gemm_ws_splitk" for k, _ in split) and len(split) == 12
    assert [p["KCHUNK"] for _, p in split] == [4096, 8192, 16384, 32768, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                               2048]
    assert specs[15:] == [
        ("gemm_ws_decode", {"BT": 8, "BK": 256, "STAGES": 6}), ("gemm_ws_decode", {"BT": 16, "BK": 256, "STAGES": 5}),
        ("gemm_ws_decode", {"BT": 32, "BK": 256, "STAGES": 4}), ("gemm_ws_decode", {"BT": 64, "BK": 256, "STAGES": 3}),
        (None, {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6}),
        (None, {"BM": 64, "BN": 128, "BK": 128, "CONSUMERS": 1, "STAGES": 4}),
        (None, {"BM": 64, "BN": 256, "CONSUMERS": 1, "STAGES": 4})]
    assert all(s["status"] == "verified" for s in rec["specializations"])
    layer = rec["specializations"][3]  # a route to a layer: its calls verified with the route's params
    assert layer["layer"] == "gemm_ws_splitk" and [c["kernel"] for c in layer["calls"]] == ["gemm_splitk",
                                                                                           "splitk_reduce"]
    # -D BM fixes a param of the kernel: routes and the specializations that set it are skipped
    assert main(["check", path, "--kernel", "gemm_ws", "--no-test", "-D", "BM=64", "-D", "BN=64",
                 "-D", "CONSUMERS=1"]) == 0
    assert capsys.readouterr().out.count("verified (") == 1


def test_check_verifies_both_values_of_a_flag_the_reference_reads(tmp_path, capsys) -> None:
    """CAUSAL poses another problem a caller picks with a keyword: `argus check` verifies its other value too
    (the FA3-order tail that read an unfilled stage, or hung, only at CAUSAL=True verified at the default)."""
    corpus = EXAMPLES.parent / "tests" / "analysis" / "corpus"
    fixed = (corpus / "correct" / "fa_ws_pipelined_pv.arg").read_text()
    broken = (corpus / "broken" / "fa3_tail_past_every_key.arg").read_text()
    broken = broken.replace("    param CAUSAL = True ", "    param CAUSAL = False")  # the bug only when causal
    for name, text, want in (("fixed", fixed, 0), ("broken", broken, 1)):
        path = tmp_path / f"{name}.arg"
        path.write_text(text)
        code = main(["check", str(path), "-D", "HD=64", "-D", "BKV=64", "--no-test", "--format", "json"])
        rec = json.loads(capsys.readouterr().out)
        assert code == want and [f["flag"] for f in rec["flags"]] == [{"CAUSAL": True}], rec.get("flags")
        assert rec["flags"][0]["status"] == ("verified" if want == 0 else "violated")
    # -D CAUSAL=... poses one problem: nothing else is checked
    assert main(["check", str(tmp_path / "broken.arg"), "-D", "HD=64", "-D", "BKV=64", "-D", "CAUSAL=False",
                 "--no-test"]) == 0
    assert "a flag its reference reads" not in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.arg")), ids=lambda p: p.name)
def test_check_reads_every_example_through_the_specialize_path(path, capsys) -> None:
    """`argus check` evaluates params for the specialize statements of every kernel (a default such as
    `128 if HD == 64 else 64` once made it fail on files without any specialize statement)."""
    assert main(["check", str(path), "--no-verify"]) == 0, capsys.readouterr()


def test_a_specialization_reading_a_conditional_param() -> None:
    src = SRC.replace("    param BC = 64\n", "    param BC = 64 if BR == 32 else 16\n")
    node = _node(src)
    assert pick(node, {}, {"R": 16, "C": 64}).params == {"BR": 8, "BC": 32}
    assert pick(node, {"BR": 16}, {"R": 1000, "C": 1000}).params == {"BC": 128}  # BC = 16: 63 tiles > 4


ROUTED = SRC.replace("    specialize cdiv(C, BC) > 4: BC=128\n",
                     '    specialize C <= 32: kernel="scale_cols", BC=32\n') + """

kernel scale_cols(X: f32[R, C], Y: f32[R, C]):
    param BC = 64
    launch grid=(cdiv(C, BC),), threads=128
    c = block_id(0)
    for r in range(R):
        store(Y[r : +1, c * BC : +BC], load(X[r : +1, c * BC : +BC]) * 2.0)
reference:
    Y = X * 2
"""


def test_a_route_picks_another_kernel_of_the_file(tmp_path) -> None:
    path = tmp_path / "k.arg"
    path.write_text(ROUTED)
    k = argus.load(path)
    routed = k.specialized({"R": 1000, "C": 20})
    assert routed.name == "scale_cols" and routed.params == {"BC": 32}
    assert k.specialized({"R": 1000, "C": 1000}) is k
    assert k.specialized({"R": 16, "C": 20}).params == {"BR": 8, "BC": 32}  # the first rule still wins
    # a caller that sets this kernel's params asks for this kernel: the route is skipped
    assert argus.load(path, BR=16).specialized({"R": 1000, "C": 20}).name == "scale"
    x = np.random.default_rng(0).standard_normal((5, 20)).astype(np.float32)
    y = np.full_like(x, np.nan)
    routed(x, y)
    np.testing.assert_allclose(y, 2 * x)


def test_check_verifies_the_routed_kernel_with_the_routes_params(tmp_path, capsys) -> None:
    path = tmp_path / "k.arg"
    path.write_text(ROUTED)
    assert main(["check", str(path), "--kernel", "scale", "--no-test", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    routed = [s for s in rec["specializations"] if "kernel" in s["specialize"]]
    assert len(routed) == 1 and routed[0]["specialize"] == {"line": 6, "params": {"BC": 32}, "kernel": "scale_cols"}
    assert routed[0]["kernel"] == "scale_cols" and routed[0]["status"] == "verified"


@pytest.mark.parametrize("edit, message", [
    (("Y = X * 2\n\"\"\"", "Y = X * 3\n\"\"\""), "has another reference block"),
    (("kernel scale_cols(X: f32[R, C], Y: f32[R, C])", "kernel scale_cols(X: f32[R, C], Z: f32[R, C])"),
     "does not take the arguments"),
    (('kernel="scale_cols", BC=32', 'kernel="scale_cols", BR=32'), "'BR', which is not a param of kernel"),
    (('kernel="scale_cols"', 'kernel="nope"'), "kernel='nope' is not a kernel of this file"),
    (('kernel="scale_cols"', 'kernel="scale"'), "kernel='scale' is this kernel"),
    (("    c = block_id(0)\n", "    assume(C % 4 == 0)\n    c = block_id(0)\n"), "assumes something 'scale' does not"),
])
def test_a_route_to_a_kernel_computing_something_else_is_refused(tmp_path, edit, message) -> None:
    src = ROUTED
    if edit[0].startswith("Y = X * 2"):  # the second kernel's reference only
        head, tail = src.rsplit("Y = X * 2", 1)
        src = head + "Y = X * 3" + tail
    elif edit[0].startswith("kernel scale_cols"):
        src = src.replace(edit[0], edit[1]).replace("store(Y[r", "store(Z[r")
    else:
        src = src.replace(*edit)
    path = tmp_path / "k.arg"
    path.write_text(src)
    with pytest.raises(ArgusError) as e:
        argus.load(path).specialized({"R": 1000, "C": 20})
    assert message in str(e.value) and "k.arg:6:" in str(e.value)
    assert main(["check", str(path), "--kernel", "scale", "--no-test"]) == 1


def test_a_route_names_its_kernel_as_a_string() -> None:
    src = ROUTED.replace('kernel="scale_cols"', "kernel=scale_cols")
    with pytest.raises(ArgusError, match="kernel= names another kernel of this file, as a string"):
        build_kernel(_node(src), {})


# a param the reference reads (it poses the problem) goes with a route; a schedule param does not
POSED = """
kernel scale(X: f32[R, C], Y: f32[R, C]):
    param BR = 32
    param F = 2.0
    specialize C <= 32: kernel="scale_cols", BC=32
    launch grid=(cdiv(R, BR),), threads=128
    r = block_id(0)
    store(Y[r * BR : +BR, 0 : +C], load(X[r * BR : +BR, 0 : +C]) * F)
reference:
    Y = X * F

kernel scale_cols(X: f32[R, C], Y: f32[R, C]):
    param BC = 64
    param F = 2.0
    launch grid=(cdiv(C, BC),), threads=128
    c = block_id(0)
    for r in range(R):
        store(Y[r : +1, c * BC : +BC], load(X[r : +1, c * BC : +BC]) * F)
reference:
    Y = X * F
"""


def test_a_route_takes_the_params_the_reference_reads(tmp_path) -> None:
    path = tmp_path / "k.arg"
    path.write_text(POSED)
    routed = argus.load(path, F=3.0).specialized({"R": 7, "C": 20})
    assert routed.name == "scale_cols" and routed.params == {"F": 3.0, "BC": 32}
    x = np.random.default_rng(1).standard_normal((7, 20)).astype(np.float32)
    y = np.full_like(x, np.nan)
    routed(x, y)
    np.testing.assert_allclose(y, 3 * x, rtol=1e-6)
    # a schedule param asks for this kernel
    assert argus.load(path, F=3.0, BR=16).specialized({"R": 7, "C": 20}).name == "scale"
    # argus check verifies the route with the caller's value of F
    d, defines = with_specialization(_node(POSED), {"F": 3.0, "R": 7, "C": 20}, parse(POSED, "k.arg").kernels)
    assert d.name == "scale_cols" and defines["F"] == 3.0 and defines["BC"] == 32


def test_a_route_whose_kernel_declares_a_reference_param_otherwise_is_refused(tmp_path) -> None:
    head, tail = POSED.rsplit("    param F = 2.0", 1)
    path = tmp_path / "k.arg"
    path.write_text(head + "    param F = 4.0" + tail)
    with pytest.raises(ArgusError, match="does not declare the param 'F' the reference reads"):
        argus.load(path).specialized({"R": 7, "C": 20})


def test_build_at_dims_builds_the_specialization_a_launch_there_takes(tmp_path, capsys) -> None:
    path = tmp_path / "k.arg"
    path.write_text(SRC)
    out = tmp_path / "k.cu"
    assert main(["build", str(path), "-D", "R=10", "-D", "C=100", "--emit", "cuda", "-o", str(out)]) == 0
    assert "takes its specialize at line 5: BR=8, BC=32: building that" in capsys.readouterr().err
    small = out.read_text()
    assert main(["build", str(path), "--emit", "cuda", "-o", str(out), "--force"]) == 0  # no dims: the file's params
    assert "specialize" not in capsys.readouterr().err and out.read_text() != small
