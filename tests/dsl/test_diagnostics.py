"""One negative test per diagnostic: the code, the message and the span (line, column) are asserted."""

from __future__ import annotations

import json

import pytest

from argus.dsl.diagnostics import ArgusError, render
from argus.ir.build import build_source

HEAD = ("kernel k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], alpha: f32):\n"
        "    param BM = 64\n"
        "    param BK = 32\n"
        "    launch grid=(cdiv(M, BM),), threads=128\n")


def diag(src: str, defines=None, head: bool = True):
    text = (HEAD + "".join("    " + ln + "\n" for ln in src.splitlines())) if head else src
    with pytest.raises(ArgusError) as info:
        build_source(text, defines or {}, path="t.arg")
    d = info.value.diagnostics[0]
    rendered = render(d)  # must never fail, and must show the caret line
    assert rendered.startswith(f"t.arg:{d.span.line}:{d.span.col}: error:") if d.span else True
    return d


SYNTAX = [
    # (source, code, message fragment, line, col)
    ("kernel k(A: f32[N])\n    pass\n", "syntax", "expected ':' after kernel signature", 1, 20),
    ("kernel k(A: f32[N]):\n    for i in range(4)\n        pass\n", "syntax", "expected ':' after 'for' header", 2, 22),
    ("kernel k(A: f32[N]):\n    if i < 2\n        pass\n", "syntax", "expected ':' after 'if' header", 2, 13),
    ("kernel k(A: f32[N]):\npass\n", "syntax", "expected an indented block", 2, 1),
    ("kernel k(A: f32[N]):\n    x = (1 + 2\n    y = 3\n", "syntax", "'(' opened on line 2 is never closed", 3, 5),
    ("kernel k(A: f32[N]):\n    x = 1 +\n", "syntax", "incomplete statement", 2, 12),
    ("kernel k(A: f32[N]):\n    x = 1\n        y = 2\n", "syntax", "unexpected indentation", 3, 9),
    ("kernel k(A: f32[N]):\n    x = 1\n  y = 2\n", "syntax", "inconsistent indentation", 3, 1),
    ("kernel k(A: f32[N]):\n    x = 1 $ 2\n", "syntax", "unexpected character '$'", 2, 11),
    ("kernel k(A: f32[N]):\n    f(x) = 3\n", "syntax", "cannot assign here", 2, 10),
    ("kernel k(A: f32[N]):\n    x = load(A[0 : 8 : 2])\n", "syntax", "a slice with a step", 2, 22),
    ("kernel k(A: f32[N]):\n    x = a[:, 0::2]\n", "syntax", "a slice with a step", 2, 16),
    ("x = 1\n", "syntax", "expected 'kernel' or 'layer' at the top level", 1, 1),
    ("kernel (A: f32[N]):\n    pass\n", "syntax", "unexpected '('", 1, 8),
    ("kernel k(A: f32[N]):\n    f(a=1, 2)\n", "syntax", "positional argument after a keyword", 2, 12),
]


@pytest.mark.parametrize("src,code,msg,line,col", SYNTAX, ids=[s[2][:30] for s in SYNTAX])
def test_syntax_errors(src, code, msg, line, col):
    d = diag(src, head=False)
    assert d.code == code
    assert msg in d.message
    assert (d.span.line, d.span.col) == (line, col)


