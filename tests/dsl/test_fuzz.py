"""Fuzzing the front end: random token soup and mutated versions of gemm.arg must always give either
a clean result or an ArgusError diagnostic -- never any other exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.dsl.diagnostics import ArgusError, render
from argus.ir.build import build_source
from tests.conftest import EXAMPLES

GEMM = (EXAMPLES / "gemm.arg").read_text()
TOKENS = ["kernel", "def", "param", "launch", "for", "in", "if", "elif", "else", "with", "reference", "lambda",
          "pass", "and", "or", "not", "True", "None", "gemm", "A", "B", "C", "M", "N", "K", "BM", "k", "s", "acc",
          "bf16", "f32", "i32", "shared", "zeros", "mma", "copy_async", "wait_async", "store", "cast", "load",
          "pipeline", "range", "block_id", "cdiv", "tag", "assert_tag", "mbarrier", "role", "grid", "threads",
          "0", "1", "64", "128", "2.5", '"wgmma"', "(", ")", "[", "]", ",", ":", ":+", "=", "==", "+", "-", "*",
          "//", "%", "@", "**", ".", ".T", ".K", ";", "<", ">=", "#c", "\n", "\n    ", "\n        ", "    ", "\t"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def compile_or_diagnose(text: str) -> None:
    try:
        build_source(text, path="fuzz.arg")
    except ArgusError as exc:
        for d in exc.diagnostics:
            assert d.message and d.code
            render(d)  # rendering must not fail either


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup(tokens):
    compile_or_diagnose(" ".join(tokens))


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=30))
def test_token_soup_inside_a_kernel(tokens):
    compile_or_diagnose("kernel k(A: bf16[M, K]):\n    launch grid=(1,), threads=128\n    " + " ".join(tokens) + "\n")


@st.composite
def mutated_gemm(draw):
    lines = GEMM.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete_line", "dup_line", "delete_char", "insert_token", "replace_token",
                                   "swap_lines", "dedent", "indent"]))
        line = lines[i]
        if op == "delete_line":
            del lines[i]
        elif op == "dup_line":
            lines.insert(i, line)
        elif op == "swap_lines" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif op == "dedent":
            lines[i] = line[4:]
        elif op == "indent":
            lines[i] = "    " + line
        elif line:
            j = draw(st.integers(0, len(line)))
            if op == "delete_char":
                lines[i] = line[:j] + line[j + 1:]
            elif op == "insert_token":
                lines[i] = line[:j] + draw(st.sampled_from(TOKENS)) + line[j:]
            else:
                words = line.split(" ")
                w = draw(st.integers(0, len(words) - 1))
                words[w] = draw(st.sampled_from(TOKENS))
                lines[i] = " ".join(words)
        if not lines:
            break
    return "\n".join(lines) + "\n"


@SETTINGS
@given(mutated_gemm())
def test_mutated_gemm(text):
    compile_or_diagnose(text)


@SETTINGS
@given(st.sampled_from(["BM", "BN", "BK", "STAGES", "SWIZZLE"]), st.integers(-3, 300))
def test_random_parameter_values(name, value):
    try:
        build_source(GEMM, {name: value}, path="gemm.arg")
    except ArgusError:
        pass
