"""The bit-vector translation decides exactly what Z3's integer arithmetic decides."""

from __future__ import annotations

import random

import z3

from argus.analysis import bitblast


def _term(rng: random.Random, xs: list, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(xs) if rng.random() < 0.7 else z3.IntVal(rng.randint(-9, 9))
    a = _term(rng, xs, depth - 1)
    op = rng.choice(["+", "-", "*c", "div", "mod", "ite", "*"])
    if op == "+":
        return a + _term(rng, xs, depth - 1)
    if op == "-":
        return a - _term(rng, xs, depth - 1)
    if op == "*c":
        return rng.randint(-5, 5) * a
    if op == "*":
        return a * _term(rng, xs, depth - 1)
    if op == "div":
        return a / rng.choice([1, 2, 3, 4, 7, 64])
    if op == "mod":
        return a % rng.choice([2, 3, 5, 8, 128])
    return z3.If(a > _term(rng, xs, depth - 1), a, _term(rng, xs, depth - 1))


def _atom(rng: random.Random, xs: list):
    a, b = _term(rng, xs, 3), _term(rng, xs, 3)
    return rng.choice([a < b, a <= b, a == b, a != b, z3.Not(a >= b)])


def test_agrees_with_integer_arithmetic_on_random_bounded_queries():
    rng = random.Random(7)
    decided = 0
    for case in range(150):
        xs = [z3.Int(f"x{case}_{i}") for i in range(3)]
        bounds = []
        for x in xs:  # ranges spelled the ways the verifier's constraints spell them
            lo, hi = rng.randint(-300, 5), rng.randint(6, 300)
            bounds += [x >= lo, z3.Not(hi < x)] if rng.random() < 0.5 else [lo <= x, x - hi <= 0]
        body = [_atom(rng, xs) for _ in range(rng.randint(1, 3))]
        formulas = bounds + body
        exact = z3.Solver()
        exact.add(*formulas)
        want = exact.check()
        got, values = bitblast.decide(formulas, timeout_ms=5000)
        assert got != z3.unknown, formulas
        assert got == want, (formulas, got, want)
        if got == z3.sat:  # the bit-vector model is an integer model
            m = z3.Solver()
            m.add(*formulas, *[z3.Int(n) == v for n, v in values.items()])
            assert m.check() == z3.sat
        decided += 1
    assert decided == 150


def test_unbounded_or_unsupported_queries_are_not_translated():
    x, y = z3.Ints("x y")
    f = z3.Function("f", z3.IntSort(), z3.IntSort())
    assert bitblast.translate([x >= 0, x % 4 == 1]) is None  # x has no upper bound
    assert bitblast.translate([x >= 0, x <= 9, f(x) == 1]) is None  # a tensor's contents
    assert bitblast.translate([x >= 0, x <= 9, y >= -1, y <= 1, x / y == 2]) is None  # divisor may be <= 0
    assert bitblast.translate([x >= 0, x <= 9, y >= 1, y <= 3, x / y == 2]) is not None


def test_bounds_come_through_linear_constraints_and_bounded_terms():
    m, b, i = z3.Ints("M b i")
    formulas = [m >= 1, m <= 65536, b >= 0, z3.Not((m + 63) / 64 <= b), i - 64 * b >= 0,
                z3.Not(64 <= i - 64 * b)]
    assert bitblast.decide([*formulas, i >= 64 * ((m + 63) / 64)])[0] == z3.unsat  # no row past the last tile
    assert bitblast.decide([*formulas, i >= m])[0] == z3.sat  # the last tile's rows past M exist
    bits = z3.IntVal(0)
    for k in range(7):
        bits = z3.If((m / 2 ** k) % 2 == 1, bits + 2 ** k, bits)
    assert bitblast.decide([m >= 1, m <= 65536, bits != m % 128])[0] == z3.unsat  # seconds for integers


def test_terms_only_inside_conditions_set_the_width():
    # x**3 appears only in an if-condition: its interval must still size the bit-vectors, or x**3 wraps
    # negative in a narrow width and an unsatisfiable query turns satisfiable
    x = z3.Int("x")
    cube = x * x * x
    q = [x >= 200, x <= 300, z3.If(cube < 0, 1, 0) + z3.If(x > 250, 1, 0) >= 1, x <= 250]
    assert bitblast.decide(q)[0] == z3.unsat
    assert bitblast.decide([x >= 200, x <= 300, z3.If(cube > 8_000_000, 1, 0) == 1])[0] == z3.sat