SEMANTIC = [
    # body lines after HEAD (which is 4 lines), code, message fragment, line, col
    ("x = y + 1", "undefined-name", "undefined name 'y'", 5, 9),
    ("x = bm + 1", "undefined-name", "undefined name 'bm'", 5, 9),
    ("x = zeross(f32[4])", "undefined-name", "unknown function 'zeross'", 5, 9),
    ("acc = zeros(f99[BM])", "undefined-name", "undefined name 'f99'", 5, 17),
    ("a_s = shared(bf16[BM, N])", "not-compile-time", "a tile dimension must be known at compile time", 5, 27),
    ("x = A[0:+BM, 0:+BK, 0:+4]", "rank", "'A' has 2 dimensions", 5, 9),
    ("x = load(A[0:+BM])", "rank", "'A' has 2 dimensions (M, K) but 1 indices", 5, 14),
    ("x = load(A[0:+M, 0:+BK])", "not-compile-time", "a slice length (start:+length) must be known", 5, 19),
    ("x = load(A[:, 0:+BK])", "shape", "':' over the runtime dimension 'M'", 5, 16),
    ("a_s = shared(bf16[2, BM, BK])\nx = load(a_s[2])", "out-of-range", "index 2 is outside the dimension of size 2",
     6, 18),
    ("a_s = shared(bf16[BM, BK])\nx = load(a_s[0:+BM, 16:+32])", "out-of-range", "slice 16:+32 is outside", 6, 25),
    ("a_s = shared(bf16[BM, BK])\nx = load(a_s[0, 0, 0])", "rank", "has 2 dimensions but 3 indices", 6, 14),
    ("param X = M", "not-compile-time", "the default of param 'X' must be known at compile time", 5, 15),
    ("for i in range(2):\n    param X = 1", "param-placement", "`param` declarations belong at the top", 6, 9),
    ("launch grid=(1,), threads=64", "duplicate-launch", "already has a launch statement", 5, 5),
    ("x = 1\nx = zeros(f32[4])", "type", "'x' was i32 and is now assigned f32[4]", 6, 9),
    ("a_s = shared(bf16[BM, 48], swizzle=128)", "swizzle", "needs rows of a multiple of 128 bytes", 5, 40),
    ("a_s = shared(bf16[BM, BK], swizzle=96)", "swizzle", "supported swizzles are 0, 32, 64 and 128", 5, 40),
    ("a_s = shared(f32[BM, 4096])", "shared-memory", "exceeds the 227 KiB", 5, 11),
    ("acc = zeros(f32[BM, BK])\nacc = mma(A[0:+BM, 0:+BK], A[0:+BM, 0:+BK], acc)", "type",
     "mma's A operand must be a shared or reg tile", 6, 15),
    ("a_s = shared(bf16[BM, BK])\nb_s = shared(bf16[BM, BK])\nacc = zeros(f32[BM, BK])\n"
     "acc = mma(a_s, b_s, acc)", "shape", "the contracted dimensions differ", 8, 11),
    ("a_s = shared(bf16[BM, BK])\nb_s = shared(bf16[BK, BM])\nacc = zeros(f32[BM, BK])\n"
     "acc = mma(a_s, b_s, acc)", "shape", "accumulator is [64, 32] but A @ B is [64, 64]", 8, 25),
    ("a_s = shared(bf16[BM, BK])\nb_s = shared(bf16[BK, BM])\nacc = zeros(bf16[BM, BM])\n"
     "acc = mma(a_s, b_s, acc)", "type", "mma accumulates in f32", 8, 25),
    ("a_s = shared(bf16[BM, BK])\nb_s = shared(bf16[BK, BM])\nacc = zeros(f32[BM, BM])\n"
     'acc = mma(a_s, b_s, acc, instr="tcgen05")', "mma-instr", "choose one of", 8, 36),
    ("a_s = shared(bf16[BM, BK])\ncopy_async(a_s, A[0:+BM, 0:+64])", "shape",
     "destination [64, 32] and source [64, 64] differ", 6, 5),
    ("a_s = shared(f32[BM, BK])\ncopy_async(a_s, A[0:+BM, 0:+BK])", "type",
     "destination is f32 but source is bf16", 6, 5),
    ("a_s = shared(bf16[BM, BK])\ncopy_async(A[0:+BM, 0:+BK], a_s)", "type", "copies a global tile into a shared",
     6, 5),
    ("acc = zeros(f32[BM, 16])\nstore(C[0:+BM, 0:+16], acc)", "type", "destination is bf16 but the value is f32",
     6, 28),
    ("acc = zeros(bf16[BM, 16])\nstore(C[0:+BM, 0:+32], acc)", "shape", "destination [64, 32] and value [64, 16]",
     6, 5),
    ("x = zeros(f32[4])\nx + 1", "unused-value", "computed and then discarded", 6, 5),
    ("for k in pipeline(4, stages=2):\n    pass", "pipeline", "needs exactly one wait_async", 5, 14),
    ("for k in pipeline(4):\n    pass", "arity", "pipeline needs stages=S", 5, 14),
    ("for k in pipeline(4, stages=0):\n    pass", "range", "stages must be at least 1", 5, 33),
    ("for k in items(4):\n    pass", "type", "a for loop iterates over range", 5, 14),
    ("x = zeros(f32[4])\nif x:\n    pass", "type", "an `if` condition must be a scalar", 6, 8),
    ("x = block_id(3)", "range", "block_id axis must be 0, 1 or 2", 5, 18),
    ("x = cdiv(M, 0)", "division-by-zero", "cdiv by zero", 5, 17),
    ("x = BM // 0", "division-by-zero", "division by zero", 5, 9),
    ("x = M / 2", "type", "'/' on integers is ambiguous", 5, 9),
    ("x = zeros(f32[4]) + zeros(f32[8])", "shape", "do not broadcast", 5, 9),
    ("a_s = shared(bf16[BM, BK])\nx = a_s + 1", "type", "arithmetic on a shared tile", 6, 9),
    ("x = exp(zeros(i32[4]))", "type", "exp() needs a float tile", 5, 13),
    ("x = cast(zeros(f32[4]), f77)", "undefined-name", "undefined name 'f77'", 5, 29),
    ("x = max(zeros(f32[4, 4]), axis=2)", "rank", "axis 2 is out of range", 5, 36),
    ("x = zeros(f32[4])\ny = x.Q", "unknown-attribute", "has no attribute 'Q'", 6, 9),
    ("assert_tag(lambda i: A[i, 0].Q == 0)", "unknown-tag", "unknown tag field 'Q'", 5, 26),
    ("assert_tag(1)", "type", "assert_tag takes a lambda", 5, 16),
    ("assert_tag(lambda i: A[i, 0].M + 1)", "type", "must return a condition", 5, 26),
    ("x = lambda i: i", "type", "a lambda is only allowed", 5, 9),
    ('with role("boss", warpgroups=1):\n    pass', "role", "producer", 5, 10),
    ('with role("producer"):\n    pass', "role", "role needs warpgroups", 5, 10),
    ("bar = mbarrier(count=1, n=2)\narrive(bar)", "type", "array of mbarriers; pick one", 6, 12),
    ("x = copy_bulk", "type", "is a builtin function; call it", 5, 9),
    ("M = 3", "reassign", "cannot assign to dim 'M'", 5, 5),
    ("x = alpha.T", "type", ".T transposes a 2-D tile", 5, 9),
    ("x = load(A[0:+BM, 0:+BK], masked=1)", "type", "masked= is True or False", 5, 38),
    ("x = tag(zeros(f32[4]))", "arity", "needs at least one field", 5, 9),
    ("wait_async(-1)", "range", "wait_async(n) needs n >= 0", 5, 16),
    ("x = shfl_xor(zeros(f32[4]), 1)", "unsupported", "shfl_xor is not part of the language", 5, 9),
    ("x = arange(8) / 2", "type", "'/' on integer tiles is ambiguous", 5, 9),
    ("x = sum(arange(8) < 3, axis=0)", "type", "sum() of a bool tile: cast it to count", 5, 13),
    ("x = exp2(zeros(f32[4]), 2)", "arity", "exp2() takes 1 positional arguments, got 2", 5, 9),
    ("x = load(A[0:+BM, 0:+BK], mask=True)", "unknown-keyword", "load() has no option 'mask'", 5, 31),
]


