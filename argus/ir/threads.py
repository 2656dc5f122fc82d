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


def replica_modes(frag) -> list[tuple[int, int]]:
    """(prefix, size) of a fragment's thread modes that move neither the row nor the column: threads that
    differ only there hold the same elements (replicas; only the first of them stores)."""
    from argus.ir.layout import flatten

    out, prefix = [], 1
    for size, r, c in zip(flatten(frag.row.shape[0]), flatten(frag.row.stride[0]), flatten(frag.col.stride[0]),
                          strict=True):
        if size > 1 and r == 0 and c == 0:
            out.append((prefix, size))
        prefix *= size
    return out


class Holders:
    """The threads that hold each element of a register tile in a fragment layout, as the code generator
    distributes it (argus.codegen.tiles.TileMap): thread t holds element (r, c) iff some register slot s
    has frag.coord(t, s) == (r, c). A register -> shared copy writes each element from its first replica;
    a load from shared is read by every thread that holds the element. The same map serves the verifier
    (z3 constraints) and the interpreter's shadow memory (tables)."""

    def __init__(self, frag, one_d: bool, owner_only: bool):
        self.frag = frag
        self.one_d = one_d
        self.owner_only = owner_only

    def constraints(self, idx: tuple, t, s) -> list:
        """z3: thread t holds element idx in slot s (and, for writes, is its first replica)."""
        r, c = self.frag.coord(t, s)
        want = (0, idx[0]) if self.one_d else tuple(idx)
        out = [t >= 0, t < self.frag.threads, s >= 0, s < self.frag.slots, r == want[0], c == want[1]]
        if self.owner_only:
            out += [fmod(fdiv(t, prefix), size) == 0 for prefix, size in replica_modes(self.frag)]
        return out

    def table(self, shape: tuple[int, ...]):
        """Per element of a tile of `shape`: its writer (owner_only) or its reader (MULTI when several
        threads read it)."""
        import numpy as np

        rows, cols = self.frag.table()
        out = np.full((1, shape[0]) if self.one_d else shape, NONE, np.int64)
        count = np.zeros(out.shape, np.int64)
        owner = np.ones(rows.shape[0], bool)
        if self.owner_only:
            t = np.arange(rows.shape[0])
            for prefix, size in replica_modes(self.frag):
                owner &= (t // prefix) % size == 0
        for t in range(rows.shape[0]):
            if not owner[t]:
                continue
            for s in range(rows.shape[1]):
                r, c = rows[t, s], cols[t, s]
                if r < out.shape[0] and c < out.shape[1]:
                    count[r, c] += 1
                    out[r, c] = t
        out[count > 1] = MULTI
        return (out[0] if self.one_d else out).astype(np.int32)
