"""Executable layers (argus/layers.py): the body's checks, the composition test, running a layer in the
interpreter, a kernel's route to a layer, and `argus check` on a layer that calls kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest

import argus
from argus.cli import main
from argus.dsl.diagnostics import ArgusError
from argus.dsl.parser import parse
from argus.interp.numerics import round_bf16
from argus.layers import Layer, check_composition, plan_layer
from tests.conftest import EXAMPLES

SRC = """
kernel fused(X: f32[R, C], Z: f32[R, C]):
    param BR = 8
    param BC = 32
    specialize R > 100: kernel="twice_plus_one", BC=64
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Z[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * 2.0 + 1.0)
reference:
    Z = X * 2 + 1

kernel scale(X: f32[R, C], Y: f32[R, C]):
    param BR = 8
    param BC = 32
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Y[r * BR : +BR, c * BC : +BC], load(X[r * BR : +BR, c * BC : +BC]) * 2.0)
reference:
    Y = X * 2

kernel add_one(Y: f32[R, C], Z: f32[R, C]):
    param BR = 8
    param BC = 32
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Z[r * BR : +BR, c * BC : +BC], load(Y[r * BR : +BR, c * BC : +BC]) + 1.0)
reference:
    Z = Y + 1

layer twice_plus_one(X: f32[R, C], Z: f32[R, C]):
    param BC = 32
    T = empty(f32[R, C])
    scale(X, T, BC=BC)
    add_one(T, Z)
reference:
    Z = X * 2 + 1