@pytest.mark.parametrize("src,code,msg,line,col", SEMANTIC, ids=[s[2][:40] for s in SEMANTIC])
def test_semantic_errors(src, code, msg, line, col):
    d = diag(src)
    assert d.code == code, d.message
    assert msg in d.message, d.message
    assert (d.span.line, d.span.col) == (line, col), render(d)


def test_kernel_level_errors():
    d = diag("kernel k(A: f32[N]):\n    x = 1\n", head=False)
    assert d.code == "missing-launch" and "has no launch geometry" in d.message and d.span.line == 1
    d = diag("kernel k(A: f32[N], A: f32[N]):\n    pass\n", head=False)
    assert d.code == "duplicate-name" and d.span.col == 21
    d = diag("kernel k(A: f33[N]):\n    pass\n", head=False)
    assert d.code == "unknown-type" and "unknown element type 'f33'" in d.message and d.span.col == 13
    d = diag("kernel k(A: f32[N]):\n    launch grid=(1,), threads=100\n", head=False)
    assert d.code == "launch" and "a multiple of 32" in d.message and (d.span.line, d.span.col) == (2, 31)
    d = diag("kernel k(A: f32[N]):\n    launch threads=128\n", head=False)
    assert d.code == "missing-launch" and "grid=" in d.message
    d = diag("kernel k(A: f32[N]):\n    launch grid=(1,), threads=128\nreference:\n    B = A\n    Z = Q\n", head=False)
    assert d.code == "undefined-name" and "'Q'" in d.message and (d.span.line, d.span.col) == (5, 9)
    d = diag("kernel k(A: f32[N], B: f32[N]):\n    launch grid=(1,), threads=128\n    store(B[0:+4], load(A[0:+4]))\n"
             "reference:\n    C = A\n", head=False)
    assert d.code == "reference" and "does not compute output 'B'" in d.message


