"""The referee against deliberately cheating or broken candidates (CPU stand-ins for the GPU backend)."""

from __future__ import annotations

import os
import time

import pytest

from argus.agent.backend import InterpBackend
from argus.agent.isolate import run_isolated
from argus.agent.program import Candidate
from argus.agent.referee import Evaluation, Referee, RefereeConfig
from tests.agent import helpers as h

TARGETS = ({"M": 4096, "N": 4096, "K": 4096},)


def referee(backend, timeout: float = 30.0, start: Candidate | None = None) -> Referee:
    start = start or Candidate.make(h.GEMM.read_text(), dict(h.NAIVE))
    return Referee(backend, start, RefereeConfig(h.CHECKS, TARGETS, hidden=2, timeout_s=timeout))


def naive() -> Candidate:
    return Candidate.make(h.GEMM.read_text(), dict(h.NAIVE))


def test_honest_candidate_passes_with_estimates():
    ev = referee(InterpBackend()).evaluate(naive(), seed=1)
    assert ev.ok, ev.message
    assert [c.kind for c in ev.checks] == ["visible", "visible", "hidden", "hidden", "scale", "scale", "timed"]
    hidden = [c.dims for c in ev.checks if c.hidden]
    assert all(d not in [dict(s) for s in h.CHECKS] for d in hidden)
    # unseen shapes reach the targets' scale in some dim, and the target itself is checked before timing
    assert all(max(c.dims.values()) > 280 for c in ev.checks if c.kind == "scale")
    (timed,) = [c for c in ev.checks if c.kind == "timed"]
    assert timed.dims == TARGETS[0] and len(timed.sample["blocks"]) >= 3 and timed.sample["compared"] >= 100
    (t,) = ev.timings
    assert t.estimate and ev.estimate and t.median_s > t.floor_s and 50 < t.tflops < 989
    again = Evaluation.from_json(ev.to_json())
    assert again.timings[0].median_s == t.median_s and again.checks[0].dims == ev.checks[0].dims


def test_hidden_shapes_change_with_the_seed():
    r = referee(InterpBackend())
    assert r.shapes_for(1) != r.shapes_for(2) and r.shapes_for(3) == r.shapes_for(3)


@pytest.mark.parametrize("backend,status,words", [
    (h.WrongBackend(), "wrong", "1 wrong"),
    (h.UnwrittenBackend(), "wrong", "unwritten (still poison)"),
    (h.TamperBackend(), "wrong", "wrong"),
    (h.ShownShapesOnlyBackend(), "wrong", "an unseen irregular shape"),
    (h.TooFastBackend(), "rejected", "below the speed-of-light floor"),
    (h.NoCompileBackend(), "compile-error", "too many resources"),
], ids=["wrong", "unwritten", "tamper-inputs", "only-shown-shapes", "impossible-time", "no-compile"])
def test_cheating_and_broken_candidates_are_caught(backend, status, words):
    ev = referee(backend).evaluate(naive(), seed=1)
    assert ev.status == status and words in ev.message, ev.message
    assert not ev.timings  # nothing wrong is ever timed into a reward


def test_a_hanging_candidate_costs_one_timeout():
    ev = referee(h.HangBackend(), timeout=2.0).evaluate(naive(), seed=1)
    assert ev.status == "timeout" and "killed" in ev.message and ev.seconds < 10


def test_a_faulting_candidate_does_not_take_the_tuner_down():
    ev = referee(h.FaultBackend()).evaluate(naive(), seed=1)
    assert ev.status == "fault" and "SIGABRT" in ev.message
    assert referee(InterpBackend()).evaluate(naive(), seed=1).ok  # and the next one runs fine


def test_a_wrong_dsl_program_leaves_poison_visible():
    bad = Candidate.make(h.gemm_variant(("grid=(cdiv(M, BM), cdiv(N, BN))", "grid=(M // BM, cdiv(N, BN))")),
                         dict(h.NAIVE))
    ev = referee(InterpBackend()).evaluate(bad, seed=1)
    assert ev.status == "wrong" and "unwritten" in ev.message


def test_isolation_reports_errors_and_values():
    assert run_isolated(pow, 2, 10, timeout_s=10).value == 1024
    r = run_isolated(int, "x", timeout_s=10)
    assert r.status == "error" and "ValueError" in r.error
    r = run_isolated(os._exit, 3, timeout_s=10)
    assert r.status == "fault" and r.exitcode == 3


