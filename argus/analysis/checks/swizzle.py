"""Swizzled shared buffers: the XOR swizzle must map the buffer's elements one-to-one onto itself.

The swizzle XORs address bits of a 8-row x swizzle-width atom; a buffer whose rows do not fill whole
atoms (rows not a multiple of 8 per swizzle period, or rows narrower than the swizzle) maps some
elements outside the buffer or onto each other. Checked exhaustively with the layout algebra.
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
        outside = np.nonzero((phys < 0) | (phys >= n))[0]
        _, first, counts = np.unique(phys, return_index=True, return_counts=True)
        dup = np.nonzero(counts > 1)[0]
        if not len(outside) and not len(dup):
            continue
        if len(outside):
            i = int(outside[0])
            what = (f"element {np.unravel_index(i, s.shape)} is swizzled to offset {int(phys[i])}, outside the "
                    f"{n}-element buffer")
        else:
            p = int(phys[first[dup[0]]])
            both = np.nonzero(phys == p)[0][:2]
            what = (f"elements {np.unravel_index(int(both[0]), s.shape)} and {np.unravel_index(int(both[1]), s.shape)}"
                    f" are both swizzled to offset {p}")
        how = f"layout={s.layout}" if s.layout is not None else f"swizzle={s.swizzle}"
        cx = Counterexample(notes=[what])
        findings.append(Finding("swizzle-bijective", VIOLATED, f"{how} is not a bijection on shared "
                                f"buffer '{s.name}' {list(s.shape)}", s.span, cx,
                                Replay(True, "confirmed by evaluating the layout: " + what) if s.layout is None
                                else None,
                                CHECKS["swizzle-bijective"]))
        status = VIOLATED
    return {"swizzle-bijective": (status, findings)}
