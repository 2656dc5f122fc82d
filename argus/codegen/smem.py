"""The shared-memory plan of a generated kernel: where each buffer and mbarrier lives, and how an element
of a buffer's tile is addressed (its swizzle mode's layout, or an explicit `layout=` placement)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from argus.codegen.cexpr import render_coord, render_layout, render_swizzle
from argus.ir import nodes as ir
from argus.ir.layout import Layout
from argus.ir.swizzle import ComposedLayout, Swizzle


@dataclass(frozen=True)
class Buffer:
    name: str
    alloc: ir.AllocShared
    offset: int  # bytes from the aligned base of dynamic shared memory
    tile: ComposedLayout  # the 2-D tile of the last two axes (shared_tile_layout)
    rows: int
    cols: int
    stage_elems: int  # elements between consecutive leading (stage) indices

    @property
    def elem_bytes(self) -> int:
        return self.alloc.dtype.bytes

    @property
    def explicit(self) -> tuple | None:
        """A `layout=` placement (argus/ir/smem_layout.py) instead of a swizzle mode."""
        return self.alloc.layout

    @property
    def nbytes(self) -> int:
        lead = math.prod(self.alloc.shape[:-2]) if len(self.alloc.shape) > 2 else 1
        return lead * self.stage_elems * self.elem_bytes

    def element(self, r: str | int, c: str | int, swizzled: bool = True) -> str | int:
        """Element offset of (r, c) in the buffer's 2-D tile, as C (an int when constant)."""
        if self.explicit is not None:
            coords = (c,) if len(self.alloc.shape) == 1 else (r, c)
            return render_placement(self.explicit, coords)
        off = render_coord(self.tile.layout, (r, c))
        return render_swizzle(self.tile.swizzle, off) if swizzled else off


def render_placement(desc: tuple, coords: tuple[str | int, ...]) -> str | int:
    """An explicit placement descriptor (layout / swizzle / compose) rendered as C."""
    if desc[0] == "layout":
        lay = Layout(_tup(desc[1]), _tup(desc[2]))
        return render_layout(lay, coords[0]) if len(coords) == 1 else render_coord(lay, coords)
    if desc[0] == "compose":
        x = render_placement(desc[2], coords)
        outer = desc[1]
        if outer[0] == "swizzle":
            return render_swizzle(Swizzle(*outer[1:]), x)
        return render_placement(outer, (x,))
    raise ValueError(f"unknown layout descriptor {desc!r}")


def _tup(x):
    return tuple(_tup(v) for v in x) if isinstance(x, (tuple, list)) else x


@dataclass(frozen=True)
class MBarrier:
    name: str
    offset: int
    n: int
    count: int
    scale: int = 1  # hardware arrivals per IR arrival (one per warp of the arriving scope)
