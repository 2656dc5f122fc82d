"""Backend-agnostic integer arithmetic for the layout algebra.

Every layout, swizzle and fragment map in ``argus.ir`` is written once against these helpers so that
the *same* code evaluates on

* Python ``int`` (the code generator, constant folding),
* NumPy integer arrays (the interpreter, exhaustive table checks),
* z3 ``Int`` expressions (the analyzer's proofs) and, for convenience, z3 bit-vectors (unsigned).

Only division/modulo by positive compile-time constants is ever needed, which keeps z3 queries in
linear integer arithmetic. Bitwise XOR has no native z3 ``Int`` operator, so it is expressed bit by
bit with div/mod by powers of two: ``bit_i(x) = (x / 2**i) % 2`` and ``xor_i = (a_i + b_i) % 2``.

All helpers assume non-negative operands (layout offsets and indices are never negative); for those,
z3's Euclidean ``/`` and ``%`` coincide with Python's floor ``//`` and ``%``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# A value the helpers accept: int, numpy integer scalar/array, z3 ArithRef/BitVecRef.
Value = Any

__all__ = [
    "Value",
    "is_z3",
    "is_const",
    "fdiv",
    "fmod",
    "add",
    "mul",
    "bit_field",
    "xor_bits",
    "xor_const_bits",
    "select",
]


def is_z3(x: object) -> bool:
    """True for z3 expressions. z3 is imported only when the value could plausibly be one."""
    if isinstance(x, (int, np.integer, np.ndarray, bool, np.bool_)):
        return False
    if not type(x).__module__.startswith("z3"):
        return False
    import z3

    return isinstance(x, z3.ExprRef)


def _is_bv(x: object) -> bool:
    import z3

    return z3.is_bv(x)


def is_const(x: object, value: int | None = None) -> bool:
    """True when ``x`` is a plain Python/NumPy integer scalar (optionally equal to ``value``)."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return value is None or int(x) == value
    return False


def _check_divisor(c: int) -> None:
    if not isinstance(c, (int, np.integer)) or c <= 0:
        raise ValueError(f"divisor must be a positive constant int, got {c!r}")


def fdiv(x: Value, c: int) -> Value:
    """Floor division of a non-negative ``x`` by a positive constant ``c``."""
    _check_divisor(c)
    if c == 1:
        return x
    if is_z3(x):
        if _is_bv(x):
            import z3

            return z3.UDiv(x, c)
        return x / c
    return x // c


def fmod(x: Value, c: int) -> Value:
    """``x mod c`` (result in ``[0, c)``) for non-negative ``x`` and positive constant ``c``."""
    _check_divisor(c)
    if is_z3(x):
        if c == 1:
            return 0
        if _is_bv(x):
            import z3

            return z3.URem(x, c)
        return x % c
    return x % c


def add(a: Value, b: Value) -> Value:
    """``a + b`` that drops literal zeros, so symbolic sums stay small."""
    if is_const(a, 0) and not isinstance(b, np.ndarray):
        return b
    if is_const(b, 0) and not isinstance(a, np.ndarray):
        return a
    return a + b


def mul(x: Value, c: int) -> Value:
    """``x * c`` for a constant ``c``; folds ``c == 1`` and symbolic ``c == 0``."""
    if c == 1:
        return x
    if c == 0 and is_z3(x):
        return 0
    return x * c


def bit_field(x: Value, lo: int, n: int) -> Value:
    """Bits ``[lo, lo + n)`` of ``x`` as an integer in ``[0, 2**n)``."""
    if n < 0 or lo < 0:
        raise ValueError("bit_field needs lo >= 0 and n >= 0")
    if n == 0:
        return 0
    return fmod(fdiv(x, 1 << lo), 1 << n)


def xor_bits(a: Value, b: Value, nbits: int) -> Value:
    """XOR of two values known to lie in ``[0, 2**nbits)``.

    Native ``^`` for ints/NumPy/bit-vectors; for z3 ``Int`` the bitwise sum
    ``sum_i ((a_i + b_i) % 2) * 2**i``. When one side is a constant its bits are known, so the
    symbolic side's bit is kept (``b_i == 0``) or flipped (``1 - a_i``) with no extra modulo.
    """
    symbolic = is_z3(a) or is_z3(b)
    if not symbolic or (_is_bv(a) if is_z3(a) else _is_bv(b)):
        return a ^ b
    if is_const(a):
        a, b = b, a
    result: Value = 0
    for i in range(nbits):
        ai = bit_field(a, i, 1)
        if is_const(b):
            bit = ai if (int(b) >> i) & 1 == 0 else 1 - ai
        else:
            bit = fmod(ai + bit_field(b, i, 1), 2)
        result = add(result, mul(bit, 1 << i))
    return result


# The name used in the design notes; XOR where either side may be a constant.
xor_const_bits = xor_bits


def select(cond: Value, a: Value, b: Value) -> Value:
    """``a if cond else b``, elementwise for NumPy and ``z3.If`` for symbolic operands."""
    if is_z3(cond) or is_z3(a) or is_z3(b):
        import z3

        if isinstance(cond, (bool, np.bool_)):
            return a if cond else b
        return z3.If(cond, a, b)
    if isinstance(cond, np.ndarray) or isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.where(cond, a, b)
    return a if cond else b