def test_define_errors():
    d = diag("x = 1", defines={"BQ": 3})
    assert d.code == "unknown-define" and "-D BQ" in d.message
    d = diag("x = 1", defines={"M": -2})
    assert d.code == "bad-define"
    d = diag("a_s = shared(bf16[BM, BK], swizzle=128)", defines={"BK": 32})
    assert d.code == "swizzle"


def test_mma_layout_errors_from_the_layout_pass():
    src = ("a_s = shared(bf16[BM, BK])\nb_s = shared(bf16[BK, 24])\nacc = zeros(f32[BM, 24])\n"
           'acc = mma(a_s, b_s, acc, instr="wgmma")')
    d = diag(src, defines={"BM": 96})
    assert d.code == "mma-shape" and "64-row slabs" in d.message + " ".join(d.notes) and d.span.line == 8
    d = diag(src.replace('"wgmma"', '"mma.sync"'), defines={"BM": 24})
    assert d.code == "mma-shape" and "M must be a multiple of 16" in " ".join(d.notes)


def test_json_schema():
    d = diag("x = y")
    j = json.loads(json.dumps(d.to_json()))
    assert set(j) == {"severity", "code", "message", "span", "notes"}
    assert j["severity"] == "error" and j["code"] == "undefined-name"
    assert set(j["span"]) == {"path", "line", "col", "end_line", "end_col"}


def test_render_shows_source_line_and_caret():
    d = diag("acc = mma(a_s, b_s, acc)")
    text = render(d)
    lines = text.splitlines()
    assert lines[0] == "t.arg:5:15: error: undefined name 'a_s' [undefined-name]"
    assert lines[1] == " 5 |     acc = mma(a_s, b_s, acc)"
    assert lines[2] == "   |               ^^^"


# ---- scalar loads and masked stores (MoE) ----
_MOE_SRC = """
kernel k(X: f32[R, C], idx: i32[R], Y: f32[R, C]):
    launch grid=(R,), threads=128
    r = block_id(0)
    s = load(idx[r])
    store(Y[s, 0:+64], load(X[r, 0:+64]), where={WHERE})
"""


def _diag(src):
    import pytest as _pytest

    from argus.dsl.diagnostics import ArgusError as _E
    from argus.ir.build import build_source as _build

    with _pytest.raises(_E) as ei:
        _build(src)
    return ei.value.diagnostics[0]


def test_where_mask_must_be_bool():
    d = _diag(_MOE_SRC.replace("{WHERE}", "arange(64)"))
    assert d.code == "type" and "where=" in d.message


def test_where_mask_must_broadcast():
    d = _diag(_MOE_SRC.replace("{WHERE}", "arange(32) < 3"))
    assert d.code == "shape" and "where=" in d.message


def test_scalar_load_needs_every_index():
    src = _MOE_SRC.replace("{WHERE}", "arange(64) < s").replace("load(idx[r])", "load(X[r])")
    d = _diag(src)
    assert d.code == "rank"


def test_scalar_load_of_an_output_is_refused():
    d = _diag("""
kernel k(T: i32[N], Y: i32[N]):
    launch grid=(N,), threads=32
    t = block_id(0)
    v = load(Y[t])
    store(Y[t : +1], full(i32[1], v + 1))
reference:
    Y = Y + 1
""")
    assert d.code == "type" and "also stores to" in d.message and (d.span.line, d.span.col) == (5, 14)


def test_scalar_load_and_mask_lower():
    from argus.dsl.types import ScalarT
    from argus.ir import nodes as ir
    from argus.ir.build import build_source as _build

    k = _build(_MOE_SRC.replace("{WHERE}", "arange(64) < s"))
    let = next(s for s in k.body if isinstance(s, ir.Let) and s.name == "s")
    assert isinstance(let.value, ir.Load) and isinstance(let.value.type, ScalarT)
    assert let.value.ref.extents == (None,) and let.value.is_scalar
    st = next(s for s in k.body if isinstance(s, ir.Store))
    assert st.mask is not None and isinstance(st.dst.starts[0], ir.Var)


