"""Inputs that used to exhaust the front end: each is now a located error, never a hang or a crash."""

from __future__ import annotations

import time

import pytest

from argus.dsl.bounds import MAX_BLOCK_DEPTH, MAX_TREE_DEPTH, fold_binary
from argus.dsl.diagnostics import ArgusError, render
from argus.ir.build import build_source
from tests.conftest import EXAMPLES

GEMM = (EXAMPLES / "gemm.arg").read_text()


def with_param(expr: str) -> str:
    return GEMM.replace("    param BM = 128\n", f"    param BM = 128\n    param X = {expr}\n")


def diagnose(text: str):
    t0 = time.monotonic()
    with pytest.raises(ArgusError) as e:
        build_source(text, path="bad.arg")
    assert time.monotonic() - t0 < 10
    d = e.value.diagnostics[0]
    assert d.span is not None and d.span.line >= 1
    render(d)
    return d


@pytest.mark.parametrize("expr,code,words", [
    ("9 ** 9 ** 9", "out-of-range", "more than 64 bits"),
    ("2 ** 64 * 2 ** 64 * 2 ** 64", "out-of-range", "bits"),
    ("1 << 100000", "out-of-range", "bits"),
    ("1 >> -1", "out-of-range", "negative shift"),
    ("1.0 / 0.0", "out-of-range", "division by zero"),
    ("2.0 ** 100000", "out-of-range", "range"),
    ("(-8) ** 0.5", "out-of-range", "not a finite real"),
    ("exp(1000.0)", "domain", "out of range"),
    ("9" * 5001, "literal", "5001 digits"),
    ("0x" + "f" * 40, "literal", "too large"),
    ("1" + "0" * 400 + ".0", "literal", "too long"),
    ("1e400", "literal", "infinity"),
    (" + ".join(["1"] * 500), "nesting", "nested more than"),
    ("-" * 600 + "1", "nesting", "nested more than"),
])
def test_bad_constant_expressions(expr: str, code: str, words: str) -> None:
    d = diagnose(with_param(expr))
    assert d.code == code and words in d.message, d.message


def test_deeply_nested_blocks() -> None:
    text = "kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n"
    for i in range(300):
        text += "    " * (i + 1) + "if True:\n"
    text += "    " * 301 + "pass\n"
    d = diagnose(text)
    assert d.code == "nesting" and f"more than {MAX_BLOCK_DEPTH} deep" in d.message


def test_nesting_just_inside_the_limits_still_compiles() -> None:
    """The limits are above anything real: 100-term sums and 20 nested ifs build (and lower) fine."""
    build_source(with_param(" + ".join(["1"] * 100)))
    text = "kernel k(A: f32[N]):\n    launch grid=(1,), threads=32\n"
    for i in range(20):
        text += "    " * (i + 1) + "if N > 0:\n"
    text += "    " * 21 + "x = 1\n"
    build_source(text)
    assert MAX_TREE_DEPTH >= 100


def test_a_long_type_dimension_literal() -> None:
    d = diagnose('def k(A: "f32[' + "9" * 5001 + ']"):\n    launch(grid=(1,), threads=32)\n')
    assert d.code == "literal"


def test_fold_binary_keeps_python_semantics_inside_the_bounds() -> None:
    assert fold_binary("**", 2, 63) == 2 ** 63 and fold_binary("//", -7, 2) == -4 and fold_binary("%", -7, 2) == 1
    assert fold_binary("<<", 1, 10) == 1024 and fold_binary("/", 1, 4) == 0.25 and fold_binary("**", 2, -1) == 0.5
    with pytest.raises(OverflowError):
        fold_binary("**", 3, 41)
