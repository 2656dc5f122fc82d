"""Every construct of the language parses into the expected AST, with spans."""

from __future__ import annotations

import pytest

from argus.dsl import ast
from argus.dsl.parser import parse

HEAD = "kernel k(A: bf16[M, K], x: f32):\n"


def body(src: str) -> tuple[ast.Stmt, ...]:
    text = HEAD + "".join("    " + line + "\n" for line in src.splitlines())
    return parse(text, "t.arg").kernels[0].body


def expr(src: str) -> ast.Expr:
    (s,) = body(f"v = {src}")
    assert isinstance(s, ast.Assign)
    return s.value


def test_kernel_signature_and_spans():
    m = parse("kernel gemm(A: bf16[M, K], B: bf16[K, 64], s: f32 = 0.5):\n    pass\n", "g.arg")
    (k,) = m.kernels
    assert k.name == "gemm" and k.name_span.line == 1 and k.name_span.col == 8
    assert [(a.name, a.dtype, a.dims) for a in k.args] == [("A", "bf16", ("M", "K")), ("B", "bf16", ("K", 64)),
                                                            ("s", "f32", None)]
    assert isinstance(k.args[2].default, ast.Const) and k.args[2].default.value == 0.5
    assert k.reference is None


def test_params_launch_and_semicolons():
    p1, p2, p3, launch = body('param BM = 128; param BN: int = 64\nparam MMA = "wgmma"\n'
                              "launch grid=(cdiv(M, BM), 4), threads=256, cluster=(2, 1)")
    assert (p1.name, p1.default.value) == ("BM", 128)
    assert (p2.name, p2.annotation) == ("BN", "int")
    assert p3.default.value == "wgmma"
    assert isinstance(launch, ast.Launch) and [k.name for k in launch.kwargs] == ["grid", "threads", "cluster"]
    assert isinstance(launch.kwargs[0].value, ast.TupleExpr)


def test_tuple_assignment_and_augassign():
    a, b = body("bm, bn = block_id(0), block_id(1)\nacc += 1")
    assert [t.id for t in a.targets] == ["bm", "bn"] and isinstance(a.value, ast.TupleExpr)
    assert isinstance(b, ast.AugAssign) and b.op == "+"


def test_slices_of_both_forms_and_new_axis():
    e = expr("A[bm * BM : +BM, 0:64, :, i, x[:, None]]")
    assert isinstance(e, ast.Subscript)
    s0, s1, s2, i3, sub = e.items
    assert isinstance(s0, ast.Slice) and s0.length is not None and s0.stop is None
    assert isinstance(s1, ast.Slice) and s1.start.value == 0 and s1.stop.value == 64 and s1.length is None
    assert isinstance(s2, ast.Slice) and s2.start is None and s2.stop is None
    assert isinstance(i3, ast.Name)
    assert isinstance(sub.items[1], ast.Const) and sub.items[1].value is None


@pytest.mark.parametrize("src,op", [("a + b * c", "+"), ("a * b + c", "+"), ("a // b % c", "%"), ("a << 2", "<<"),
                                    ("a & b | c", "|"), ("a ^ b", "^"), ("-a ** 2", None)])
def test_operator_precedence(src, op):
    e = expr(src)
    if op is None:
        assert isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.BinOp) and e.operand.op == "**"
    else:
        assert isinstance(e, ast.BinOp) and e.op == op


def test_comparisons_boolean_ops_ternary():
    e = expr("a if k < n and not done else b")
    assert isinstance(e, ast.IfExp)
    assert isinstance(e.cond, ast.BoolOp) and e.cond.op == "and"
    assert isinstance(e.cond.left, ast.Compare) and e.cond.left.op == "<"
    assert isinstance(e.cond.right, ast.UnaryOp) and e.cond.right.op == "not"


def test_calls_keywords_attributes_lambda():
    e = expr("mma(a_s[s], b_s[s].T, acc, instr=MMA)")
    assert isinstance(e, ast.Call) and e.func_name == "mma" and len(e.args) == 3
    assert e.kw("instr") is not None and isinstance(e.args[1], ast.Attribute) and e.args[1].attr == "T"
    (st,) = body("assert_tag(lambda i, kk, j: a_s[s][i, kk].K == b_s[s][kk, j].K)")
    lam = st.expr.args[0]
    assert isinstance(lam, ast.Lambda) and lam.params == ("i", "kk", "j")
    assert isinstance(lam.body, ast.Compare) and isinstance(lam.body.left, ast.Attribute)


def test_loops_if_elif_else_with_role():
    (f, i, w) = body("for k in pipeline(n, stages=3):\n    pass\n"
                     "if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\n"
                     'with role("producer", warpgroups=1):\n    pass')
    assert isinstance(f, ast.For) and f.var == "k" and f.iter.func_name == "pipeline"
    assert isinstance(i, ast.If) and isinstance(i.orelse[0], ast.If) and isinstance(i.orelse[0].orelse[0], ast.Pass)
    assert isinstance(w, ast.With) and w.context.func_name == "role"


def test_literals():
    e = expr('(1, 2.5, 1e-3, 0x10, "s", True, False, None, [1, 2], (3,))')
    vals = [x.value for x in e.elts[:8]]
    assert vals == [1, 2.5, 1e-3, 16, "s", True, False, None]
    assert e.elts[8].is_list and len(e.elts[9].elts) == 1


def test_reference_block_and_multiple_kernels():
    m = parse("kernel a(X: f32[N]):\n    pass\nreference:\n    Y = X * 2\n\nkernel b(X: f32[N]):\n    pass\n", "m.arg")
    assert [k.name for k in m.kernels] == ["a", "b"]
    assert isinstance(m.kernels[0].reference[0], ast.Assign) and m.kernels[1].reference is None


def test_line_continuation_inside_brackets_and_comments():
    (s,) = body("v = f(a,  # first\n      b)  # trailing")
    assert len(s.value.args) == 2


def test_python_spellings():
    m = parse('def k(A: "bf16[M, K]", C: "f32[M]"):\n    BM = param(64)\n    launch(grid=(1,), threads=128)\n'
              "    pass\n    with reference:\n        C = A.sum(1)\n", "p.py")
    k = m.kernels[0]
    assert k.args[0].dims == ("M", "K")
    assert isinstance(k.body[0], ast.Param) and k.body[0].name == "BM"
    assert isinstance(k.body[1], ast.Launch)
    assert k.reference is not None and len(k.body) == 3


def test_spans_point_at_source():
    (s,) = body("acc = mma(a, b, acc)")
    assert (s.span.line, s.span.col) == (2, 5)
    assert (s.value.span.col, s.value.span.end_col) == (11, 25)
