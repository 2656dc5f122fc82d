"""Stage an mma's register B operand through shared memory; name an inline register A operand.

`acc = mma(load(A[...]), load(B[...]), acc)` is how a Triton user writes a tile product (tl.dot on
loaded tiles). The tensor cores read B from shared memory (wgmma descriptors, ldmatrix), so a B operand
held in registers is written to a shared buffer of its own first:

    barrier()                 # every warp is done with the buffer's previous contents (a loop's last step)
    store(mma_b_0, <B>)       # registers -> shared (swizzled as a TMA tile of that width would be)
    barrier()                 # the whole tile is written before any warp reads it
    acc = mma(a, mma_b_0, acc)

An A operand given inline that reads no named tile (`load(A[...])`) becomes a named tile first (one that
reads tiles, `cast(p, bf16)`, keeps the layout they give it), which the code generator then feeds from
registers (argus/codegen/mma.py: in place when it is an accumulator, else through the
scope's scratch). The rewrite is an IR pass, so the verifier proves the staged program (its barriers,
the buffer's races) and the interpreter runs it: the three readers see the same kernel. Warp-specialised
roles are left alone (a block barrier inside a role would deadlock); there the code generator's refusal
stands.
"""

from __future__ import annotations

import dataclasses
import itertools

from argus.dsl.types import I32, ScalarT, TileT
from argus.ir import nodes as ir
from argus.ir.transform import bound_names, walk


def stage_mma_operands(kernel: ir.Kernel) -> ir.Kernel:
    if any(isinstance(s, ir.Role) for s in kernel.body):
        return kernel
    taken = bound_names(kernel.body)
    fresh = (n for n in (f"mma_{x}_{i}" for i in itertools.count() for x in "ab") if n not in taken)
    allocs: list[ir.Stmt] = []
    body = _body(kernel.body, fresh, allocs)
    if not allocs:
        return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)
    return dataclasses.replace(kernel, body=tuple(allocs) + body)


def _swizzle(cols: int, nbytes: int) -> int:
    """The widest swizzle a row of `cols` elements holds (a TMA tile's, which wgmma and ldmatrix read)."""
    row = cols * nbytes
    return next((s for s in (128, 64, 32) if row % s == 0), 0)


def _body(stmts: tuple, fresh, allocs: list) -> tuple:
    out: list[ir.Stmt] = []
    for s in stmts:
        if isinstance(s, ir.For):
            out.append(dataclasses.replace(s, body=_body(s.body, fresh, allocs)))
            continue
        if isinstance(s, ir.If):
            out.append(dataclasses.replace(s, then=_body(s.then, fresh, allocs), orelse=_body(s.orelse, fresh, allocs)))
            continue
        m = s.value if isinstance(s, ir.Let) else None
        if not isinstance(m, ir.Mma):
            out.append(s)
            continue
        span = m.span or s.span
        if not isinstance(m.a, (ir.Ref, ir.Var)) and not _reads_tiles(m.a):
            name = next(fresh)
            out.append(ir.Let(span=span, name=name, value=m.a))
            m = dataclasses.replace(m, a=ir.Var(type=m.a.type, span=m.a.span, name=name))
        if not isinstance(m.b, ir.Ref):
            t = m.b.type
            name = next(fresh)
            allocs.append(ir.AllocShared(span=span, name=name, dtype=t.dtype, shape=tuple(t.shape),
                                         swizzle=_swizzle(t.shape[-1], t.dtype.bytes)))
            zero = ir.Const(ScalarT(I32, True), span, 0)
            ref = ir.Ref("shared", name, tuple(zero for _ in t.shape), tuple(t.shape), t.dtype, span=span)
            # registers -> shared memory is a synchronous copy of the value (as lowering spells store(b_s, x))
            out += [ir.Barrier(span=span), ir.Copy(span=span, dst=ref, src=m.b, mode="sync", masked=True),
                    ir.Barrier(span=span)]
            m = dataclasses.replace(m, b=ref)
        out.append(dataclasses.replace(s, value=m))
    return tuple(out)


def _reads_tiles(e: ir.Expr) -> bool:
    return any(isinstance(n, ir.Var) and isinstance(n.type, TileT) for n in walk(e))
