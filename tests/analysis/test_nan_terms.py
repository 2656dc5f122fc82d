"""Where a term is NaN (argus/analysis/nan_terms.py): -inf through a max reduction, -inf - -inf, the guard."""

from __future__ import annotations

import z3

from argus.analysis import terms as T
from argus.analysis.nan_terms import Flags

n = z3.Int("n")
k = z3.Int("k")


def _masked_max() -> T.Term:
    """max over k in [0, 4) of a score masked to -inf where k >= n (n keys are live)."""
    return T.red("max", (k,), z3.And(k >= 0, k < 4), T.sel(k < n, T.VALUE, T.MINF))


def _sat(*fs) -> bool:
    s = z3.Solver()
    s.add(*[T.zb(f) for f in fs])
    return s.check() == z3.sat


def test_a_max_is_minus_inf_exactly_where_every_member_is_masked() -> None:
    m = Flags().minf(_masked_max())
    assert not _sat(n >= 1, m)  # a live member: the max is finite
    assert _sat(n <= 0, m)
    assert not _sat(n <= 0, z3.Not(T.zb(m)))
    # the dependency checks' structural flag never calls a max -inf: this one is exact
    assert _masked_max().minf is False


def test_minus_inf_minus_minus_inf_is_nan_through_the_exponential_and_a_sum() -> None:
    mx = T.op("max", T.MINF, T.op("*", _masked_max(), T.VALUE))  # the running max after its first step
    alpha = T.op("exp2", T.op("-", T.MINF, mx))
    out = T.op("+", T.op("*", T.ZERO, alpha), T.red("sum", (z3.Int("j"),), True, T.op("exp2", T.op("-", T.MINF, mx))))
    f = Flags()
    assert _sat(n <= 0, f.nan(out))
    assert not _sat(n >= 1, f.nan(out))


def test_the_guard_select_m_eq_minus_inf_is_understood() -> None:
    mx = T.op("max", T.MINF, _masked_max())
    safe = T.op("select", T.cmp("==", mx, T.MINF), T.ZERO, mx)
    f = Flags()
    assert f.nan(T.op("exp2", T.op("-", T.MINF, mx))) is not False
    assert not _sat(f.nan(T.op("exp2", T.op("-", T.MINF, safe))))
    assert not _sat(f.nan(T.op("exp2", T.op("-", T.op("*", T.sel(k < n, T.VALUE, T.MINF), T.VALUE), safe))))
    # the flipped comparison (-inf != m) and a reversed one read the same way
    keep = T.op("select", T.cmp("!=", T.MINF, mx), mx, T.ZERO)
    assert not _sat(f.nan(T.op("-", T.MINF, keep)))


def test_minus_inf_times_an_exact_zero_is_nan() -> None:
    f = Flags()
    zero_when_masked = T.op("exp2", T.sel(k < n, T.VALUE, T.MINF))  # exp2(-inf) == 0
    assert _sat(f.nan(T.op("*", zero_when_masked, T.MINF)), k >= n)
    assert not _sat(f.nan(T.op("*", zero_when_masked, T.MINF)), k < n)


def test_zero_over_a_row_sum_whose_every_member_is_masked_is_nan() -> None:
    # a split of keys in which a row sees none: l = sum exp2(-inf) = 0 and acc = sum 0 * v = 0, so acc / l
    # is 0 / 0; the guarded division (by select(l > 0, l, 1)) is not
    j = z3.Int("j")
    live = z3.And(j >= 0, j < 4)
    p = T.op("exp2", T.sel(j < n, T.VALUE, T.MINF))
    rowsum = T.red("sum", (j,), live, p)
    acc = T.red("sum", (j,), live, T.op("*", p, T.VALUE))
    f = Flags()
    assert _sat(f.zero(rowsum), n <= 0) and not _sat(f.zero(rowsum), n >= 1)
    assert _sat(f.nan(T.op("/", acc, rowsum)), n <= 0)
    assert not _sat(f.nan(T.op("/", acc, rowsum)), n >= 1)
    safe = T.op("select", T.cmp(">", rowsum, T.ZERO), rowsum, T.op("cast", T.VALUE))
    assert not _sat(f.nan(T.op("/", acc, safe)))
