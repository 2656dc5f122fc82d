"""CuTe-style layout algebra: ``Layout(shape, stride)`` over (possibly nested) integer tuples.

A layout is a function from a coordinate (or a linear index) to an integer offset:
``offset = sum_i crd_i * stride_i``. Conventions, fixed for all of ``argus``:

* **Colexicographic order** (column-major, as in CuTe): a linear index ``i`` into shape
  ``(s0, s1, ..., sn)`` is the coordinate ``(i % s0, (i // s0) % s1, ..., i // (s0*...*s_{n-1}))``.
  The *last* mode takes the whole quotient, so an index beyond ``size`` extends the last mode
  (needed by composition and handy for unbounded loop dimensions).
* A coordinate may be given at any level of nesting: an integer where a tuple is expected is a
  linear index into that sub-shape.
* Coordinates and indices may be Python ints, NumPy integer arrays (broadcast together) or z3
  ``Int`` expressions; all arithmetic goes through :mod:`argus.ir.arith`. Shapes and strides are
  always concrete non-negative ints (compile-time parameters are concrete in every check).
* ``str(Layout((4, 8), (8, 1)))`` is ``(4,8):(8,1)``.

The algebra (``coalesce``, ``composition``, ``complement``, divides, products, ``right_inverse``)
follows the definitions of CuTe's layout algebra; the implementation here is independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np

from argus.ir.arith import Value, add, fdiv, fmod, mul

IntTuple = int | tuple["IntTuple", ...]

__all__ = [
    "IntTuple",
    "Tiler",
    "Layout",
    "flatten",
    "product",
    "depth",
    "congruent",
    "col_major_strides",
    "row_major_strides",
    "col_major",
    "row_major",
    "make_layout",
    "idx2crd",
    "crd2idx",
    "crd2offset",
    "coalesce",
    "composition",
    "complement",
    "logical_divide",
    "zipped_divide",
    "tiled_divide",
    "local_tile",
    "logical_product",
    "blocked_product",
    "raked_product",
    "right_inverse",
]


# --------------------------------------------------------------------------------------------
# Integer tuples
# --------------------------------------------------------------------------------------------


def _normalize(t: object, what: str) -> IntTuple:
    """Lists become tuples, NumPy scalars become ints; anything else is rejected early."""
    if isinstance(t, (list, tuple)):
        return tuple(_normalize(x, what) for x in t)
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        return int(t)
    raise TypeError(f"layout {what} must be nested tuples of ints, got {t!r}")


def flatten(t: IntTuple) -> tuple[int, ...]:
    """Leaves of a nested int tuple, left to right."""
    if isinstance(t, tuple):
        return tuple(x for sub in t for x in flatten(sub))
    return (t,)


def product(t: IntTuple) -> int:
    """Product of all leaves (the number of coordinates of a shape)."""
    return reduce(lambda a, b: a * b, flatten(t), 1)


def depth(t: IntTuple) -> int:
    """0 for an int, 1 + deepest child for a tuple."""
    if isinstance(t, tuple):
        return 1 + max((depth(x) for x in t), default=0)
    return 0


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting structure (profile)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b, strict=True))
    return not isinstance(a, tuple) and not isinstance(b, tuple)


def _unflatten(flat: list[int], profile: IntTuple) -> IntTuple:
    """Rebuild ``profile``'s nesting from leaves consumed from the front of ``flat``."""
    if isinstance(profile, tuple):
        return tuple(_unflatten(flat, p) for p in profile)
    return flat.pop(0)


def col_major_strides(shape: IntTuple, start: int = 1) -> IntTuple:
    """Compact colexicographic strides: exclusive prefix products of the flattened shape."""
    out, cur = [], start
    for s in flatten(shape):
        out.append(cur)
        cur *= s
    return _unflatten(out, shape)


def row_major_strides(shape: IntTuple) -> IntTuple:
    """Compact lexicographic strides (last flattened mode contiguous)."""
    out, cur = [], 1
    for s in reversed(flatten(shape)):
        out.append(cur)
        cur *= s
    return _unflatten(out[::-1], shape)


def _leaves(layout: Layout) -> list[tuple[int, int]]:
    """Flattened ``(shape, stride)`` pairs of a layout."""
    return list(zip(flatten(layout.shape), flatten(layout.stride), strict=True))