def test_a_child_answering_after_its_parent_stopped_listening_stays_quiet():
    # the parent's timeout passed as the child finished: the pipe is closed, the child must not raise
    import multiprocessing as mp

    from argus.agent.isolate import _answer

    recv, send = mp.Pipe(duplex=False)
    recv.close()
    _answer(send, ("ok", b"x" * 1_000_000))
    r = run_isolated(time.sleep, 5, timeout_s=0.5)
    assert r.status == "timeout"


class WholeGridBackend(InterpBackend):
    """The GPU's way of checking a timed shape (the whole grid runs), on the CPU."""

    partial = False


class PoisonAtTargetBackend(WholeGridBackend):
    """Leaves one element of the output unwritten, only at the (unseen before) target shape."""

    def execute(self, compiled, arrays, dims, scalars, blocks=None):
        out = super().execute(compiled, arrays, dims, scalars, blocks)
        if dims == SMALL_TARGET:
            out["C"][-1, -2] = float("nan")
        return out


SMALL_TARGET = {"M": 512, "N": 320, "K": 256}


def test_whole_grid_timed_check_samples_leftover_poison():
    start = naive()
    cfg = RefereeConfig(h.CHECKS, (SMALL_TARGET,), hidden=0, scale=0, timeout_s=60)
    ev = Referee(WholeGridBackend(), start, cfg).evaluate(start, seed=2)
    assert ev.ok, ev.message
    (timed,) = [c for c in ev.checks if c.kind == "timed"]
    assert "blocks" not in timed.sample and timed.sample["compared"] >= 100
    ev = Referee(PoisonAtTargetBackend(), start, cfg).evaluate(start, seed=2)
    assert ev.status == "wrong" and "the target shape M=512,N=320,K=256" in ev.message and "C[511, 318]" in ev.message


def test_the_cost_model_refuses_to_time_an_unchecked_shape():
    from argus.agent.backend import Unchecked, shape_key

    b = InterpBackend()
    c = b.compile(naive().source, naive().defines, None)
    with pytest.raises(Unchecked):
        b.time(c, TARGETS[0], seed=0, reps=1, input_sets=1)
    c.checked.add(shape_key(TARGETS[0]))
    assert b.time(c, TARGETS[0], seed=0, reps=1, input_sets=1).estimate


def test_sampled_blocks_include_the_edges():
    import numpy as np

    from argus.agent.sampling import sample_blocks

    rng = np.random.default_rng(0)
    assert set(sample_blocks((64, 64), rng, 3)) >= {(0, 0), (63, 63), (63, 0), (0, 63)}
    assert sample_blocks((1,), rng, 3) == [(0,)]
    picks = sample_blocks((132,), rng, 3)
    assert picks[:2] == [(0,), (131,)] and len(picks) == 3 and len(set(picks)) == 3


ROUNDED = """
kernel rounded(X: f32[M, N], Y: f32[M, N]):
    param BM = 16
    param BN = 64
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=128
    r = block_id(0)
    c = block_id(1)
    x = load(X[r * BM : +BM, c * BN : +BN])
    store(Y[r * BM : +BM, c * BN : +BN], cast(cast(x, bf16), f32) * 2.0)
reference:
    Y = X * 2
"""


def test_an_output_computed_through_bf16_is_held_to_bf16s_tolerance():
    # an fp32 output that passes through bf16 on its way (as decode attention's OP through its bf16 P) is as
    # exact as bf16, not fp32: the interpreter's run, `argus check`'s numeric tier and the referee agree
    from argus.dsl.parser import parse
    from argus.interp.run import run_interp
    from argus.ir.build import build_kernel

    k = build_kernel(parse(ROUNDED, "rounded.arg").kernels[0], {})
    assert all(c.ok for c in run_interp(k, {"M": 40, "N": 100}, seed=0).checks)
    start = Candidate.make(ROUNDED, {})
    r = Referee(InterpBackend(), start, RefereeConfig(({"M": 32, "N": 64}, {"M": 40, "N": 100}),
                                                      ({"M": 1024, "N": 1024},), hidden=1))
    ev = r.evaluate(start, seed=1)
    assert ev.ok, ev.message