"""


def _write(tmp_path, src: str = SRC):
    path = tmp_path / "k.arg"
    path.write_text(src)
    return path


def _plan(src: str = SRC):
    m = parse(src, "k.arg")
    return plan_layer(m.layers[0], m.kernels)


def test_a_layer_runs_its_calls_in_the_interpreter(tmp_path) -> None:
    layer = argus.load(_write(tmp_path), "twice_plus_one")
    assert isinstance(layer, Layer) and [c.kernel.name for c in layer.plan.calls] == ["scale", "add_one"]
    x = np.random.default_rng(0).standard_normal((37, 70)).astype(np.float32)
    z = np.full_like(x, np.nan)
    layer(x, z)
    np.testing.assert_allclose(z, 2 * x + 1, rtol=1e-6)


def test_a_route_to_a_layer_runs_the_layer(tmp_path) -> None:
    k = argus.load(_write(tmp_path))
    routed = k.specialized({"R": 1000, "C": 20})
    assert isinstance(routed, Layer) and routed.params == {"BC": 64}
    assert k.specialized({"R": 10, "C": 20}) is k
    x = np.random.default_rng(1).standard_normal((5, 40)).astype(np.float32)
    z = np.full_like(x, np.nan)
    routed(x, z)
    np.testing.assert_allclose(z, 2 * x + 1, rtol=1e-6)


@pytest.mark.parametrize("edit, message", [
    (("    scale(X, T, BC=BC)\n    add_one(T, Z)\n", "    add_one(T, Z)\n    scale(X, T, BC=BC)\n"),
     "workspace 'T' is read by 'add_one' before any call writes it"),
    (("    add_one(T, Z)\n", ""), "no call of layer 'twice_plus_one' writes its output 'Z'"),
    (("    add_one(T, Z)\n", "    add_one(T)\n"), "kernel 'add_one' takes 2 arguments, got 1"),
    (("    add_one(T, Z)\n", "    add_two(T, Z)\n"), "'add_two' is not a kernel of this file"),
    (("    scale(X, T, BC=BC)\n", "    scale(X, T, BC=C)\n"), "the param BC of 'scale' reads 'C'"),
    (("    scale(X, T, BC=BC)\n", "    scale(X, T, BK=BC)\n"), "'BK' is not a param of kernel 'scale'"),
    (("    T = empty(f32[R, C])\n", "    T = empty(bf16[R, C])\n"), "'T' is bf16 of rank 2; argument 'Y'"),
    (("    T = empty(f32[R, C])\n", "    T = empty(f32[R, Q])\n"), "'Q' in a workspace dimension"),
    (("    T = empty(f32[R, C])\n", "    T = empty(R)\n"), "a workspace is `empty(DTYPE[dim, ...])`"),
    (("    T = empty(f32[R, C])\n", "    for i in range(2):\n        pass\n    T = empty(f32[R, C])\n"),
     "a layer cannot hold this statement"),
])
def test_a_bad_layer_body_is_refused_at_its_line(tmp_path, edit, message) -> None:
    src = SRC.replace(*edit)
    assert src != SRC
    path = _write(tmp_path, src)
    with pytest.raises(ArgusError) as e:
        argus.load(path, "twice_plus_one")
    assert message in str(e.value) and "k.arg:" in str(e.value)
    assert main(["check", str(path), "--kernel", "twice_plus_one", "--no-test"]) == 1


def test_a_kernel_that_routes_back_to_the_layer_it_is_called_from_is_refused() -> None:
    src = SRC.replace("    scale(X, T, BC=BC)\n    add_one(T, Z)\n", "    fused(X, Z)\n")
    with pytest.raises(ArgusError, match="routes to layer 'twice_plus_one', which calls it"):
        _plan(src)


@pytest.mark.parametrize("edit, message", [
    (("    Z = X * 2 + 1\n", "    Z = X * 2 + 2\n"), "references composed give Z"),
    (("    scale(X, T, BC=BC)\n", "    scale(T, X, BC=BC)\n"), "read by 'scale' before any call writes it"),
])
def test_a_composition_that_is_not_the_layers_reference_is_found(edit, message) -> None:
    head, tail = SRC.split("layer twice_plus_one")
    src = head + "layer twice_plus_one" + tail.replace(*edit)
    try:
        problems = check_composition(_plan(src), {})
    except ArgusError as e:
        assert message in str(e)
        return
    assert problems and message in problems[0].message, problems


def test_an_assume_of_a_called_kernel_is_tested_at_the_layers_dims() -> None:
    src = SRC.replace("kernel add_one(Y: f32[R, C], Z: f32[R, C]):\n",
                      "kernel add_one(Y: f32[R, C], Z: f32[R, C]):\n    assume(C <= 64)\n")
    problems = check_composition(_plan(src), {})
    assert problems and "'add_one' is called outside its assume at line" in problems[0].message
    assert problems[0].span.line == src.splitlines().index("    add_one(T, Z)") + 1


def test_a_layers_assume_bounds_its_composition_test_and_its_calls(tmp_path) -> None:
    # the called kernel needs C <= 64; the layer promises it with its own assume (a precondition)
    src = SRC.replace("kernel add_one(Y: f32[R, C], Z: f32[R, C]):\n",
                      "kernel add_one(Y: f32[R, C], Z: f32[R, C]):\n    assume(C <= 64)\n")
    src = src.replace("    T = empty(f32[R, C])\n", "    assume(C <= 64 and C % 4 == 0)\n    T = empty(f32[R, C])\n")
    assert check_composition(_plan(src), {}) == []  # only dims where the layer's assume holds are drawn
    layer = argus.load(_write(tmp_path, src), "twice_plus_one")
    x = np.random.default_rng(3).standard_normal((9, 20)).astype(np.float32)
    z = np.full_like(x, np.nan)
    layer(x, z)
    np.testing.assert_allclose(z, 2 * x + 1, rtol=1e-6)
    from argus.runtime.arrays import ArgumentError

    with pytest.raises(ArgumentError, match="precondition at line .* of layer twice_plus_one .* does not hold"):
        layer(np.zeros((9, 22), np.float32), np.zeros((9, 22), np.float32))
    # an assume no drawn dims satisfy leaves nothing to test: a located warning (unknown), not a silent pass
    never = src.replace("assume(C <= 64 and C % 4 == 0)", "assume(C > 100000 and C < 100002)")
    problems = check_composition(_plan(never), {})
    assert problems and problems[0].severity == "warning" and "was not tested" in problems[0].message
    assert "no dims drawn satisfy its assumes" in problems[0].message and "-D" in problems[0].notes[0]
    # a size an assume pins (a head dim) is among the drawn ones; a dim given with -D is used as given
    assert check_composition(_plan(src.replace("assume(C <= 64 and C % 4 == 0)", "assume(C == 64)")), {}) == []
    assert check_composition(_plan(src.replace("assume(C <= 64 and C % 4 == 0)", "assume(C == 44)")), {"C": 44}) == []
    # dims the assumes state equal to an expression take its value (random draws rarely meet two equalities)
    chained = src.replace("assume(C <= 64 and C % 4 == 0)", "assume(C == 2 * R and R == 26)")
    assert check_composition(_plan(chained), {}) == []
    # ... and a runtime dim given with -D is held (it was dropped unless it was a layer param)
    odd = _plan(src.replace("assume(C <= 64 and C % 4 == 0)", "assume(C % 97 == 44)"))
    assert "was not tested" in check_composition(odd, {})[0].message
    assert check_composition(odd, {}, dims={"C": 44}) == []
    with pytest.raises(ArgusError, match="'Q' in an assume"):
        _plan(src.replace("C % 4 == 0", "Q % 4 == 0"))


def test_check_verifies_each_call_and_the_composition(tmp_path, capsys) -> None:
    path = _write(tmp_path)
    assert main(["check", str(path), "--kernel", "twice_plus_one", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "verified" and rec["composition"] == {"tested": True, "problems": []}
    assert [c["kernel"] for c in rec["calls"]] == ["scale", "add_one"]
    assert all(c["status"] == "verified" for c in rec["calls"])
    # the route's layer is checked with the route's params as part of the routing kernel
    assert main(["check", str(path), "--kernel", "fused", "--no-test"]) == 0
    out = capsys.readouterr().out
    assert "layer 'twice_plus_one' calls 'scale' with BC=64" in out and "layer 'twice_plus_one': verified" in out
    head, tail = SRC.split("layer twice_plus_one")
    bad = _write(tmp_path, head + "layer twice_plus_one" + tail.replace("Z = X * 2 + 1", "Z = X * 2 + 2"))
    assert main(["check", str(bad), "--kernel", "twice_plus_one"]) == 1
    assert "[layer-composition]" in capsys.readouterr().out
    # a composition no drawn dims can test is unknown (exit 2), with the -D to give
    pinned = tail.replace("    T = empty(", "    assume(C > 100000 and C < 100002)\n    T = empty(", 1)
    never = _write(tmp_path, head + "layer twice_plus_one" + pinned)
    assert main(["check", str(never), "--kernel", "twice_plus_one"]) == 2
    out = capsys.readouterr().out
    assert "layer 'twice_plus_one': unknown" in out and "was not tested" in out


def test_gemm_ws_splitk_composes_to_a_matmul_and_runs_in_the_interpreter() -> None:
    m = parse((EXAMPLES / "gemm_ws.arg").read_text(), str(EXAMPLES / "gemm_ws.arg"))
    layer = next(g for g in m.layers if g.name == "gemm_ws_splitk")
    assert check_composition(plan_layer(layer, m.kernels), {"KCHUNK": 128}) == []
    run = argus.load(EXAMPLES / "gemm_ws.arg", "gemm_ws_splitk", KCHUNK=128)
    rng = np.random.default_rng(2)
    a = round_bf16(rng.standard_normal((40, 300)).astype(np.float32))
    b = round_bf16(rng.standard_normal((300, 72)).astype(np.float32))
    c = np.full((40, 72), np.nan, np.float32)
    run(a, b, c)
    ref = a.astype(np.float64) @ b
    assert np.max(np.abs(c - ref)) <= 2 ** -7 * (np.abs(ref).max())


SCALE = SRC[SRC.index("kernel scale("):SRC.index("kernel add_one(")]
ROUTE = '    specialize transposed(X): kernel="scale_t"\n'
TRANSPOSED = SCALE.replace("    param BC = 32\n", "    param BC = 32\n" + ROUTE, 1) + """
kernel tscale(Xt: f32[C, R], Y: f32[R, C]):
    param BR = 32
    param BC = 32
    launch grid=(cdiv(R, BR), cdiv(C, BC)), threads=128
    r = block_id(0)
    c = block_id(1)
    store(Y[r * BR : +BR, c * BC : +BC], load(Xt[c * BC : +BC, r * BR : +BR]).T * 2.0)