def test_quantified_assume_needs_over():
    d = _diag(_MOE_SRC.replace("{WHERE}", "arange(64) < s").replace(
        "    s = load(idx[r])\n", "    s = load(idx[r])\n    assume(lambda i: load(idx[i]) >= 0)\n"))
    assert d.code == "type" and "over=" in d.message


def test_compile_time_strings_compare_with_equality_only():
    src = (HEAD + '    param MODE = "fast"\n    param W = 4 if MODE == "fast" and BM != 32 else 2\n'
           "    x = zeros(f32[W])\n")
    k = build_source(src, {}, path="t.arg")
    assert k.param_dict["W"] == 4 and build_source(src, {"MODE": "slow"}, path="t.arg").param_dict["W"] == 2
    d = diag('param MODE = "fast"\nparam W = 4 if MODE < "g" else 2')
    assert d.code == "type" and "cannot compare str" in d.message


def test_compile_time_choice_of_tiles_lowers_to_the_branch():
    """`a if COND else b` on tiles with a compile-time condition is the chosen branch (no select on a
    constant condition, which the verifier could not model)."""
    from argus.analysis import VERIFIED, verify

    src = ('kernel k(A: f32[N], B: f32[N]):\n    param MODE = "fast"\n    launch grid=(cdiv(N, 128),), threads=128\n'
           "    i = block_id(0) * 128\n    x = load(A[i:+128], masked=True)\n"
           '    y = x * 2.0 if MODE == "fast" else x\n    store(B[i:+128], y)\nreference:\n    B = A * 2.0\n')
    k = build_source(src, {}, path="t.arg")
    assert "Select(" not in repr(k.body)
    assert verify(k).status == VERIFIED


@pytest.mark.parametrize(("ref", "col", "hint"), [
    ("Y = X.astype(float64) * 2.0", 9, "drop it"),
    ("Y = reshape(X, (N,)).sum(axis=0) + X", 9, "sum(X, axis=...)"),
    ("Y = X.clip(0.0, 1.0)", 9, "not among the reference functions"),
])
def test_a_method_call_in_the_reference_names_the_method(ref, col, hint):
    d = _diag(f"""
kernel k(X: f32[N], Y: f32[N]):
    launch grid=(cdiv(N, 64),), threads=64
    b = block_id(0)
    store(Y[b * 64 : +64], load(X[b * 64 : +64]) * 2.0)
reference:
    {ref}
""")
    assert d.code == "undefined-name" and "None" not in d.message and "method" in d.message, d.message
    assert (d.span.line, d.span.col) == (7, col) and hint in " ".join(d.notes), (d.span, d.notes)


def test_a_metadata_builder_is_named_and_fits_the_kernel():
    # launch ..., metadata="moe_routing": the only way a kernel gets routed inputs (argus.metadata); an
    # unknown name, or a kernel the builder cannot size, is refused at the keyword's value
    body = ("    t = block_id(0)\n    e = load(offs[t])\n"
            "    store(Y[t : +1, 0 : +64], load(X[t : +1, 0 : +64]) * 2.0, where=e >= 0)\n"
            "reference:\n    Y = X * 2.0\n")
    sig = "kernel k(X: f32[M, HID], offs: i32[E1], Y: f32[M, HID]):\n"
    d = diag(sig + '    launch grid=(M,), threads=64, metadata="routing"\n' + body, head=False)
    assert d.code == "launch" and "'routing'" in d.message and '"moe_routing"' in " ".join(d.notes)
    assert (d.span.line, d.span.col) == (2, 44)
    d = diag(sig.replace("M, HID]", "S, HID]") + '    launch grid=(S,), threads=64, metadata="moe_routing"\n'
             + body, head=False)
    assert d.code == "launch" and "also has S" in d.message and (d.span.line, d.span.col) == (2, 44)
    d = diag(sig.replace("offs", "starts") + '    launch grid=(M,), threads=64, metadata="moe_routing"\n'
             + body.replace("offs", "starts"), head=False)
    assert d.code == "launch" and "also reads starts" in d.message
    k = build_source(sig + '    launch grid=(M,), threads=64, metadata="moe_routing"\n' + body)
    assert k.metadata == "moe_routing"
    assert build_source(sig + "    launch grid=(M,), threads=64\n" + body).metadata is None
