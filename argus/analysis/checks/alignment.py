"""Alignment of bulk (TMA) copies: the tensor's row pitch must be a multiple of 16 bytes, the box's
contiguous extent a multiple of 16 bytes, and boxes of at most 256 elements per dimension (a longer
extent is issued as several boxes: `_boxes_tile`).

(cp.async tile copies are not checked here: the code generator picks the widest vector the runtime
pitch allows and falls back to narrower copies.)

The row pitch is a property of the memory the kernel is given, not of its dims: the runtime
(argus/runtime/launch.py) passes every tensor the kernel only reads through a buffer whose rows are
padded to 16 bytes when the caller's are not, and the kernel sees the logical dims. So the pitch
obligation is discharged by that contract for read-only inputs and proved from the dims (for every
allowed dim; restrict them with assume(...)) only for tensors the kernel also writes, which the
runtime cannot re-pitch.
"""

from __future__ import annotations

import z3

from argus.analysis.checks.common import Analysis
from argus.analysis.findings import CHECKS, UNKNOWN, VERIFIED, VIOLATED, Counterexample, Finding, Replay
from argus.analysis.symbolic import as_int, solver

CODES = ["misaligned-copy"]


def run(a: Analysis) -> dict[str, tuple[str, list[Finding]]]:
    status, findings, seen = VERIFIED, [], set()
    for trace, ctx in zip(a.traces, a.contexts):
        for s, src, _dst in trace.bulk_copies:
            if s.span in seen:
                continue
            t = a.kernel.tensor(src.base)
            eb = t.dtype.bytes
            probs = []
            kept = [e for e in src.extents if e is not None]
            if kept and (kept[-1] * eb) % 16:
                probs.append(f"the box's contiguous extent is {kept[-1] * eb} bytes, not a multiple of 16")
            if kept and not _boxes_tile(kept, eb):
                probs.append("a TMA box dimension exceeds 256 elements and the copy does not split into boxes "
                             "(rows: whole boxes of 256; columns: 16-byte pieces of at most 256 elements)")
            if src.extents[-1] is None:
                probs.append("a TMA box must include the tensor's contiguous axis")
            pitch = as_int(eb)
            factors: list = []
            repitched = t.name in a.kernel.inputs and t.name not in a.kernel.outputs
            for d in ([] if repitched else reversed(t.dims[1:])):
                factors.append(as_int(d) if isinstance(d, int) else ctx.dims[d])
                pitch = pitch * factors[-1]
                if any(_aligned_factor(trace, eb, f) for f in factors):
                    continue  # one factor times the element size is a multiple of 16 (a linear proof)
                sv = solver()
                sv.add(*trace.constraints, pitch % 16 != 0)
                small = [v <= 512 for v in ctx.dims.values()]
                r = sv.check(*small)
                if r == z3.unsat:
                    r = sv.check()
                if r == z3.sat:
                    m = sv.model()
                    dims = {k: m.eval(v, model_completion=True).as_long() for k, v in ctx.dims.items()}
                    probs.append(f"a row pitch of {m.eval(pitch, model_completion=True)} bytes (dims {dims}) is not "
                                 "a multiple of 16; add assume(...) if only aligned shapes are supported")
                    break
                if r == z3.unknown and status == VERIFIED:
                    status = UNKNOWN
            for p in probs:
                seen.add(s.span)
                findings.append(Finding("misaligned-copy", VIOLATED, f"bulk copy of {src.describe()} is misaligned",
                                        s.span, Counterexample(notes=[p]),
                                        Replay(True, "confirmed by evaluating the copy's addresses: " + p),
                                        CHECKS["misaligned-copy"]))
                status = VIOLATED
    return {"misaligned-copy": (status, findings)}


def _boxes_tile(kept: list[int], eb: int) -> bool:
    """The code generator issues a copy as boxes of at most 256 elements per dimension: the rows in boxes of
    256 when there are more (a whole number of them), the columns in swizzle-atom widths or row pieces of a
    width that divides them and is a multiple of 16 bytes (argus/codegen/memory.copy_bulk)."""
    *outer, cols = kept
    if any(e > 256 and e % 256 for e in outer):
        return False
    return cols <= 256 or (cols * eb) % 16 == 0  # 16-byte pieces (the 16-byte multiple is its own obligation)


def _aligned_factor(trace, eb: int, f) -> bool:
    """eb * f is provably a multiple of 16 (linear, so cheap; the product of dims is not)."""
    sv = solver(2000)
    sv.add(*trace.constraints, (as_int(eb) * f) % 16 != 0)
    return sv.check() == z3.unsat
