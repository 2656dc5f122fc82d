"""Reward-hacking candidates (tests/agent/hacks/*.arg) against the gate and the referee on the CPU.

Each file says what it tries and what must stop it (`# expect: STATUS | words`): `violated` (the
gate), `wrong` / `rejected` (the referee), or `slower` (evaluated, and the trick earns nothing over
the starting kernel). Every candidate runs the whole path a tune step takes: gate (front end,
interface, verifier, interpreter at the visible shapes) and then the referee (hidden shapes small and
at scale, the timed shape checked before it is timed, the speed-of-light floor).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from argus.agent import gate
from argus.agent.backend import InterpBackend
from argus.agent.program import Candidate
from argus.agent.referee import Referee, RefereeConfig
from tests.agent import helpers as h

HACKS = sorted((Path(__file__).parent / "hacks").glob("*.arg"))
TARGET = {"M": 2048, "N": 2048, "K": 2048}


def expectation(path: Path) -> tuple[str, str]:
    m = re.search(r"^# expect: (\w+) \| (.+)$", path.read_text(), re.M)
    assert m, f"{path.name} has no '# expect: STATUS | words' line"
    return m.group(1), m.group(2).strip()


@pytest.fixture(scope="module")
def setting():
    start = Candidate.make(h.GEMM.read_text(), dict(h.NAIVE))
    referee = Referee(InterpBackend(), start, RefereeConfig(h.CHECKS, (TARGET,), hidden=2, scale=3, timeout_s=120))
    baseline = referee.evaluate(start, seed=11)
    assert baseline.ok, baseline.message
    return start, gate.interface_of(gate.build(start), start.source), referee, baseline


def test_every_hack_states_its_expectation():
    assert len(HACKS) >= 8
    for p in HACKS:
        status, _ = expectation(p)
        assert status in ("violated", "wrong", "rejected", "slower"), p.name


@pytest.mark.parametrize("path", HACKS, ids=[p.stem for p in HACKS])
def test_hack_is_stopped_with_its_reason(path: Path, setting) -> None:
    start, iface, referee, baseline = setting
    status, words = expectation(path)
    cand = Candidate.make(path.read_text())
    outcome, _ = gate.check(cand, iface, list(h.CHECKS), seed=3, verifier="interp", interp_timeout_s=60)
    if status == "violated":
        assert outcome.violated and words in outcome.details(), outcome.describe()
        return
    assert not outcome.violated, f"{path.name} should pass the gate (the referee must stop it): {outcome.describe()}"
    ev = referee.evaluate(cand, seed=11)
    if status == "slower":
        assert ev.ok, ev.message
        reward = sum(math.log(b.median_s / t.median_s) for b, t in zip(baseline.timings, ev.timings))
        assert reward <= 0, f"the trick earned {reward:+.3f} over {words}"
        return
    assert ev.status == status and words in ev.message, f"{ev.status}: {ev.message}"
    assert not ev.timings  # nothing wrong is ever timed into a reward


def test_an_assume_the_verifier_accepts_is_still_refused(setting):
    """What made the issue's cheat look proved: the verifier takes a narrowing assume as given (here it
    proves the kernel outright); the referee refuses the assume itself."""
    from argus.agent.verify import analysis_verifier

    if analysis_verifier() is None:
        pytest.skip("argus.analysis.verify is not installed")
    _, iface, referee, _ = setting
    cand = Candidate.make((Path(__file__).parent / "hacks" / "assume_on_blocks.arg").read_text())
    outcome, _ = gate.check(cand, iface, list(h.CHECKS), verifier="analysis", analysis_timeout_s=120)
    assert outcome.status == "verified", outcome.describe()
    ev = referee.evaluate(cand, seed=11)
    assert ev.status == "rejected" and "assume(bm < 24)" in ev.message
