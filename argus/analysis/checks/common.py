"""Helpers shared by the checks: the analysis state they read and thread attribution."""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.analysis.symbolic import Context
from argus.analysis.trace import Trace
from argus.ir import nodes as ir


@dataclass
class Analysis:
    kernel: ir.Kernel
    defines: dict[str, object]
    traces: list[Trace]
    contexts: list[Context]
    notes: list[str] = field(default_factory=list)
    uncertified: list = field(default_factory=list)  # truncated loops without a periodicity certificate
    # truncated loops certified except for the stored data's checks (a mask against a far constant)
    data_uncertified: list = field(default_factory=list)


def owner_of_accumulator(layout: ir.FragmentLayout | None, r: int, c: int) -> int | None:
    """The thread holding accumulator element (r, c) under an mma's fragment layout."""
    if layout is None or not isinstance(r, int) or not isinstance(c, int):
        return None
    from argus.ir import fragments

    m, n = layout.tile
    try:
        if layout.instr == "wgmma":
            frag = fragments.wgmma_block_fragment(m, n, layout.warps_m, layout.warps_n, instr_n=layout.inst_shape[1])
        else:
            frag = fragments.mma_sync_block_fragment("C", m, n, 16, layout.warps_m, layout.warps_n)
        t, _slot = frag.owner(r % m, c % n)
        return int(t)
    except Exception:  # an unusual tiling the fragment helpers do not cover: no thread named
        return None
