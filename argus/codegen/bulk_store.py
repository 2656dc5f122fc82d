"""A store of an MMA accumulator tile lowered to a TMA bulk tensor store through shared memory.

`store(C[tile], value)` inside a loop of a warpgroup role (a persistent warp-specialised consumer, whose
next tile follows) with its value in an MMA fragment is written as: each thread puts its elements of a
column chunk of `W = 128 / elem_bytes` columns into a staging buffer (the 128-byte swizzle, so the
fragment's rows land in distinct banks), the role's threads meet on their named barrier, and one thread
issues a TMA store of the chunk (`cp.async.bulk.tensor ... .bulk_group`) and goes on. The global writes
then proceed while the role runs its next tile's main loop; TMA clips elements outside the tensor
exactly as a masked store skips them. Two staging buffers alternate; before a thread rewrites one, the
issuing thread waits until the store that last read it has finished reading
(`cp.async.bulk.wait_group.read`), and the role's barrier tells the others. Before the role ends, the
issuing thread waits for every store to complete.

This is a lowering of the language's `store`, not a new statement: the staging buffer is the code
generator's, invisible to the program, so the verifier's obligations for the store (bounds, coverage,
races between blocks, the value written) are unchanged. It applies only where that is exact: no `where=`
mask, a tensor the kernel never reads or adds to (so no read can observe a write still in flight), and a
fragment whose column chunks are the same slots in every thread. `ARGUS_STORE=direct` (or `build(...,
bulk_store=False)`) keeps the register-to-global store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from argus.codegen.cexpr import ctype
from argus.codegen.exprs import sub_exprs, walk_stmts
from argus.codegen.memory import TMA_BOX_MAX, gview, written_value
from argus.codegen.spec import TmaSpec
from argus.dsl.types import TileT
from argus.ir import nodes as ir

if TYPE_CHECKING:
    from argus.codegen.emit import Emitter

STORE_ENV = "ARGUS_STORE"  # "tma" (default) or "direct"
SWIZZLE = 128  # bytes: one staging row of a chunk is one swizzle row


def tensors_read(k: ir.Kernel) -> set[str]:
    """Tensors the kernel reads (loads, copy sources) or accumulates into."""
    out: set[str] = set()
    for s in walk_stmts(k.body):
        if isinstance(s, ir.AtomicAdd) and s.dst is not None:
            out.add(s.dst.base)
        if isinstance(s, ir.Copy) and isinstance(s.src, ir.Ref):
            out.add(s.src.base)
        for e in _exprs(s):
            for x in sub_exprs(e):
                if isinstance(x, ir.Load):
                    out.add(x.ref.base)
    return out


def _exprs(s: ir.Stmt):
    for v in vars(s).values():
        if isinstance(v, ir.Expr):
            yield v
        elif isinstance(v, ir.Ref):
            yield from (x for x in v.starts if isinstance(x, ir.Expr))


def chunks(em: Emitter, s: ir.Store) -> list[list[int]] | None:
    """The slots of each column chunk (the same for every thread), or None when the store does not
    qualify for the bulk lowering."""
    if not em.bulk_store or em.scope.parent is None or em.scope.single or em.scope.threads % 128:
        return None
    if not em.sm90_native:
        # TMA stores need sm_90: a kernel that otherwise builds for sm_80 (mma.sync, cp.async) keeps its
        # direct stores rather than silently losing its older targets
        return None
    if em.loop_depth == 0:
        # a store after the role's last loop has nothing to overlap with: the block would only add a
        # round trip through shared memory and wait for the stores before it exits (measured 2026-12-02:
        # flash_attention_ws causal S 16384 0.735 -> 0.685 of cuDNN with it)
        return None
    if s.mask is not None or not s.masked or not isinstance(s.value.type, TileT) or s.layout is None:
        return None
    if s.layout.kind != "mma" or s.dst.space != "global" or s.dst.transposed:
        return None
    k = em.k
    if s.dst.base in em.reads:
        return None
    e = s.dst.dtype.bytes
    if e not in (2, 4) or s.dst.dtype.name.startswith("f8"):
        return None
    rank = len(k.tensor(s.dst.base).dims)
    kept = [ax for ax, n in enumerate(s.dst.extents) if n is not None]
    if rank > 5 or rank < 2 or kept != [rank - 2, rank - 1]:
        return None
    rows, cols = s.dst.extents[rank - 2], s.dst.extents[rank - 1]
    width = SWIZZLE // e
    if cols % width or rows % 8 or rows > TMA_BOX_MAX:
        return None
    tm = em.tilemap(s.layout)
    if tm.replicas > 1 or tm.frag.threads != em.scope.threads or tuple(tm.frag.tile) != (rows, cols):
        return None
    r, c = tm.frag.table()
    chunk = c // width
    if not (chunk == chunk[:1]).all():  # a slot's chunk must not depend on the thread
        return None
    out: list[list[int]] = [[] for _ in range(cols // width)]
    for slot, j in enumerate(chunk[0]):
        out[int(j)].append(slot)
    counts = np.zeros((rows, cols), dtype=np.int64)
    np.add.at(counts, (r.ravel(), c.ravel()), 1)
    if not (counts == 1).all():
        return None
    return out


def emit(em: Emitter, s: ir.Store, per_chunk: list[list[int]]) -> None:
    gv = gview(em, s.dst)
    dt = s.dst.dtype
    e = dt.bytes
    rows = gv.rows
    width = SWIZZLE // e
    rank = len(s.dst.starts)
    spec = TmaSpec(gv.tensor, rows, width, SWIZZLE)
    if spec not in em.tmaps:
        em.tmaps.append(spec)
    idx = em.tmaps.index(spec)
    em.features.update({"tma", "tma-store", "proxy-fence"})
    em.bulk_outputs.add(gv.tensor)
    key = em.scope.bar_id
    chunk_bytes = rows * SWIZZLE
    em.staging_need[key] = max(em.staging_need.get(key, 0), 2 * chunk_bytes)
    em.bulk_scopes.add(key)
    tm = em.tilemap(s.layout)
    loads = em.preload(s.value, tm)
    v = min(tm.run, 16 // e)
    tid = em.scope.tid
    lead = "".join(f", {gv.starts[ax]}" for ax in reversed(range(rank - 2)))
    em.line(f"// store {rows}x{gv.cols} {dt} through shared memory: {len(per_chunk)} TMA store(s) of "
            f"{rows}x{width} (tensor map ag_tm{idx}), overlapped with what follows")
    em.open("")
    em.line(f"const int ag_br = {gv.starts[rank - 2]}, ag_bc = {gv.starts[rank - 1]};")
    for j, slots in enumerate(per_chunk):
        buf = f"(ag_stage{key} + {(j % 2) * chunk_bytes}u)"
        # the store that last read this buffer has finished reading it (the newest other one may not)
        em.line(f"if ({tid} == 0) ag_bulk_wait_read<{1 if j else 0}>();")
        em.sync_scope()
        a, b = slots[0], slots[-1] + 1
        if slots == list(range(a, b)) and a % v == 0 and (b - a) % v == 0:
            # a slot loop, as the direct store's: runs of v consecutive columns (TileMap.run)
            em.line("#pragma unroll")
            em.open(f"for (int ag_q = {a}; ag_q < {b}; ag_q += {v})")
            _write(em, s, tm, loads, buf, j * width, "ag_q", v)
            em.close()
        else:  # slots scattered over the chunk: one element at a time
            for q in slots:
                _write(em, s, tm, loads, buf, j * width, str(q), 1)
        em.line("ag_fence_proxy_async();")
        em.sync_scope()
        col0 = f"ag_bc + {j * width}" if j else "ag_bc"
        em.line(f"if ({tid} == 0) {{ ag_tma_store_{rank}d(&ag_tm{idx}, {buf}, {col0}, ag_br{lead}); "
                "ag_bulk_commit(); }")
    em.close()


def _write(em: Emitter, s: ir.Store, tm, loads: dict, buf: str, col0: int, slot: str, v: int) -> None:
    """Staging write of slots slot .. slot + v - 1 (consecutive columns) of the store's value."""
    dt = s.dst.dtype
    e, ct = dt.bytes, ctype(dt)
    r, c = tm.row(slot), tm.col(slot)
    col = f"(({c}) - {col0})" if col0 else f"({c})"
    # 128-byte swizzle: 16-byte unit u of row r sits at unit u ^ (r % 8) (the atom repeats every 8 rows)
    addr = (f"{buf} + ({r}) * {SWIZZLE}u + (((((unsigned)({col}) * {e}u) >> 4) ^ ((unsigned)({r}) & 7u)) << 4)"
            f" + (((unsigned)({col}) * {e}u) & 15u)")
    slots = [slot] if v == 1 else [f"{slot} + {u}" if u else slot for u in range(v)]
    vals = ", ".join(written_value(em, s.value, dt, q, tm, loads) for q in slots)
    if v == 1:
        em.line(f"*reinterpret_cast<{ct}*>(ag_smem_ptr + ({addr} - ag_smem)) = {vals};")
    else:
        vec = f"ag_vec<{ct}, {v}>"
        em.line(f"*reinterpret_cast<{vec}*>(ag_smem_ptr + ({addr} - ag_smem)) = {vec}{{{{{vals}}}}};")


def finish(em: Emitter) -> None:
    """At the end of a role that issued bulk stores: its issuing thread waits for all of them (the
    block's shared memory must outlive their reads, and the kernel's writes must be done at exit)."""
    if em.scope.bar_id in em.bulk_scopes:
        em.line(f"if ({em.scope.tid} == 0) ag_bulk_wait<0>();  // every TMA store of this role has completed")