def _fmt(t: IntTuple) -> str:
    if isinstance(t, tuple):
        return "(" + ",".join(_fmt(x) for x in t) + ")"
    return str(t)


# --------------------------------------------------------------------------------------------
# Coordinates
# --------------------------------------------------------------------------------------------


def idx2crd(idx: Value | tuple, shape: IntTuple) -> Value | tuple:
    """Coordinate congruent with ``shape`` for a linear (colexicographic) index."""
    if isinstance(idx, tuple):
        if not isinstance(shape, tuple) or len(idx) != len(shape):
            raise ValueError(f"coordinate {idx!r} does not match shape {_fmt(shape)}")
        return tuple(idx2crd(i, s) for i, s in zip(idx, shape, strict=True))
    if not isinstance(shape, tuple):
        return idx
    out, rest = [], idx
    for k, s in enumerate(shape):
        if k == len(shape) - 1:
            out.append(idx2crd(rest, s))
        else:
            n = product(s)
            out.append(idx2crd(fmod(rest, n), s))
            rest = fdiv(rest, n)
    return tuple(out)


def crd2offset(crd: Value | tuple, shape: IntTuple, stride: IntTuple) -> Value:
    """Offset of a (possibly partially linearised) coordinate under ``shape:stride``."""
    if isinstance(crd, tuple):
        if not isinstance(shape, tuple) or len(crd) != len(shape):
            raise ValueError(f"coordinate {crd!r} does not match shape {_fmt(shape)}")
        total: Value = 0
        for c, s, d in zip(crd, shape, stride, strict=True):
            total = add(total, crd2offset(c, s, d))
        return total
    if not isinstance(shape, tuple):
        return mul(crd, stride)
    total, rest = 0, crd
    for k, (s, d) in enumerate(zip(shape, stride, strict=True)):
        if k == len(shape) - 1:
            c = rest
        else:
            n = product(s)
            c, rest = fmod(rest, n), fdiv(rest, n)
        total = add(total, crd2offset(c, s, d))
    return total


def crd2idx(crd: Value | tuple, shape: IntTuple) -> Value:
    """Linear colexicographic index of a coordinate."""
    return crd2offset(crd, shape, col_major_strides(shape))


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


class Tabulated:
    """Table-based queries shared by every index -> offset map (Layout, ComposedLayout): they need
    only ``size()`` and ``__call__`` on NumPy index arrays."""

    def to_table(self, n: int | None = None) -> np.ndarray:
        """Offsets of indices ``0..n-1`` (default: the whole domain) as an int64 array."""
        n = self.size() if n is None else n
        vals = self(np.arange(n, dtype=np.int64))
        return np.broadcast_to(np.asarray(vals, dtype=np.int64), (n,)).copy()

    def is_injective(self) -> bool:
        table = self.to_table()
        return len(np.unique(table)) == len(table)

    def is_bijective_on(self, domain_size: int | None = None) -> bool:
        """True iff ``i -> self(i)`` permutes ``[0, n)`` (``n`` defaults to ``size``)."""
        n = self.size() if domain_size is None else domain_size
        return bool(np.array_equal(np.sort(self.to_table(n)), np.arange(n)))


