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


def test_a_release_after_the_loop_under_one_guard_is_a_plan() -> None:
    """`if n > 0:` around the tail (a run of no step holds no stage): the verifier explores the guard."""
    plan = _plan(SRC.replace(POST, "        if ksteps > 0:\n    " + POST))
    assert not isinstance(plan, str) and plan.post_guard is not None and plan.post_release is not None


def test_a_release_after_the_loop_twice_or_in_an_else_is_refused() -> None:
    assert "once" in _plan(SRC.replace(POST, POST + POST))
    assert "once" in _plan(SRC.replace(POST, "        if ksteps > 0:\n    " + POST + "    " + POST))
    with_else = SRC.replace(POST, "        if ksteps > 0:\n    " + POST + "        else:\n    " + POST)
    assert "once" in _plan(with_else)


def test_reading_the_ring_after_the_last_release_is_refused() -> None:
    src = SRC.replace(POST, POST + "        acc = mma(a_s[0], b_s[0], acc, instr=\"wgmma\")\n")
    assert "outside its step loop" in _plan(src)


# ---- the per-tile ring beside the step ring (a persistent nest) ----
TILE = (ROOT / "tests" / "analysis" / "corpus" / "correct" / "fa_ws_persistent_tma_q.arg").read_text()
Q_WAIT = "            wait(q_empty, (tile + 1) % 2)\n"
Q_RELEASE = "            arrive(q_empty)                 # every QK of the tile has read q_s\n"


def test_a_tile_ring_is_recognised_beside_the_step_ring() -> None:
    plan = kernel_ring_plan(build_source(TILE))
    assert plan is not None and plan.persistent and plan.tile is not None
    t = plan.tile
    assert (t.full, t.empty, t.stages, t.buffers) == ("q_full", "q_empty", 1, frozenset({"q_s"}))
    assert not t.problems and (plan.full, plan.empty) == ("ring_full", "ring_empty")


def test_a_misplaced_producer_wait_is_a_static_problem() -> None:
    assert Q_WAIT in TILE
    plan = kernel_ring_plan(build_source(TILE.replace(Q_WAIT, "")))  # never waits for the release
    assert plan is not None and [c for c, _, _ in plan.tile.problems] == ["async-overwrite"]


def test_tile_ring_shapes_the_proof_does_not_reach_are_refused() -> None:
    assert Q_RELEASE in TILE
    # the release under a branch
    branch = TILE.replace(Q_RELEASE, "            if n_kv > 0:\n                arrive(q_empty)\n")
    assert "under a branch or a loop" in _plan(branch)
    # the consumer copies into the per-tile buffer itself
    copy = TILE.replace(Q_RELEASE, Q_RELEASE + "            copy_async(q_s, Q[h, qb * BQ : +BQ, 0 : +HD])\n")
    assert "copy by the consumer" in _plan(copy)
    # a second wait of the consumer
    twice = TILE.replace("            wait(q_full, tile % 2)\n",
                         "            wait(q_full, tile % 2)\n            wait(q_full, tile % 2)\n")
    assert "second wait" in _plan(twice)


def test_a_refused_tile_ring_leaves_the_kernel_unknown_with_the_reason() -> None:
    from argus.analysis import UNKNOWN, verify

    branch = TILE.replace(Q_RELEASE, "            if n_kv > 0:\n                arrive(q_empty)\n")
    r = verify(build_source(branch, {"SMS": 2}), test=False)
    assert r.status == UNKNOWN
    assert any("per-tile ring" in f.message for f in r.findings)
