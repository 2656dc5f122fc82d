"""A ring consumer that holds two stages in the source (argus/codegen/held_release.py): the delayed P·V
(register A) stays in flight under the next block's softmax, and its stage is released once the wgmmas
issued before the release are done, exactly once on every path."""

from __future__ import annotations

import re

import pytest

from argus.codegen.compile import build
from argus.codegen.emit import generate
from argus.codegen.held_release import hold_of
from argus.ir.build import build_file
from tests.conftest import ROOT

CORPUS = ROOT / "tests" / "analysis" / "corpus" / "correct"


def _step(src: str) -> str:
    body = src[src.index("role 'consumer'"):]
    start = body.index("for (int j = 0;")
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


def test_a_release_recorded_in_a_branch_is_made_once() -> None:
    src = generate(build_file(CORPUS / "fa_ws_pipelined_pv.arg")).source
    step = _step(src)
    guard = step.index("if (ag_held")
    assert "_on = false;" in step[guard:guard + 300]


def test_eager_waits_and_plain_rings_keep_the_literal_order() -> None:
    k = build_file(CORPUS / "fa_ws_pipelined_pv.arg")
    assert "ag_held" not in generate(k, defer_wgmma=False).source
    assert hold_of(build_file(ROOT / "examples" / "flash_attention_ws.arg"), True) is None


@pytest.mark.parametrize("params", [{}, {"HD": 64, "BKV": 64}, {"CAUSAL": True}])
def test_it_compiles(params) -> None:
    built = build(build_file(CORPUS / "fa_ws_pipelined_pv_bf16.arg", params), arch="sm_90a")
    assert "ag_held" in built.generated.source
