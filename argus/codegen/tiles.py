"""Register tiles in generated code: which thread holds which element in which array slot.

A register tile is a per-thread array `x[SLOTS]`; its RegLayout (argus/ir/passes/layouts.py) gives
the Fragment map `(thread, slot) -> (row, col)`. Both coordinates split into a thread part (computed
once from the thread index) and a slot part (a constant once the slot loop is unrolled), because every
fragment map is a sum over its (thread, slot) modes.

Kinds (argus/ir/passes/layouts.py): "mma" (an accumulator fragment), "blocked", "rows" (the row
slice of an mma fragment: a 1-D tile of the rows a thread owns, replicated over the lanes that share
them, so only `owner()` stores it) and "index" (arange arithmetic: no registers, evaluated from
row()/col() of the slot that reads it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from argus.codegen.cexpr import c_add, render_layout
from argus.ir import nodes as ir
from argus.ir.fragments import Fragment
from argus.ir.reg_layout import fragment_of
from argus.ir.threads import replica_modes


@dataclass(frozen=True)
class TileMap:
    """A RegLayout resolved for code generation in a scope whose thread index is `tid` (C text)."""

    layout: ir.RegLayout
    tid: str

    @cached_property
    def frag(self) -> Fragment:
        return fragment_of(self.layout)

    @property
    def slots(self) -> int:
        return self.frag.slots

    @property
    def one_d(self) -> bool:
        return len(self.layout.shape) == 1

    def row(self, slot: str | int) -> str | int:
        """Row of the element in `slot` held by this thread (C text, or an int when constant)."""
        return c_add(render_layout(self.frag.row[0], self.tid), render_layout(self.frag.row[1], slot))

    def col(self, slot: str | int) -> str | int:
        return c_add(render_layout(self.frag.col[0], self.tid), render_layout(self.frag.col[1], slot))

    @cached_property
    def run(self) -> int:
        """Largest V such that slots jV..jV+V-1 hold V consecutive columns of one row, starting at a
        column that is a multiple of V for every thread (so a V-element vector access is aligned)."""
        rows, cols = self.frag.table()
        for v in (8, 4, 2):
            if self.slots % v:
                continue
            r = rows.reshape(rows.shape[0], -1, v)
            c = cols.reshape(cols.shape[0], -1, v)
            if (r == r[:, :, :1]).all() and (c - c[:, :, :1] == np.arange(v)).all() and (c[:, :, 0] % v == 0).all():
                return v
        return 1

    @cached_property
    def _replica_modes(self) -> list[tuple[int, int]]:
        """(prefix, size) of the thread modes whose threads hold the same elements (argus.ir.threads)."""
        return replica_modes(self.frag)

    @property
    def replicas(self) -> int:
        """Threads holding each element; only the first of them (owner()) stores."""
        return math.prod(size for _, size in self._replica_modes)

    def owner(self) -> str:
        """C condition: this thread is the first of the replicas of its elements (stores them)."""
        conds = []
        for prefix, size in self._replica_modes:
            if prefix * size == self.frag.threads:
                conds.append(f"{self.tid} < {prefix}")
            else:
                conds.append(f"({self.tid} / {prefix}) % {size} == 0" if prefix > 1 else f"{self.tid} % {size} == 0")
        return " && ".join(conds) or "true"
