"""Shared buffers' address maps: one-to-one, inside the allocation.

A swizzled buffer is allocated exactly its elements, so the XOR swizzle (address bits of an 8-row x
swizzle-width atom) must map them one-to-one onto themselves: rows that do not fill whole atoms map
some elements outside the buffer or onto each other. An explicit `layout=` (padding rows against bank
conflicts: `layout((BM, BK), (BK + 8, 1))`) is allocated its cosize (largest offset + 1) by the code
generator and the interpreter: its offsets must be distinct and non-negative. Checked exhaustively with
the layout algebra.
"""

from __future__ import annotations

import math

import numpy as np

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, VERIFIED, VIOLATED, Counterexample, Finding, Replay
from argus.ir import nodes as ir
from argus.ir.smem_layout import offsets as smem_offsets
from argus.ir.swizzle import smem_swizzle
from argus.ir.transform import walk

CODES = ["swizzle-bijective"]


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status, findings = VERIFIED, []
    for s in walk(a.kernel.body):
        if not isinstance(s, ir.AllocShared) or not (s.swizzle or s.layout):
            continue
        n = math.prod(s.shape)
        if s.layout is not None:
            phys = smem_offsets(s.layout, s.shape).reshape(-1)
        else:
            phys = np.asarray(smem_swizzle(s.swizzle, s.dtype.bytes)(np.arange(n)))
        # an explicit layout is allocated its cosize; a swizzle exactly the buffer
        limit = int(phys.max()) + 1 if s.layout is not None and phys.size else n
        outside = np.nonzero((phys < 0) | (phys >= limit))[0]
        _, first, counts = np.unique(phys, return_index=True, return_counts=True)
        dup = np.nonzero(counts > 1)[0]
        if not len(outside) and not len(dup):
            continue
        if len(outside):
            i = int(outside[0])
            what = (f"element {tuple(int(x) for x in np.unravel_index(i, s.shape))} is placed at offset "
                    f"{int(phys[i])}, outside the {limit}-element allocation")
        else:
            p = int(phys[first[dup[0]]])
            both = np.nonzero(phys == p)[0][:2]
            what = (f"elements {tuple(int(x) for x in np.unravel_index(int(both[0]), s.shape))} and "
                    f"{tuple(int(x) for x in np.unravel_index(int(both[1]), s.shape))} are both placed at offset {p}")
        how = f"layout={s.layout}" if s.layout is not None else f"swizzle={s.swizzle}"
        cx = Counterexample(notes=[what])
        findings.append(Finding("swizzle-bijective", VIOLATED, f"{how} is not one-to-one on shared "
                                f"buffer '{s.name}' {list(s.shape)}", s.span, cx,
                                Replay(True, "confirmed by evaluating the layout: " + what) if s.layout is None
                                else None,
                                CHECKS["swizzle-bijective"]))
        status = VIOLATED
    return {"swizzle-bijective": (status, findings)}