@dataclass(frozen=True)
class Layout(Tabulated):
    """``shape:stride`` function from coordinates to offsets (stride defaults to column-major)."""

    shape: IntTuple
    stride: IntTuple | None = None

    def __post_init__(self) -> None:
        shape = _normalize(self.shape, "shape")
        stride = col_major_strides(shape) if self.stride is None else _normalize(self.stride, "stride")
        if not congruent(shape, stride):
            raise ValueError(f"shape {_fmt(shape)} and stride {_fmt(stride)} are not congruent")
        if any(s < 1 for s in flatten(shape)):
            raise ValueError(f"shape entries must be >= 1: {_fmt(shape)}")
        if any(d < 0 for d in flatten(stride)):
            raise ValueError(f"strides must be >= 0: {_fmt(stride)}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    # -- structure ---------------------------------------------------------------------------
    def size(self) -> int:
        """Number of coordinates (domain ``[0, size)``)."""
        return product(self.shape)

    def cosize(self) -> int:
        """1 + largest offset reached on the domain (strides are non-negative)."""
        return 1 + sum((s - 1) * d for s, d in _leaves(self))

    def rank(self) -> int:
        """Number of top-level modes (an int shape has rank 1)."""
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    def depth(self) -> int:
        return depth(self.shape)

    def __getitem__(self, i: int) -> Layout:
        """Top-level mode ``i`` as a layout."""
        if not isinstance(self.shape, tuple):
            if i in (0, -1):
                return self
            raise IndexError(i)
        return Layout(self.shape[i], self.stride[i])  # type: ignore[index]

    def modes(self) -> list[Layout]:
        return [self[i] for i in range(self.rank())]

    def flatten(self) -> Layout:
        """Same function with all nesting removed."""
        return Layout(flatten(self.shape), flatten(self.stride))  # type: ignore[arg-type]

    # -- evaluation --------------------------------------------------------------------------
    def __call__(self, *crd: Value | tuple) -> Value:
        """``L(i)`` for a linear index, ``L((i, j))`` or ``L(i, j)`` for a coordinate."""
        if not crd:
            raise TypeError("a layout needs an index or a coordinate")
        c = crd[0] if len(crd) == 1 else tuple(crd)
        return crd2offset(c, self.shape, self.stride)  # type: ignore[arg-type]

    def idx2crd(self, idx: Value) -> Value | tuple:
        return idx2crd(idx, self.shape)

    def crd2idx(self, crd: Value | tuple) -> Value:
        return crd2idx(crd, self.shape)


    # -- algebra as methods ------------------------------------------------------------------
    def coalesce(self) -> Layout:
        return coalesce(self)

    def compose(self, other: Tiler) -> Layout:
        return composition(self, other)

    def complement(self, cotarget: int | None = None) -> Layout:
        return complement(self, cotarget)

    def right_inverse(self) -> Layout:
        return right_inverse(self)

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"


# What ``composition``/``logical_divide`` accept on the right: a layout, ``n`` (meaning ``n:1``) or a
# tuple applied mode by mode (``None`` keeps a mode).
Tiler = Layout | int | tuple["Tiler | None", ...]


def col_major(shape: IntTuple) -> Layout:
    """Compact column-major (colexicographic) layout of ``shape``."""
    return Layout(shape, col_major_strides(_normalize(shape, "shape")))


def row_major(shape: IntTuple) -> Layout:
    """Compact row-major layout of ``shape`` (last flattened mode contiguous)."""
    return Layout(shape, row_major_strides(_normalize(shape, "shape")))


def _as_layout(x: Layout | int) -> Layout:
    return x if isinstance(x, Layout) else Layout(x, 1)


def make_layout(*layouts: Layout | int) -> Layout:
    """Concatenate layouts as the top-level modes of a new layout (ints mean ``n:1``)."""
    ls = [_as_layout(x) for x in layouts]
    return Layout(tuple(x.shape for x in ls), tuple(x.stride for x in ls))  # type: ignore[misc]


def _from_modes(modes: list[tuple[int, int]]) -> Layout:
    """Flat layout from ``(shape, stride)`` pairs; a single mode gives an int-shaped layout."""
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(*modes[0])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


# --------------------------------------------------------------------------------------------
# Algebra
# --------------------------------------------------------------------------------------------


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Fewest modes with the same function on ``[0, size)``.

    Drops size-1 modes and merges neighbours ``(s0:d0, s1:d1)`` with ``d1 == s0*d0``. With a tuple
    ``profile`` each top-level mode is coalesced separately, so the rank is kept.
    """
    if isinstance(profile, tuple):
        r = len(profile)
        if r > layout.rank():
            raise ValueError("coalesce profile has more modes than the layout")
        kept = [coalesce(layout[i], profile[i]) for i in range(r)]
        return make_layout(*kept, *layout.modes()[r:])
    modes: list[tuple[int, int]] = []
    for s, d in _leaves(layout):
        if s == 1:
            continue
        if modes and modes[-1][0] * modes[-1][1] == d:
            modes[-1] = (modes[-1][0] * s, modes[-1][1])
        else:
            modes.append((s, d))
    return _from_modes(modes)


def _compose_1d(a: Layout, s: int, d: int) -> Layout:
    """``a`` composed with the rank-1 layout ``s:d``: the layout ``j -> a(j*d)`` for ``j < s``.

    First "divide" ``d`` out of ``a``'s modes (skipping whole modes or shrinking one), then "take"
    ``s`` coordinates from what is left. Raises when ``j -> a(j*d)`` is not a layout.
    """
    if s == 1:
        return Layout(1, 0)
    if d == 0:
        return Layout(s, 0)
    modes = _leaves(coalesce(a))
    out: list[tuple[int, int]] = []
    rest_d, rest_s = d, s
    for k, (m, e) in enumerate(modes):
        last = k == len(modes) - 1
        if rest_d > 1:
            if last:  # the last mode is unbounded
                e, rest_d = e * rest_d, 1
            elif rest_d % m == 0:
                rest_d //= m
                continue
            elif m % rest_d == 0:
                m, e, rest_d = m // rest_d, e * rest_d, 1
            elif (rest_s - 1) * rest_d < m:  # every j*d stays inside this mode
                out.append((rest_s, e * rest_d))
                break
            else:
                raise ValueError(f"composition: stride {d} does not divide layout {a}")
        if last or rest_s <= m:
            out.append((rest_s, e))
            break
        if rest_s % m != 0:
            raise ValueError(f"composition: shape {s} is not compatible with layout {a}")
        out.append((m, e))
        rest_s //= m
    return _from_modes(out)


def composition(a: Layout, b: Tiler) -> Layout:
    """``a ∘ b``: ``composition(a, b)(c) == a(b(c))`` for every coordinate ``c`` of ``b``.

    ``b`` may be a layout (result congruent with it), an int ``n`` (meaning ``n:1``) or a tuple
    "tiler" applied mode by mode to ``a`` (``None`` leaves a mode unchanged). Requires the usual
    divisibility conditions; raises ``ValueError`` when the result is not a layout.
    """
    if isinstance(b, tuple):
        if len(b) > a.rank():
            raise ValueError(f"tiler {b!r} has more modes than layout {a}")
        parts = [a[i] if t is None else composition(a[i], t) for i, t in enumerate(b)]
        return make_layout(*parts, *a.modes()[len(b) :])
    b = _as_layout(b)
    if isinstance(b.shape, tuple):
        _check_no_carry(a, b)
        return make_layout(*(composition(a, m) for m in b.modes()))
    return _compose_1d(a, b.shape, b.stride)  # type: ignore[arg-type]


def _check_no_carry(a: Layout, b: Layout) -> None:
    """Composing mode by mode is only ``a ∘ b`` if ``b``'s modes add up without carries in ``a``.

    ``a(x + y) == a(x) + a(y)`` needs ``x`` and ``y`` to occupy different digits of ``a``'s
    mixed-radix index space. Sufficient (and checked): either no mode boundary of ``a`` lies inside
    ``b``'s range (``a`` is affine there), or ``b``'s modes, sorted by stride, cover disjoint
    place-value ranges ``[d, d*s)`` nesting by divisibility, and every boundary of those ranges is
    comparable under divisibility with every boundary of ``a`` inside ``b``'s range.
    """
    cosize_b = b.cosize()
    boundaries, prefix = [], 1
    for m, _ in _leaves(coalesce(a))[:-1]:
        prefix *= m
        if prefix >= cosize_b:
            break
        boundaries.append(prefix)
    if not boundaries:
        return
    reach = 1
    for d, s in sorted((d, s) for s, d in _leaves(b) if s > 1 and d > 0):
        if d % reach:
            raise ValueError(f"composition: the modes of {b} overlap across a mode boundary of {a}")
        if any(v % p and p % v for v in (d, d * s) for p in boundaries):
            raise ValueError(f"composition: {b} straddles a mode boundary of {a} with a carry")
        reach = d * s


def complement(a: Layout, cotarget: int | None = None) -> Layout:
    """Layout ``c`` of the offsets "missing" from ``a`` up to ``cotarget`` (default ``cosize(a)``).

    ``make_layout(a, c)`` is injective, ``a`` and ``c`` share only offset 0, and together they
    cover at least ``[0, cotarget)``. ``c`` is sorted (increasing strides). Raises when ``a``
    overlaps itself in a way no complement can fill (non-dividing sorted strides).
    """
    cotarget = a.cosize() if cotarget is None else cotarget
    modes = sorted((d, s) for s, d in _leaves(a) if s != 1 and d != 0)
    out: list[tuple[int, int]] = []
    cur = 1
    for d, s in modes:
        if d % cur != 0:
            raise ValueError(f"complement: layout {a} is not complementable")
        out.append((d // cur, cur))
        cur = s * d
    out.append((-(-cotarget // cur), cur))
    return coalesce(_from_modes(out))


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """Split ``a`` into (tile, rest): ``a ∘ (t, complement(t, size(a)))``; by mode for tuples.

    For a tuple tiler mode ``i`` of the result is ``(tile_i, rest_i)``.
    """
    if isinstance(tiler, tuple):
        if len(tiler) > a.rank():
            raise ValueError(f"tiler {tiler!r} has more modes than layout {a}")
        parts = [a[i] if t is None else logical_divide(a[i], t) for i, t in enumerate(tiler)]
        return make_layout(*parts, *a.modes()[len(tiler) :])
    t = _as_layout(tiler)
    return composition(a, make_layout(t, complement(t, a.size())))


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """``((tile modes...), (rest modes...))``: mode 0 indexes inside a tile, mode 1 picks the tile."""
    if not isinstance(tiler, tuple):
        return logical_divide(a, tiler)
    d = logical_divide(a, tiler)
    n = len(tiler)
    tiles = [d[i][0] if tiler[i] is not None else Layout(1, 0) for i in range(n)]
    rests = [d[i][1] if tiler[i] is not None else d[i] for i in range(n)] + d.modes()[n:]
    return make_layout(make_layout(*tiles), make_layout(*rests))


def tiled_divide(a: Layout, tiler: Tiler) -> Layout:
    """``((tile modes...), rest_0, rest_1, ...)``."""
    z = zipped_divide(a, tiler)
    if not isinstance(tiler, tuple):
        return z
    return make_layout(z[0], *z[1].modes())


def local_tile(a: Layout, tile_shape: tuple[int, ...], tile_crd: Value | tuple) -> tuple[Value, Layout]:
    """Cut ``a`` into ``tile_shape`` blocks and pick block ``tile_crd`` (may be symbolic).

    Returns ``(base, tile)``: in-tile coordinate ``c`` of that block is at offset ``base + tile(c)``.
    """
    z = zipped_divide(a, tile_shape)
    return z[1](tile_crd), z[0]


def logical_product(a: Layout, b: Layout | int) -> Layout:
    """``(a, complement(a, size(a)*cosize(b)) ∘ b)``: ``b`` repeats ``a`` over the unused offsets."""
    b = _as_layout(b)
    return make_layout(a, composition(complement(a, a.size() * b.cosize()), b))


def _pad_rank(x: Layout, r: int) -> Layout:
    modes = x.modes()
    return make_layout(*modes, *([Layout(1, 0)] * (r - len(modes))))


def blocked_product(a: Layout, b: Layout | int) -> Layout:
    """Mode-wise ``((a_i, b_i), ...)``: ``a`` is the block, ``b`` the arrangement of blocks."""
    b = _as_layout(b)
    r = max(a.rank(), b.rank())
    lp = logical_product(_pad_rank(a, r), _pad_rank(b, r))
    return make_layout(*(make_layout(lp[0][i], lp[1][i]) for i in range(r)))


def raked_product(a: Layout, b: Layout | int) -> Layout:
    """Mode-wise ``((b_i, a_i), ...)``: ``a``'s elements are interleaved ("raked") across ``b``."""
    b = _as_layout(b)
    r = max(a.rank(), b.rank())
    lp = logical_product(_pad_rank(a, r), _pad_rank(b, r))
    return make_layout(*(make_layout(lp[1][i], lp[0][i]) for i in range(r)))


def right_inverse(a: Layout) -> Layout:
    """Largest ``r`` with ``a(r(i)) == i`` for ``i < size(r)``; ``a``'s full inverse when bijective.

    Sorts ``a``'s modes by stride and keeps the prefix whose strides are ``1, s0, s0*s1, ...``; each
    kept mode maps back to its position in ``a``'s colexicographic index space.
    """
    shapes, strides = flatten(a.shape), flatten(a.stride)
    positions = flatten(col_major_strides(shapes))
    modes = sorted((d, s, p) for s, d, p in zip(shapes, strides, positions, strict=True) if s != 1 and d != 0)
    out: list[tuple[int, int]] = []
    cur = 1
    for d, s, p in modes:
        if d != cur:
            break
        out.append((s, p))
        cur *= s
    return coalesce(_from_modes(out))
