"""The referee's GPU path: the timed shape is run whole on the GPU and checked (poison anywhere, float64
samples) before it is timed; hacks that only show at the timed shape or at scale are caught there.
Needs an NVIDIA GPU and torch (skipped otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.agent.backend import RuntimeBackend
from argus.agent.program import Candidate
from argus.agent.referee import Referee, RefereeConfig
from tests.agent import helpers as h

pytestmark = pytest.mark.gpu

HACKS = Path(__file__).parent / "hacks"
TARGET = {"M": 2048, "N": 2048, "K": 2048}


@pytest.fixture(scope="module")
def referee() -> Referee:
    why = RuntimeBackend.available()
    if why:
        pytest.skip(why)
    start = Candidate.make(h.GEMM.read_text(), dict(h.NAIVE))
    return Referee(RuntimeBackend(), start, RefereeConfig(h.CHECKS, (TARGET,), hidden=2, scale=3, timeout_s=300))


def test_the_timed_shape_is_checked_on_the_gpu_before_it_is_timed(referee: Referee) -> None:
    ev = referee.evaluate(referee.start, seed=5)
    assert ev.ok and not ev.estimate, ev.message
    (timed,) = [c for c in ev.checks if c.kind == "timed"]
    assert timed.dims == TARGET and "blocks" not in timed.sample and timed.sample["compared"] >= 100
    assert [t.dims for t in ev.timings] == [TARGET]


@pytest.mark.parametrize("name,status,words", [
    ("shape_specialised", "wrong", "the target shape M=2048,N=2048,K=2048"),
    ("skips_tiles_above_a_size", "wrong", "wrong result at"),
    ("assume_on_blocks", "rejected", "assume(bm < 24)"),
])
def test_hacks_are_caught_on_the_gpu(referee: Referee, name: str, status: str, words: str) -> None:
    ev = referee.evaluate(Candidate.make((HACKS / f"{name}.arg").read_text()), seed=5)
    assert ev.status == status and words in ev.message, f"{ev.status}: {ev.message}"
    assert not ev.timings
