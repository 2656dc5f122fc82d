"""`layer` declarations: a composition's float64 reference (signature, params, reference block)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.dsl.check import check_layer
from argus.dsl.diagnostics import ArgusError
from argus.dsl.parser import parse
from argus.dsl.reference import evaluate_reference
from argus.ir.build import build_source

KERNEL = ("kernel scale(A: f32[N], B: f32[N]):\n    launch grid=(cdiv(N, 128),), threads=128\n"
          "    i = block_id(0) * 128\n    store(B[i:+128], load(A[i:+128], masked=True) * 2.0)\n"
          "reference:\n    B = A * 2.0\n")
LAYER = ("layer twice(A: f32[N], C: f32[N]):\n    param S = 3.0\nreference:\n    B = A * 2.0\n    C = B * S\n")


def _err(src: str, defines=None):
    with pytest.raises(ArgusError) as info:
        m = parse(src, "t.arg")
        for g in m.layers:
            check_layer(g, defines or {})
    return info.value.diagnostics[0]


def test_layer_parses_beside_kernels_and_evaluates():
    m = parse(KERNEL + "\n" + LAYER, "t.arg")
    assert [k.name for k in m.kernels] == ["scale"] and [g.name for g in m.layers] == ["twice"]
    checked = check_layer(m.layer("twice"), {"S": 0.5})
    assert checked.outputs == ["C"] and checked.dims == ["N"] and checked.params == {"S": 0.5}
    a = np.random.default_rng(0).standard_normal(7)
    env = evaluate_reference(m.layer("twice").reference, {"A": a, "N": 7, **checked.params})
    assert np.allclose(env["C"], a)


@pytest.mark.parametrize("src,code,msg,line,col", [
    ("layer g(A: f32[N], C: f32[N]):\n    for i in range(2):\n        pass\nreference:\n    C = A\n", "layer",
     "a layer holds `param`s", 2, 5),
    ("layer g(A: f32[N], C: f32[N]):\n    pass\nreference:\n    B = A\n", "reference", "assigns none", 4, 5),
    ("layer g(A: f32[N], C: f32[N]):\n    pass\nreference:\n    C = A * Q\n", "undefined-name", "'Q'", 4, 13),
    ("layer g(A: f32[N], C: f32[N]):\n    pass\nreference:\n    C = grid(A)\n", "undefined-name",
     "unknown reference function 'grid'", 4, 9),
    ("layer g(A: f32[N], C: f33[N]):\n    pass\nreference:\n    C = A\n", "unknown-type", "'f33'", 1, 23),
    ("layer g(A: f32[N], C: f32[N])\n    pass\n", "syntax", "expected ':' after layer signature", 1, 30),
    ("layer g(A: f32[N], C: f32[N]):\n    pass\n", "syntax", "needs a 'reference:' block", 3, 1),
    (KERNEL + "layer scale(A: f32[N], C: f32[N]):\n    pass\nreference:\n    C = A\n", "duplicate-name",
     "'scale' is declared twice", 7, 7),
])
def test_layer_errors(src, code, msg, line, col):
    d = _err(src)
    assert d.code == code and msg in d.message, d.message
    assert (d.span.line, d.span.col) == (line, col), (d.span, d.message)


def test_unknown_define_names_the_layer():
    d = _err(LAYER, {"Q": 1})
    assert d.code == "unknown-define" and "layer 'twice'" in d.message


def test_building_a_layer_is_a_clear_error():
    with pytest.raises(ArgusError) as info:
        build_source(KERNEL + "\n" + LAYER, {}, "twice", path="t.arg")
    d = info.value.diagnostics[0]
    assert "'twice' is a layer" in d.message and "scale" in d.notes[0]
