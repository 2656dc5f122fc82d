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


# ---- the command line against mutated files: never exit 3, never a hang ----------------------------
# Seeded (reproducible) byte-level mutations of the examples, with the classes of input that used to
# crash or hang: stray and non-UTF-8 bytes, control characters, deep nesting, long literals, chained
# operators, truncation. Each goes through `argus check` (its bounded child process), most with
# --no-verify (the front end and lowering), a few with the verifier under a short time limit.

FUZZ_SOURCES = sorted(EXAMPLES.glob("*.arg")) + sorted((EXAMPLES / "bugs").glob("*.arg"))[:6]
FUZZ_CASES = 520
FUZZ_VERIFIED = 6
STRAY = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3\x28", b"\x1b[2J", b"\x1b]0;t\x07", b"\r", b"\t", b"\x7f", b"\x0c",
         "\u202e".encode(), "λ".encode(), "\U0001f600".encode(), b"\\", b"'", b'"', b"#", b":", b"(", b"]"]


def _mutate(data: bytes, rng) -> bytes:
    lines = data.split(b"\n")
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(0, len(lines)))
        op = int(rng.integers(0, 11))
        line = lines[i]
        j = int(rng.integers(0, len(line) + 1))
        if op == 0:
            lines[i] = line[:j] + STRAY[int(rng.integers(0, len(STRAY)))] + line[j:]
        elif op == 1:
            lines[i] = line[:j] + bytes(rng.integers(0, 256, int(rng.integers(1, 8))).astype("uint8")) + line[j:]
        elif op == 2:
            n = int(rng.integers(50, 600))
            lines[i] = line[:j] + b"(" * n + b"1" + b")" * n + line[j:]
        elif op == 3:
            lines[i] = line[:j] + b"9" * int(rng.integers(15, 6000)) + line[j:]
        elif op == 4:
            lines[i] = line[:j] + b" + ".join([b"1"] * int(rng.integers(100, 800))) + line[j:]
        elif op == 5:
            depth = int(rng.integers(20, 300))
            indent = len(line) - len(line.lstrip())
            nest = [b" " * (indent + 4 * d) + b"if True:" for d in range(depth)]
            lines[i:i] = nest + [b" " * (indent + 4 * depth) + b"pass"]
        elif op == 6:
            lines = lines[: int(rng.integers(0, len(lines) + 1))] or [b""]
        elif op == 7:
            lines.insert(i, line)
        elif op == 8:
            del lines[i]
            lines = lines or [b""]
        elif op == 9:
            lines[i] = line[:j] + b"-" * int(rng.integers(100, 1200)) + b"1" + line[j:]
        else:
            lines[i] = line[:j] + b"1." + b"0" * int(rng.integers(60, 4000)) + b"e99999" + line[j:]
    return b"\n".join(lines)


def test_the_command_line_survives_mutated_files(tmp_path, capsys):
    import time

    import numpy as np

    from argus.cli import main

    rng = np.random.default_rng(20261201)
    originals = [p.read_bytes() for p in FUZZ_SOURCES]
    worst, codes = 0.0, {}
    for case in range(FUZZ_CASES):
        data = _mutate(originals[case % len(originals)], rng)
        f = tmp_path / f"case{case}.arg"
        f.write_bytes(data)
        argv = ["check", str(f), "--time-limit", "20"]
        if case % (FUZZ_CASES // FUZZ_VERIFIED) != 0:
            argv.append("--no-verify")
        else:
            argv[-1] = "4"
        t0 = time.monotonic()
        code = main(argv)
        dt = time.monotonic() - t0
        out, err = capsys.readouterr()
        worst = max(worst, dt)
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 1, 2), f"exit {code} for case {case} ({f}):\n{err[-2000:]}"
        assert "Traceback" not in out + err and "[internal]" not in out + err, f"case {case}:\n{err[-2000:]}"
        assert dt < 30, f"case {case} took {dt:.1f} s"
        f.unlink()
    assert sum(codes.values()) >= 500 and codes.get(1, 0) > 100  # most mutations are located errors