reference:
    Y = transpose(Xt) * 2

layer scale_t(X: f32[R, C], Y: f32[R, C]):
    tscale(X.T, Y)
reference:
    Y = X * 2
"""


def test_transposed_selects_a_route_by_the_arrays_layout(tmp_path) -> None:
    from argus.specialize import layout_key

    path = _write(tmp_path, TRANSPOSED)
    k = argus.load(path)
    assert k.specialized({"R": 40, "C": 70}) is k  # no layout facts: C-contiguous
    assert k.specialized({"R": 40, "C": 70, layout_key("X"): False}) is k
    routed = k.specialized({"R": 40, "C": 70, layout_key("X"): True})
    assert isinstance(routed, Layer) and routed.name == "scale_t"
    x = np.random.default_rng(3).standard_normal((40, 70)).astype(np.float32)
    y = np.full_like(x, np.nan)
    routed(x, y)  # the layer hands X.T (the stored array) to tscale
    np.testing.assert_allclose(y, 2 * x, rtol=1e-6)
    assert main(["check", str(path), "--kernel", "scale", "--no-test"]) == 0


@pytest.mark.parametrize("cond, message", [
    ("transposed(X)", "transposed(...) selects a route"),
    ("transposed(R)", "takes one tensor argument of rank 2 or more"),
    ("transposed(X, Y)", "takes one tensor argument of rank 2 or more"),
])
def test_transposed_is_refused_outside_a_route_or_on_a_non_tensor(tmp_path, cond, message) -> None:
    src = TRANSPOSED.replace('    specialize transposed(X): kernel="scale_t"\n',
                             f'    specialize {cond}: BR=16\n' if "selects" in message
                             else f'    specialize {cond}: kernel="scale_t"\n')
    path = _write(tmp_path, src)
    assert main(["check", str(path), "--kernel", "scale", "--no-test"]) == 1
    with pytest.raises(ArgusError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        argus.load(path).lower()


def test_an_array_info_knows_a_transposed_view() -> None:
    from argus.runtime.arrays import ArrayInfo

    def info(shape, strides):
        return ArrayInfo(0, "bf16", shape, strides, 0, "torch")

    assert info((64, 32), (1, 64)).is_transposed  # w.t() of a contiguous [32, 64]
    assert not info((64, 32), (32, 1)).is_transposed  # contiguous
    assert not info((64, 32), (1, 128)).is_transposed  # a column slice's transpose: not dense
    assert info((3, 64, 32), (2048, 1, 64)).is_transposed  # batched
    assert not info((64,), (1,)).is_transposed


def test_a_workspace_too_large_to_test_is_a_located_problem() -> None:
    src = SRC.replace("    T = empty(f32[R, C])\n", "    T = empty(f32[R, C])\n    U = empty(f32[C, C, C])\n")
    problems = check_composition(_plan(src), {})
    assert problems and "workspace U would hold" in problems[0].message
    assert problems[0].span.line == src.splitlines().index("    U = empty(f32[C, C, C])") + 1


def test_argus_run_runs_a_layer_against_its_reference(tmp_path, capsys) -> None:
    path = _write(tmp_path)
    assert main(["run", str(path), "--kernel", "twice_plus_one", "--interp", "-D", "R=37", "-D", "C=70"]) == 0
    out = capsys.readouterr().out
    assert "layer 'twice_plus_one' R=37 C=70 (interpreter, 2 calls)" in out and "ok   Z" in out
    assert main(["run", str(path), "--kernel", "twice_plus_one", "--interp", "-D", "R=5", "-D", "C=7", "--format",
                 "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["kernel"] == "twice_plus_one" and rec["ok"] and rec["outputs"][0]["name"] == "Z"
    # a wrong layer (its calls compute something else) fails the comparison
    head, tail = SRC.split("layer twice_plus_one")
    bad = _write(tmp_path, head + "layer twice_plus_one" + tail.replace("Z = X * 2 + 1", "Z = X * 2 + 2"))
    assert main(["run", str(bad), "--kernel", "twice_plus_one", "--interp", "-D", "R=5", "-D", "C=7"]) == 1
    assert "FAIL Z" in capsys.readouterr().out
    assert main(["run", str(path), "--kernel", "twice_plus_one", "--interp", "-D", "R=5"]) == 1
    assert "no value for dimension C" in capsys.readouterr().err



def test_a_call_with_a_params_default_value_is_verified_once(tmp_path, capsys) -> None:
    # the layer calls scale(X, T, BC=BC) with BC = 32, scale's own default: the set `check` verified for
    # the kernel alone, not proved again
    path = _write(tmp_path)
    assert main(["check", str(path), "--no-test"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if "layer 'twice_plus_one' calls 'scale' with BC=32" in x)
    assert "kernel 'scale' with these params: as checked above" in lines[at + 1], lines[at + 1]
    assert sum("kernel 'scale': verified" in x for x in lines) == 2  # BC=64 (the route's layer), the defaults
