"""XOR swizzles and swizzled (composed) layouts, including the Hopper/Ampere shared-memory modes.

``Swizzle(B, M, S)`` has CuTe's semantics. For ``S > 0`` it XORs the ``B`` bits at
``[M+S, M+S+B)`` (the *source*, "which 8-row group / row") into the ``B`` bits at ``[M, M+B)``
(the *target*, "which 16-byte chunk"); all other bits pass through::

    Swizzle(B, M, S)(x) = x ^ (((x >> (M+S)) & (2**B - 1)) << M)        # S >= 0

For ``S < 0`` source and target swap roles (bits ``[M, M+B)`` go into ``[M-S, M-S+B)``).
``B == 0`` is the identity. ``S == 0`` with ``B > 0`` clears the target bits (not bijective);
the bijectivity checks catch that.

The hardware swizzle modes (TMA ``CU_TENSOR_MAP_SWIZZLE_{32B,64B,128B}``, wgmma descriptors, and
the software swizzles used with ``cp.async`` on sm_80) are defined on *byte addresses* inside a
pattern-aligned buffer: with ``b = log2(mode_bytes / 16)``, byte-address bits ``[4, 4+b)`` (the
16-byte chunk in a row) are XORed with bits ``[7, 7+b)`` (the row within the 8-row pattern), i.e.
``Swizzle(b, 4, 3)`` on bytes. The pattern repeats every ``8 * mode_bytes`` bytes (1024 B for 128B),
which is the required base alignment. On element offsets of ``e``-byte elements the same map is
``Swizzle(b, 4 - log2(e), 3)``, e.g. ``Swizzle(3, 3, 3)`` for 128B with bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from argus.ir.arith import Value, add, bit_field, mul, xor_bits
from argus.ir.layout import IntTuple, Layout, Tabulated, Tiler, composition, local_tile

__all__ = [
    "Swizzle",
    "ComposedLayout",
    "SWIZZLE_MODES",
    "byte_swizzle",
    "smem_swizzle",
]

# Shared-memory swizzle modes, by the byte width of one swizzled row (0 = no swizzle).
SWIZZLE_MODES: tuple[int, ...] = (0, 32, 64, 128)


@dataclass(frozen=True)
class Swizzle:
    """``x -> x ^ ((x >> src) & mask) << dst`` with CuTe's ``(B, M, S)`` parameters (see module doc)."""

    bits: int  # B: number of bits XORed
    base: int  # M: lowest bit kept untouched below the swizzled field
    shift: int  # S: distance between source and target fields (sign picks the direction)

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise ValueError(f"invalid swizzle {self}: B and M must be >= 0")

    @property
    def src_lo(self) -> int:
        """Lowest bit of the source field."""
        return self.base + max(0, self.shift)

    @property
    def dst_lo(self) -> int:
        """Lowest bit of the target field (the bits that change)."""
        return self.base - min(0, self.shift)

    @property
    def period(self) -> int:
        """``f(x + k*period) == f(x) + k*period``: the size of one repeating pattern (alignment)."""
        if self.bits == 0:
            return 1
        return 1 << (max(self.src_lo, self.dst_lo) + self.bits)

    def is_identity(self) -> bool:
        return self.bits == 0

    def __call__(self, x: Value) -> Value:
        """Swizzle an offset; ``x`` may be an int, a NumPy array or a z3 expression."""
        if self.bits == 0:
            return x
        # Written with div/mod/add only, so one formula serves ints, NumPy and z3 Int:
        # replace the target field t by t XOR s.
        t = bit_field(x, self.dst_lo, self.bits)
        s = bit_field(x, self.src_lo, self.bits)
        return add(x, mul(xor_bits(t, s, self.bits) - t, 1 << self.dst_lo))

    def to_table(self, n: int) -> np.ndarray:
        return np.asarray(self(np.arange(n, dtype=np.int64)), dtype=np.int64)

    def is_bijective(self, domain_size: int) -> bool:
        """Exhaustive: does the swizzle permute ``[0, domain_size)``?"""
        return bool(np.array_equal(np.sort(self.to_table(domain_size)), np.arange(domain_size)))

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@dataclass(frozen=True)
class ComposedLayout(Tabulated):
    """``c -> swizzle(offset + layout(c))``: a swizzled layout (CuTe's ``Swizzle o offset o Layout``).

    ``offset`` is the pre-swizzle position of this (sub-)tile inside a pattern-aligned buffer; it
    may be symbolic. Swizzles are applied to the *absolute* offset because the hardware swizzles
    address bits, which is why a sub-tile carries its base instead of being re-based at 0.
    """

    swizzle: Swizzle
    offset: Value
    layout: Layout

    def __call__(self, *crd: Value | tuple) -> Value:
        return self.swizzle(add(self.offset, self.layout(*crd)))

    @property
    def shape(self) -> IntTuple:
        return self.layout.shape

    def size(self) -> int:
        return self.layout.size()

    def cosize(self) -> int:
        """1 + the largest offset reached (needs a concrete ``offset``)."""
        return int(self.to_table().max()) + 1

    def rank(self) -> int:
        return self.layout.rank()


    def compose(self, other: Tiler) -> ComposedLayout:
        """Re-index the logical side: ``swizzle(offset + (layout o other)(c))``."""
        return ComposedLayout(self.swizzle, self.offset, composition(self.layout, other))

    def local_tile(self, tile_shape: tuple[int, ...], tile_crd: Value | tuple) -> ComposedLayout:
        """Block ``tile_crd`` of the tiling by ``tile_shape``, keeping absolute (swizzled) addresses."""
        base, tile = local_tile(self.layout, tile_shape, tile_crd)
        return ComposedLayout(self.swizzle, add(self.offset, base), tile)

    def __str__(self) -> str:
        return f"{self.swizzle} o {self.offset} o {self.layout}"


def _log2_exact(x: int, what: str) -> int:
    if x < 1 or x & (x - 1):
        raise ValueError(f"{what} must be a power of two, got {x}")
    return x.bit_length() - 1


def byte_swizzle(mode_bytes: int) -> Swizzle:
    """The hardware swizzle on byte addresses: ``Swizzle(log2(mode/16), 4, 3)``; 0 = identity."""
    if mode_bytes not in SWIZZLE_MODES:
        raise ValueError(f"swizzle mode must be one of {SWIZZLE_MODES} bytes, got {mode_bytes}")
    bits = 0 if mode_bytes == 0 else _log2_exact(mode_bytes // 16, "swizzle mode")
    return Swizzle(bits, 4, 3)


def smem_swizzle(mode_bytes: int, elem_bytes: int) -> Swizzle:
    """The same swizzle expressed on element offsets of ``elem_bytes``-byte elements (<= 16 B)."""
    e = _log2_exact(elem_bytes, "element size")
    if e > 4:
        raise ValueError("elements wider than 16 bytes cannot be swizzled at 16-byte granularity")
    sw = byte_swizzle(mode_bytes)
    return Swizzle(sw.bits, sw.base - e, sw.shift)
