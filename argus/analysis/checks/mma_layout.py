"""MMA operand layouts: shared operands must be addressable by the instruction, register operands must
come from fragments the instruction can consume.

wgmma reads shared operands through descriptors over 8-row "core matrix" atoms whose rows are the
swizzle width: a view must cover whole atoms along the contiguous axis (start and extent multiples of
the swizzle width in elements, or the whole row) and a multiple of 8 rows; fp8 operands must be K-major.
mma.sync loads shared operands with ldmatrix: 16-byte row segments, so the contiguous extent and start
must be multiples of 8 bf16/f16 elements. A register A operand must come from an accumulator whose
warps own the same rows.
"""

from __future__ import annotations

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, VERIFIED, VIOLATED, Counterexample, Finding, Replay

CODES = ["mma-layout"]


def _problems(a: Analysis, e, view, role: str) -> list[str]:
    out = []
    if view is None or view.space != "shared":
        return out
    alloc = _alloc(a, view.base)
    if alloc is None:
        return out
    elem = alloc.dtype.bytes
    inner = alloc.shape[-1]
    start = view.starts[-1]
    ext = view.extents[-1]
    rows = [n for n in view.extents[:-1] if n is not None]
    if ext is None:
        out.append(f"{role} operand {view.describe()} indexes the contiguous axis of '{view.base}'")
        return out
    if e.instr == "wgmma":
        width = max(alloc.swizzle // elem, 16 // elem) if alloc.swizzle else 16 // elem
        whole = isinstance(start, int) and start == 0 and ext == inner
        aligned = isinstance(start, int) and start % width == 0 and ext % width == 0
        if not (whole or aligned):
            out.append(f"{role} operand {view.describe()} cuts through {alloc.swizzle or 16}-byte swizzle atoms "
                       f"of '{view.base}' (contiguous start {start}, extent {ext}, atom {width} elements)")
        if rows and rows[-1] % 8:
            out.append(f"{role} operand {view.describe()} has {rows[-1]} rows; wgmma atoms are 8 rows")
        if alloc.dtype.bits == 8 and ((role == "A" and view.transposed) or (role == "B" and not view.transposed)):
            out.append(f"fp8 {role} operand {view.describe()} is not K-major, which wgmma requires for 8-bit types")
    else:
        vec = 16 // elem
        if not (isinstance(start, int) and start % vec == 0 and ext % vec == 0):
            out.append(f"{role} operand {view.describe()} is not made of 16-byte row segments for ldmatrix "
                       f"(contiguous start {start}, extent {ext})")
    return out


def _alloc(a: Analysis, name: str):
    from argus.ir import nodes as ir
    from argus.ir.transform import walk
    return next((s for s in walk(a.kernel.body) if isinstance(s, ir.AllocShared) and s.name == name), None)


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status, findings, seen = VERIFIED, [], set()
    for trace in a.traces:
        for e, av, bv, at, _bt, step in trace.mmas:
            probs = _problems(a, e, av, "A") + _problems(a, e, bv, "B")
            if av is None and at.layout is not None and e.layout is not None:
                src, dst = at.layout, e.layout
                if src.warps_m != dst.warps_m or src.tile[0] != dst.tile[0]:
                    probs.append(f"register A operand comes from an accumulator split {src.warps_m}x{src.warps_n} "
                                 f"over {src.tile}, but this mma splits rows {dst.warps_m} ways: the fragments differ")
            for p in probs:
                if (e.span, p) in seen:
                    continue
                seen.add((e.span, p))
                cx = Counterexample(steps=dict(step), notes=[p])
                findings.append(Finding("mma-layout", VIOLATED, f"mma operand layout does not fit {e.instr}", e.span,
                                        cx, Replay(True, "confirmed by evaluating the layout: " + p),
                                        CHECKS["mma-layout"]))
                status = VIOLATED
    return {"mma-layout": (status, findings)}
