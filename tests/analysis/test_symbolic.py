"""argus.analysis.symbolic.CheckedSolver: a `sat` counts only with a model that satisfies the query."""

from __future__ import annotations

import z3

from argus.analysis.symbolic import CheckedSolver, solver


def _bogus_models(monkeypatch, n: int) -> None:
    """The first n models z3 hands out make x = 0, as the model Z3 5.4.1 once gave for an unsat query."""
    real = z3.Solver.model
    left = [n]
    other = z3.Solver()
    other.add(z3.Int("x") == 0)
    assert other.check() == z3.sat
    wrong = other.model()

    def model(self):
        if left[0] > 0:
            left[0] -= 1
            return wrong
        return real(self)
    monkeypatch.setattr(z3.Solver, "model", model)


def test_a_model_that_falsifies_the_query_is_asked_again(monkeypatch):
    x = z3.Int("x")
    s = solver(1000)
    s.add(x > 5)
    _bogus_models(monkeypatch, 1)
    assert s.check() == z3.sat
    assert s.model().eval(x).as_long() > 5


def test_no_model_that_holds_is_unknown_never_sat(monkeypatch):
    x = z3.Int("x")
    s = solver(1000)
    s.add(x > 5)
    _bogus_models(monkeypatch, 1 + CheckedSolver.RETRIES)
    assert s.check() == z3.unknown


def test_assumptions_count_as_asked(monkeypatch):
    x = z3.Int("x")
    s = solver(1000)
    _bogus_models(monkeypatch, 1)
    assert s.check(x > 5) == z3.sat
    assert s.model().eval(x).as_long() > 5


def test_unsat_and_quantified_queries_pass_through():
    x, y = z3.Ints("x y")
    s = solver(1000)
    s.add(x > 5, x < 3)
    assert s.check() == z3.unsat
    f = z3.Function("f", z3.IntSort(), z3.IntSort())
    s = solver(1000)
    s.add(z3.ForAll([y], f(y) >= 0), f(x) == 3)
    assert s.check() == z3.sat
