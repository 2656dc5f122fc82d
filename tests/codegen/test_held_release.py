"""A ring consumer that holds two stages in the source (argus/codegen/held_release.py): the delayed P·V
(register A) stays in flight under the next block's softmax, and its stage is released once the wgmmas
issued before the release are done, exactly once on every path."""

from __future__ import annotations

import re

import pytest

from argus.codegen import held_release
from argus.codegen.emit import generate
from argus.codegen.held_release import hold_of
from argus.dsl.types import BOOL, I32, ScalarT
from argus.ir import nodes as ir
from argus.ir.build import build_file
from tests.conftest import ROOT

CORPUS = ROOT / "tests" / "analysis" / "corpus" / "correct"


def _step(src: str) -> str:
    body = src[src.index("role 'consumer'"):]
    start = body.index("for (int j = 1;")  # the first step is emitted apart (peel)
    return body[start:body.index("sl = ", start)]


@pytest.mark.parametrize("file", ["fa_ws_pipelined_pv.arg", "fa_ws_pipelined_pv_bf16.arg"])
def test_the_delayed_pv_runs_under_the_softmax(file) -> None:
    k = build_file(CORPUS / file)
    assert hold_of(k, True) is not None
    step = _step(generate(k).source)
    commits = [m.start() for m in re.finditer(r"ag_wgmma_commit\(\);", step)]
    assert len(commits) == 2  # QK of block j, then P·V of block j - 1
    record = step.index("_on = true;")
    wait1 = step.index("ag_wgmma_wait<1>();")
    wait0 = step.index("ag_wgmma_wait<0>();")
    release = step.index("ag_mbar_arrive(ag_held")
    # the P·V is not waited for at its issue, the softmax waits for the QK only, the rescale of the
    # accumulator for both, and the stage goes back after that
    assert commits[0] < commits[1] < record < wait1 < wait0 < release
    assert "ag_wgmma_wait<0>();" not in step[commits[1]:wait1]
    assert step.index("exp2", wait1) < wait0  # the softmax's exponentials sit between the two waits
    assert step.count("ag_mbar_arrive(") == 1


def test_a_recorded_release_is_made_once() -> None:
    src = generate(build_file(CORPUS / "fa_ws_pipelined_pv.arg")).source
    step = _step(src)
    guard = step.index("if (ag_held")
    assert "_on = false;" in step[guard:guard + 300]


def test_the_first_step_is_peeled_so_the_later_pv_is_unconditional() -> None:
    src = generate(build_file(CORPUS / "fa_ws_pipelined_pv.arg")).source
    body = src[src.index("role 'consumer'"):]
    peeled = body[body.index("const int j = 0;"):body.index("for (int j = 1;")]
    assert peeled.count("ag_wgmma_commit();") == 1  # QK only: `if j > 0` is false there
    assert "ag_mbar_arrive(" not in peeled
    assert "if ((j > 0))" not in _step(src)


@pytest.mark.parametrize(("op", "lhs", "rhs", "expect"), [
    (">", "j", 0, True), (">=", "j", 1, True), ("!=", "j", 0, True), ("<", 0, "j", True),
    (">", "j", 1, None), (">=", "j", 0, None), ("<", "j", 3, None), ("==", "j", 0, None), (">", "k", 0, None)])
def test_peel_takes_only_tests_false_at_the_first_step_and_true_after(op, lhs, rhs, expect) -> None:
    def node(x):
        return ir.Var(ScalarT(I32, False), name=x) if isinstance(x, str) else ir.Const(ScalarT(I32, False), value=x)

    cond = ir.Cmp(ScalarT(BOOL, False), op=op, a=node(lhs), b=node(rhs))
    assert held_release._first_only(cond, "j", 0, 1) is expect
