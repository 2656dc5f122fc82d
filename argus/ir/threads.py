"""Which thread touches which element: one definition for the interpreter, the verifier and codegen.

Tile copies are spread over the threads of the block (or role) in 16-byte vectors, row-major over the
tile: element with flat index f belongs to vector f // V (V = 16 / element bytes) and that vector to
thread (f // V) % T. Shared-memory operands of an `mma` are read by many threads at once (every warp
whose fragment covers the row or column): they are reported as MULTI.

The functions take Python ints, NumPy arrays or z3 integers (through argus.ir.arith).
"""

from __future__ import annotations

from argus.ir.arith import fdiv, fmod

VECTOR_BYTES = 16
MULTI = -1  # read by several threads
NONE = -2  # no access recorded


def vector_elems(elem_bytes: int) -> int:
    return max(1, VECTOR_BYTES // elem_bytes)


def flat_index(idx: tuple, shape: tuple[int, ...]):
    """Row-major flat index of a tile element (works on symbolic indices)."""
    f = idx[0]
    for i, n in zip(idx[1:], shape[1:]):
        f = f * n + i
    return f


def copy_thread(idx: tuple, shape: tuple[int, ...], elem_bytes: int, threads: int):
    """The thread that copies element `idx` of a tile of `shape`."""
    return fmod(fdiv(flat_index(idx, shape), vector_elems(elem_bytes)), threads)
