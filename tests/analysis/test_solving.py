"""argus.analysis.solving: nonlinear schedule queries with division by runtime counts."""

from __future__ import annotations

import z3

from argus.analysis.solving import nonlinear_check, purify


def _linearised_tiles():
    """Two tile indices of a persistent loop over (row block, head, batch) that store the same tile."""
    S, H, B, t, u = z3.Ints("S H B t u")
    n = (S + 31) / 32
    count = n * H * B
    def at(x):
        return (x % n, x / n % H, x / (n * H))
    dims = [S >= 1, S <= 65536, H >= 1, H <= 65536, B >= 1, B <= 65536]
    same = [a == b for a, b in zip(at(t), at(u))]
    return [*dims, t >= 0, t < count, u >= 0, u < count, t != u, *same], [S <= 512, H <= 512, B <= 512]


def test_purify_states_the_nesting_theorem_for_product_divisors():
    fs, _ = _linearised_tiles()
    s = z3.Solver()
    s.set("rlimit", 4_000_000)  # about a second: without the theorem this is a timeout
    s.add(*purify(fs))
    assert s.check() == z3.unsat


def test_injective_schedule_is_proved_whatever_ran_before():
    fs, prefer = _linearised_tiles()
    for _ in range(3):  # the shared context grows between calls; the verdict does not move
        r, _m = nonlinear_check(fs, prefer, timeout_ms=1000, purified_first=True)
        assert r == z3.unsat
        z3.Solver().check(z3.Int("noise") * z3.Int("more") == 7)


def test_a_collision_comes_back_with_a_model_in_the_callers_context():
    S, H, t, u = z3.Ints("S H t u")
    n = (S + 31) / 32
    # forgetting the head in the stored tile: tiles t and t + n collide
    fs = [S >= 33, H >= 2, S <= 4096, H <= 64, t >= 0, u >= 0, t < n * H, u < n * H, t != u, t % n == u % n]
    r, m = nonlinear_check(fs, [S <= 512], timeout_ms=2000, purified_first=True)
    assert r == z3.sat
    assert m.eval(t % ((S + 31) / 32) == u % ((S + 31) / 32), model_completion=True)
    assert z3.is_true(m.eval(t != u, model_completion=True))
