"""The structural ring plan (argus/ir/rings.py) of a consumer that holds two stages: recognised from its
release after the step loop, and refused (with the reason) where the protocol proof does not reach."""

from __future__ import annotations

from argus.ir import nodes as ir
from argus.ir.build import build_source
from argus.ir.rings import kernel_ring_plan, ring_plan
from argus.ir.transform import walk
from tests.conftest import ROOT

SRC = (ROOT / "tests" / "analysis" / "corpus" / "correct" / "gemm_ws_ring_hold_two.arg").read_text()
POST = "        arrive(empty[(ksteps + STAGES - 1) % STAGES])\n"


def _plan(src: str):
    k = build_source(src)
    roles = tuple(s for s in k.body if isinstance(s, ir.Role))
    return ring_plan(roles, {s.name: s for s in walk(k.body) if isinstance(s, ir.AllocBarrier)})


def test_a_release_after_the_loop_makes_a_two_stage_holder() -> None:
    plan = kernel_ring_plan(build_source(SRC))
    assert plan is not None and plan.lag == 1 and plan.post_release is not None and not plan.problems


def test_the_literal_ring_holds_one_stage() -> None:
    held = "            if k > 0:\n                arrive(empty[(k + STAGES - 1) % STAGES])"
    assert held in SRC
    src = SRC.replace(held, "            arrive(empty[s])")
    plan = kernel_ring_plan(build_source(src.replace(POST, "")))
    assert plan is not None and plan.lag == 0


def test_a_release_after_the_loop_in_a_branch_or_twice_is_refused() -> None:
    branch = SRC.replace(POST, "        if ksteps > 0:\n    " + POST)
    assert "once" in _plan(branch)
    twice = SRC.replace(POST, POST + POST)
    assert "once" in _plan(twice)


def test_reading_the_ring_after_the_last_release_is_refused() -> None:
    src = SRC.replace(POST, POST + "        acc = mma(a_s[0], b_s[0], acc, instr=\"wgmma\")\n")
    assert "outside its step loop" in _plan(src)
