"""Memory operations in generated code: views of global tensors and shared buffers, copies, loads, stores.

Global views address `ptr + sum(start_a * stride_a) + r * stride_row + c`, masked against the tensor's
dims (out-of-range elements read as zero, stores skip them), exactly the interpreter's semantics.
Shared views address `base + stage * tile + swizzle(tile_layout(r0 + r, c0 + c))`: the buffer's tile
layout and swizzle come from argus/ir/passes/layouts.shared_tile_layout, the same map the verifier
reasons about, rendered as C by argus/codegen/cexpr.py.

* copy_async: 16-byte cp.async chunks (zero-filled past the edges), chunk q -> row q / (cols / V),
  consecutive threads on consecutive chunks of a row (coalesced, and conflict-free under the swizzle);
* copy_bulk: one thread issues TMA boxes of the swizzle width (`rows x W`), each landing in one
  slab of the tile layout, completing on the given mbarrier; the tile spans the tensor's two innermost
  axes and indexes the leading ones (tensor maps of rank 2..5, box extent 1 on indexed axes);
* register tiles are read and written per fragment slot, in runs of `TileMap.run` consecutive
  columns (one vector access when the row is aligned, elementwise at the edges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from argus.codegen.cexpr import c_add, ctype, from_compute
from argus.codegen.errors import unsupported
from argus.codegen.spec import TmaSpec
from argus.codegen.tiles import TileMap
from argus.dsl.types import TileT
from argus.ir import nodes as ir
from argus.ir.threads import vector_elems

if TYPE_CHECKING:
    from argus.codegen.emit import Buffer, Emitter

TMA_BOX_MAX = 256  # elements per box dimension


def _const(e: ir.Expr) -> int | None:
    return e.value if isinstance(e, ir.Const) and isinstance(e.value, int) else None


@dataclass
class GView:
    """A tile of a global tensor: view (r, c) -> tensor index (row axis, col axis)."""

    em: Emitter
    ref: ir.Ref
    rows: int
    cols: int
    row_axis: int | None  # None for 1-D views (one row)
    col_axis: int
    starts: list[str]
    nonneg: bool  # every start is >= 0

    @property
    def tensor(self) -> str:
        return self.ref.base

    @property
    def ptr(self) -> str:
        return self.em.cname[self.ref.base]

    @property
    def contiguous(self) -> bool:
        """The view's columns are the tensor's last (unit-stride) axis."""
        return self.col_axis == len(self.ref.starts) - 1

    def base(self) -> str:
        """Element offset of view element (0, 0), as long long."""
        terms = []
        for ax, st in enumerate(self.starts):
            s = self.em.stride(self.tensor, ax)
            terms.append(f"(long long)({st})" + ("" if s == "1" else f" * {s}"))
        return " + ".join(terms)

    def offset(self, gbase: str, r: str | int, c: str | int) -> str:
        parts = [gbase]
        if self.row_axis is not None and r != 0:
            s = self.em.stride(self.tensor, self.row_axis)
            parts.append(f"(long long)({r})" + ("" if s == "1" else f" * {s}"))
        if c != 0:
            s = self.em.stride(self.tensor, self.col_axis)
            parts.append(f"({c})" + ("" if s == "1" else f" * {s}"))
        return " + ".join(parts)

    def index(self, axis: int | None, local: str | int) -> str:
        if axis is None:
            return "0"
        return f"({self.starts[axis]} + {local})" if local != 0 else f"({self.starts[axis]})"

    def in_range(self, r: str | int, c: str | int, cols_ahead: int = 1) -> str:
        """C condition: view elements (r, c .. c + cols_ahead - 1) all lie inside the tensor."""
        conds = []
        for ax in range(len(self.starts)):
            if ax in (self.row_axis, self.col_axis):
                continue
            conds.append(f"({self.starts[ax]}) < {self.em.dim(self.tensor, ax)}")
            if not self.nonneg:
                conds.append(f"({self.starts[ax]}) >= 0")
        if self.row_axis is not None:
            gr = self.index(self.row_axis, r)
            conds.append(f"{gr} < {self.em.dim(self.tensor, self.row_axis)}")
            if not self.nonneg:
                conds.append(f"{gr} >= 0")
        gc = self.index(self.col_axis, c)
        last = f"{gc} + {cols_ahead - 1}" if cols_ahead > 1 else gc
        conds.append(f"{last} < {self.em.dim(self.tensor, self.col_axis)}")
        if not self.nonneg:
            conds.append(f"{gc} >= 0")
        return " && ".join(conds)


def gview(em: Emitter, ref: ir.Ref) -> GView:
    kept = [ax for ax, n in enumerate(ref.extents) if n is not None]
    if len(kept) > 2 or not kept:
        raise unsupported(f"a {len(kept)}-D view of global tensor '{ref.base}'", ref.span)
    if ref.transposed:
        kept = kept[::-1]
    row_axis, col_axis = (None, kept[0]) if len(kept) == 1 else (kept[0], kept[1])
    rows = 1 if row_axis is None else ref.extents[row_axis]
    starts = [em.sx(s) for s in ref.starts]
    nonneg = all(em.is_nonneg(s) for s in ref.starts)
    return GView(em, ref, rows, ref.extents[col_axis], row_axis, col_axis, starts, nonneg)


@dataclass
class SView:
    """A 2-D tile of a shared buffer: view (r, c) -> byte address."""

    em: Emitter
    buf: Buffer
    lead: str | int  # element offset of the leading (stage) indices
    r0: str | int  # start of the view inside the buffer's tile
    c0: str | int
    rows: int
    cols: int
    transposed: bool

    def elem_offset(self, r: str | int, c: str | int, swizzled: bool = True) -> str | int:
        br, bc = (c, r) if self.transposed else (r, c)
        off = self.buf.element(c_add(self.r0, br), c_add(self.c0, bc), swizzled)
        return c_add(self.lead, off) if not isinstance(self.lead, int) or self.lead else off

    def addr(self, r: str | int, c: str | int, swizzled: bool = True) -> str:
        """u32 shared-memory address of view element (r, c)."""
        off = self.elem_offset(r, c, swizzled)
        e = self.buf.elem_bytes
        if isinstance(off, int):
            return f"(ag_smem + {self.buf.offset + off * e}u)"
        return f"(ag_smem + {self.buf.offset}u + (ag_u32)({off}) * {e}u)"

    def ptr(self, r: str | int, c: str | int) -> str:
        """Typed generic pointer to view element (r, c)."""
        off = self.elem_offset(r, c)
        t = ctype(self.buf.alloc.dtype)
        return f"reinterpret_cast<{t}*>(ag_smem_ptr + {self.buf.offset}) + ({off})"


def sview(em: Emitter, ref: ir.Ref) -> SView:
    buf = em.buffers[ref.base]
    shape = buf.alloc.shape
    nlead = max(0, len(shape) - 2)
    lead: str | int = 0
    per = buf.stage_elems
    for ax in range(nlead - 1, -1, -1):
        if ref.extents[ax] is not None and not (ref.extents[ax] == 1):
            raise unsupported(f"a view of shared buffer '{ref.base}' that keeps its axis {ax}", ref.span,
                                 "index the leading axes (e.g. a_s[s]) so that a 2-D tile remains")
        c = _const(ref.starts[ax])
        term = c * per if c is not None else f"({em.sx(ref.starts[ax])}) * {per}"
        lead = c_add(lead, term) if not (isinstance(lead, int) and isinstance(term, int)) else lead + term
        per *= shape[ax]
    tail = list(range(nlead, len(shape)))
    if len(shape) == 1:
        r0: str | int = 0
        c0 = _const(ref.starts[0])
        c0 = c0 if c0 is not None else em.sx(ref.starts[0])
        rows, cols = 1, ref.extents[0] or 1
    else:
        ra, ca = tail
        r0 = _const(ref.starts[ra])
        r0 = r0 if r0 is not None else em.sx(ref.starts[ra])
        c0 = _const(ref.starts[ca])
        c0 = c0 if c0 is not None else em.sx(ref.starts[ca])
        if ref.extents[ca] is None:
            raise unsupported(f"a column of 2-D shared buffer '{ref.base}'", ref.span,
                              "copy or load whole rows (a_s[i] or a_s[i, c0 : +n]), or a 2-D tile")
        # an indexed row is a slice of one row: a_s[i] is row i (a gathered row copied into its tile row)
        rows = 1 if ref.extents[ra] is None else ref.extents[ra]
        cols = ref.extents[ca]
    if ref.transposed:
        rows, cols = cols, rows
    return SView(em, buf, lead, r0, c0, rows, cols, ref.transposed)


# ---- copies ---------------------------------------------------------------------------------------


def copy(em: Emitter, s: ir.Copy) -> None:
    if s.mode == "bulk":
        copy_bulk(em, s)
    elif isinstance(s.src, ir.Ref) and s.src.space == "global":
        copy_global_to_shared(em, s)
    elif isinstance(s.src, ir.Ref):
        raise unsupported("copies from shared to shared memory", s.span)
    else:
        copy_regs_to_shared(em, s)


def copy_global_to_shared(em: Emitter, s: ir.Copy) -> None:
    """copy_async: cp.async, one 16-byte vector per chunk; copy: the same vectors element by element.

    Vector q covers flat (row-major) tile elements [qV, qV + V) and belongs to thread q % T (the
    mapping of argus/ir/threads.py, which the verifier's race checks use too)."""
    src, dst = gview(em, s.src), sview(em, s.dst)
    e = s.dst.dtype.bytes
    v = vector_elems(e)
    total = dst.rows * dst.cols
    vectors = -(-total // v)
    threads = em.scope.threads
    per = -(-vectors // threads)
    if s.mode == "async":
        if s.src.transposed or dst.transposed or not src.contiguous:
            raise unsupported("copy_async of a transposed view", s.span,
                                 "copy the tile as stored and read it transposed from shared memory")
        if dst.cols % v or (isinstance(dst.c0, int) and dst.c0 % v) or dst.buf.cols % v:
            raise unsupported(f"copy_async of rows that are not whole 16-byte chunks ({dst.cols} x {e} B)",
                                 s.span)
        em.features.add("cp.async")
        em.aligned_inputs.add(src.tensor)
    step = _row_step(dst, threads, v) if s.mode == "async" and vectors % threads == 0 else None
    if step is not None:
        _copy_async_rows(em, s, src, dst, v, per, *step)
        return
    op = "copy_async" if s.mode == "async" else "copy"
    em.line(f"// {op}: {dst.rows}x{dst.cols} {s.dst.dtype} in {vectors} vectors of {v}, {per} per thread")
    em.open("")
    gb = em.tmp("g")
    em.line(f"const long long {gb} = {src.base()};")
    em.line("#pragma unroll")
    em.open(f"for (int ag_j = 0; ag_j < {per}; ++ag_j)")
    em.line(f"const int ag_q = {em.scope.tid} + ag_j * {threads};")
    if vectors % threads:
        em.line(f"if (ag_q >= {vectors}) break;")
    ptr = src.ptr
    if s.mode == "async":
        em.line(f"const int ag_r = ag_q / {dst.cols // v}, ag_c = ag_q % {dst.cols // v} * {v};")
        g = src.offset(gb, "ag_r", "ag_c")
        addr = dst.addr("ag_r", "ag_c")
        if s.masked:
            dim_c = em.dim(src.tensor, src.col_axis)
            em.line(f"const int ag_n = ({src.in_range('ag_r', 'ag_c')}) ? "
                    f"min(16, ({dim_c} - {src.index(src.col_axis, 'ag_c')}) * {e}) : 0;")
            em.line(f"ag_cp_async16({addr}, ag_n > 0 ? (const void*)({ptr} + {g}) : (const void*){ptr}, ag_n);")
        else:
            em.line(f"ag_cp_async16({addr}, {ptr} + {g}, 16);")
    else:
        dt = s.dst.dtype
        em.line("#pragma unroll")
        em.open(f"for (int ag_u = 0; ag_u < {v}; ++ag_u)")
        em.line(f"const int ag_f = ag_q * {v} + ag_u;")
        if total % v:
            em.line(f"if (ag_f >= {total}) break;")
        em.line(f"const int ag_r = ag_f / {dst.cols}, ag_c = ag_f % {dst.cols};")
        cond = src.in_range("ag_r", "ag_c") if s.masked else "true"
        em.line(f"*({dst.ptr('ag_r', 'ag_c')}) = ({cond}) ? {ptr}[{src.offset(gb, 'ag_r', 'ag_c')}] "
                f": {from_compute(dt, '0')};")
        em.close()
    em.close()
    em.close()


def _row_step(dst: SView, threads: int, v: int) -> tuple[int, int] | None:
    """(R, delta): when a thread's vectors are R rows apart (whole rows per pass of the threads) and
    moving R rows down adds the same `delta` elements everywhere in the tile layout (the swizzle
    pattern repeats every R rows), so one address per thread plus constant offsets covers its chunks."""
    cpr = dst.cols // v
    if threads % cpr or dst.transposed or dst.buf.explicit is not None:
        return None
    if not isinstance(dst.r0, int) or not isinstance(dst.c0, int):
        return None
    rows = threads // cpr
    if rows >= dst.rows:
        return rows, 0
    r, c = np.meshgrid(np.arange(dst.rows) + dst.r0, np.arange(dst.cols) + dst.c0, indexing="ij")
    off = np.asarray(dst.buf.tile((r, c)), dtype=np.int64)
    d = off[rows:] - off[:-rows]
    return (rows, int(d.flat[0])) if (d == d.flat[0]).all() else None


def _copy_async_rows(em: Emitter, s: ir.Copy, src: GView, dst: SView, v: int, per: int, rows: int,
                     delta: int) -> None:
    """copy_async where each thread's vectors sit `rows` rows apart at the same column: one shared
    address and one global pointer per thread, then constant steps (few registers live across loops)."""
    e = s.dst.dtype.bytes
    cpr = dst.cols // v
    tid = em.scope.tid
    ptr = src.ptr
    ct = ctype(em.k.tensor(src.tensor).dtype)
    em.line(f"// copy_async: {dst.rows}x{dst.cols} {s.dst.dtype} in {per} vectors of {v} per thread, "
            f"{rows} rows apart (+{delta * e} B in shared memory)")
    em.open("")
    gb = em.tmp("g")
    em.line(f"const long long {gb} = {src.base()};")
    em.line(f"const int ag_r0 = {tid} / {cpr}, ag_c = {tid} % {cpr} * {v};")
    em.line(f"const ag_u32 ag_sa = {dst.addr('ag_r0', 'ag_c')};")
    em.line(f"const {ct}* const ag_ga = {ptr} + {src.offset(gb, 'ag_r0', 'ag_c')};")
    row_stride = em.stride(src.tensor, src.row_axis) if src.row_axis is not None else "0"
    em.line("#pragma unroll")
    em.open(f"for (int ag_j = 0; ag_j < {per}; ++ag_j)")
    g = f"ag_ga + (long long)(ag_j * {rows}) * {row_stride}" if per > 1 else "ag_ga"
    sa = f"ag_sa + (ag_u32)ag_j * {delta * e}u" if per > 1 else "ag_sa"
    if s.masked:
        em.line(f"const int ag_r = ag_r0 + ag_j * {rows};")
        dim_c = em.dim(src.tensor, src.col_axis)
        em.line(f"const int ag_n = ({src.in_range('ag_r', 'ag_c')}) ? "
                f"min(16, ({dim_c} - {src.index(src.col_axis, 'ag_c')}) * {e}) : 0;")
        em.line(f"ag_cp_async16({sa}, ag_n > 0 ? (const void*)({g}) : (const void*){ptr}, ag_n);")
    else:
        em.line(f"ag_cp_async16({sa}, {g}, 16);")
    em.close()
    em.close()


def copy_bulk(em: Emitter, s: ir.Copy) -> None:
    """TMA: boxes of `rows x W` elements (W = the swizzle width), one per slab of the tile layout."""
    src, dst = gview(em, s.src), sview(em, s.dst)
    buf = dst.buf
    t = em.k.tensor(src.tensor)
    if buf.explicit is not None:
        raise unsupported("copy_bulk into a buffer with an explicit layout=", s.span,
                             "TMA writes the swizzle modes: declare the buffer with swizzle=")
    rank = len(t.dims)
    # the tile's columns must be the tensor's last (unit-stride) axis; its rows any other axis, the rest
    # indexed (K[t0 : +BKV, h, 0 : +D] of a [T, H, D] tensor: a box of BKV x 1 x D)
    if rank > 5 or rank < 2 or s.src.transposed or dst.transposed or src.row_axis is None \
            or src.col_axis != rank - 1:
        raise unsupported("copy_bulk from anything but a 2-D tile whose columns are the tensor's last axis",
                          s.span, "index the other axes (e.g. W[e, k * BK : +BK, n * BN : +BN] or "
                          "K[t : +BKV, h, 0 : +D]); TMA ranks are 2..5")
    if not isinstance(dst.r0, int) or not isinstance(dst.c0, int):
        raise unsupported("copy_bulk into a shared view with a run-time offset inside the tile", s.span)
    e = buf.elem_bytes
    sw = buf.alloc.swizzle
    if sw:
        width = sw // e
        if dst.cols % width or dst.c0 % width or dst.r0 % 8:
            raise unsupported(f"copy_bulk into a view that is not whole {sw}B swizzle atoms", s.span)
    else:
        width = dst.cols
        if dst.cols != buf.cols or (dst.cols * e) % 16:
            raise unsupported("copy_bulk into an unswizzled view that is not whole rows of a multiple of "
                              "16 bytes", s.span)
        if width > TMA_BOX_MAX:
            # a box writes its rows densely, so rows longer than a box go one row at a time, in column
            # pieces: the widest divisor of the row that fits a box and keeps 16-byte pieces (one exists: the
            # row is a multiple of 16 bytes)
            width = next(w for w in range(TMA_BOX_MAX, 0, -1) if dst.cols % w == 0 and (w * e) % 16 == 0)
            _copy_bulk_row_pieces(em, s, src, dst, width)
            return
    box_rows = min(dst.rows, TMA_BOX_MAX)
    if dst.rows % box_rows:
        raise unsupported(f"copy_bulk of {dst.rows} rows (boxes take at most {TMA_BOX_MAX})", s.span)
    idx, bar = _tensor_map(em, s, TmaSpec(src.tensor, box_rows, width, sw, src.row_axis - rank))
    em.line(f"// copy_bulk: {dst.rows}x{dst.cols} {s.dst.dtype} as {dst.cols // width * (dst.rows // box_rows)} "
            f"TMA box(es) of {box_rows}x{width} (tensor map ag_tm{idx})")
    boxes = []
    for j in range(dst.cols // width):
        for i in range(dst.rows // box_rows):
            addr = dst.addr(i * box_rows, j * width, swizzled=False)  # box starts are swizzle-atom aligned
            coords = [src.index(rank - 1, j * width if j else 0)]  # innermost first
            for ax in reversed(range(rank - 1)):
                coords.append(src.index(ax, i * box_rows if i else 0) if ax == src.row_axis else src.starts[ax])
            boxes.append(f"ag_tma_load_{rank}d({addr}, &ag_tm{idx}, {bar}, {', '.join(coords)});")
    if em.scope.single:
        for b in boxes:
            em.line(b)
    else:
        em.open(f"if ({em.scope.tid} == 0)")
        for b in boxes:
            em.line(b)
        em.close()


def _tensor_map(em: Emitter, s: ir.Copy, spec: TmaSpec) -> tuple[int, str]:
    """The index of the copy's tensor map (registered once per spec) and its mbarrier's address."""
    if spec not in em.tmaps:
        em.tmaps.append(spec)
    em.features.add("tma")
    em.aligned_inputs.add(spec.tensor)
    return em.tmaps.index(spec), em.mbar_addr(s.barrier, s.span)


def _copy_bulk_row_pieces(em: Emitter, s: ir.Copy, src: GView, dst: SView, width: int) -> None:
    """TMA into an unswizzled tile whose rows are longer than a box: one [1, width] box per row piece (a box
    writes its rows densely, so a taller box would not keep the tile's row pitch)."""
    rank = len(em.k.tensor(src.tensor).dims)
    idx, bar = _tensor_map(em, s, TmaSpec(src.tensor, 1, width, 0, src.row_axis - rank))
    pieces = dst.cols // width
    em.line(f"// copy_bulk: {dst.rows}x{dst.cols} {s.dst.dtype} as {dst.rows * pieces} TMA box(es) of 1x{width}, "
            f"a row at a time (tensor map ag_tm{idx})")
    coords = [src.index(rank - 1, "ag_j * " + str(width))]  # innermost first
    for ax in reversed(range(rank - 1)):
        coords.append(src.index(ax, "ag_i") if ax == src.row_axis else src.starts[ax])
    addr = dst.addr("ag_i", f"ag_j * {width}", swizzled=False)
    if not em.scope.single:
        em.open(f"if ({em.scope.tid} == 0)")
    em.line("#pragma unroll 1")
    em.open(f"for (int ag_i = 0; ag_i < {dst.rows}; ++ag_i)")
    em.line("#pragma unroll")
    em.open(f"for (int ag_j = 0; ag_j < {pieces}; ++ag_j)")
    em.line(f"ag_tma_load_{rank}d({addr}, &ag_tm{idx}, {bar}, {', '.join(coords)});")
    em.close()
    em.close()
    if not em.scope.single:
        em.close()


def copy_regs_to_shared(em: Emitter, s: ir.Copy) -> None:
    dst = sview(em, s.dst)
    lay = s.layout or em.default_layout(s.dst.shape, s.dst.dtype.bytes)
    tm = em.tilemap(lay)
    loads = em.preload(s.src, tm)
    dt = s.dst.dtype
    em.line(f"// copy registers -> shared {s.dst.base}")
    em.open("")
    if tm.replicas > 1:
        em.open(f"if ({tm.owner()})")
    em.line("#pragma unroll")
    em.open(f"for (int ag_i = 0; ag_i < {tm.slots}; ++ag_i)")
    r, c = _rc(tm, "ag_i")
    em.line(f"*({dst.ptr(r, c)}) = {from_compute(dt, em.ex(s.src, 'ag_i', tm, loads, top=True))};")
    em.close()
    if tm.replicas > 1:
        em.close()
    em.close()


def _rc(tm: TileMap, slot: str) -> tuple[str | int, str | int]:
    return (0 if tm.one_d else tm.row(slot)), tm.col(slot)


# ---- register tiles <-> memory ----------------------------------------------------------------------


def load_into(em: Emitter, name: str, e: ir.Load, tm: TileMap) -> None:
    """`name[slot] = element of the view` for every slot; masked elements read as zero."""
    dt = e.ref.dtype
    if e.ref.space == "shared":
        sv = sview(em, e.ref)
        em.line("#pragma unroll")
        em.open(f"for (int ag_i = 0; ag_i < {tm.slots}; ++ag_i)")
        r, c = _rc(tm, "ag_i")
        em.line(f"{name}[ag_i] = *({sv.ptr(r, c)});")
        em.close()
        return
    gv = gview(em, e.ref)
    v = min(tm.run if gv.contiguous else 1, max(1, 16 // dt.bytes))
    em.open("")
    gb = em.tmp("g")
    em.line(f"const long long {gb} = {gv.base()};")
    ct = ctype(dt)
    if v > 1:
        # runs of v columns in one aligned vector load where the run lies inside the tensor
        row_stride = em.stride(gv.tensor, gv.row_axis) if gv.row_axis is not None else "0"
        em.line(f"const bool ag_aligned = (reinterpret_cast<unsigned long long>({gv.ptr}) & {v * dt.bytes - 1}) == 0 "
                f"&& (((unsigned long long)({gb}) | (unsigned long long)({row_stride})) & {v - 1}) == 0;")
    em.line("#pragma unroll")
    em.open(f"for (int ag_j = 0; ag_j < {tm.slots // v}; ++ag_j)")
    em.line(f"const int ag_i = ag_j * {v};")
    r, c = _rc(tm, "ag_i")
    em.line(f"const int ag_r = {r}, ag_c = {c};" if gv.row_axis is not None else f"const int ag_c = {c};  // one row")
    off = gv.offset(gb, "ag_r", "ag_c")
    zero = from_compute(dt, "0")
    if v > 1:
        whole = gv.in_range("ag_r", "ag_c", v) if e.masked else "true"
        em.open(f"if (ag_aligned && {whole})")
        em.line(f"const ag_vec<{ct}, {v}> ag_w = *reinterpret_cast<const ag_vec<{ct}, {v}>*>({gv.ptr} + {off});")
        em.line("#pragma unroll")
        em.line(f"for (int ag_u = 0; ag_u < {v}; ++ag_u) {name}[ag_i + ag_u] = ag_w.v[ag_u];")
        em.depth -= 1
        em.open("} else")
        em.line("#pragma unroll")
        em.open(f"for (int ag_u = 0; ag_u < {v}; ++ag_u)")
        off_u = gv.offset(gb, "ag_r", "ag_c + ag_u")
        if e.masked:
            em.line(f"{name}[ag_i + ag_u] = ({gv.in_range('ag_r', 'ag_c + ag_u')}) ? {gv.ptr}[{off_u}] : {zero};")
        else:
            em.line(f"{name}[ag_i + ag_u] = {gv.ptr}[{off_u}];")
        em.close()
        em.close()
    elif e.masked:
        em.line(f"{name}[ag_i] = ({gv.in_range('ag_r', 'ag_c')}) ? {gv.ptr}[{off}] : {zero};")
    else:
        em.line(f"{name}[ag_i] = {gv.ptr}[{off}];")
    em.close()
    em.close()


def open_runs(em: Emitter, gv: GView, tm: TileMap, v: int, elem_bytes: int) -> str:
    """Open the loop over a thread's runs of v slots of a write to `gv` (by the first replica of each
    element): `ag_aligned` (v > 1: the base pointer, the row stride and the start column allow v-element
    accesses), then per run `ag_i` (its first slot), `ag_r` and `ag_c`; returns the base offset's name.
    The caller closes the loop, the owner test (when tm.replicas > 1) and the block."""
    em.open("")
    gb = em.tmp("g")
    em.line(f"const long long {gb} = {gv.base()};")
    if v > 1:
        # a vector access needs an aligned address: the base pointer, the row stride and the start column
        row_stride = em.stride(gv.tensor, gv.row_axis) if gv.row_axis is not None else "0"
        em.line(f"const bool ag_aligned = (reinterpret_cast<unsigned long long>({gv.ptr}) & {v * elem_bytes - 1}) == 0 "
                f"&& (((unsigned long long)({gb}) | (unsigned long long)({row_stride})) & {v - 1}) == 0;")
    if tm.replicas > 1:
        em.open(f"if ({tm.owner()})")
    em.line("#pragma unroll")
    em.open(f"for (int ag_j = 0; ag_j < {tm.slots // v}; ++ag_j)")
    em.line(f"const int ag_i = ag_j * {v}; (void)ag_i;  // unread where a one-slot value is written")
    r, c = _rc(tm, "ag_i")
    em.line(f"const int ag_r = {r}, ag_c = {c};" if gv.row_axis is not None else f"const int ag_c = {c};  // one row")
    return gb


def written_value(em: Emitter, value: ir.Expr, dt, slot: str, tm: TileMap, loads: dict) -> str:
    """Slot `slot` of a store-like statement's value (a tile, or a scalar for every slot), as `dt`."""
    if not isinstance(value.type, TileT):
        return from_compute(dt, em.sx(value))
    return from_compute(dt, em.ex(value, slot, tm, loads, top=True))


def masked_condition(em: Emitter, mask: ir.Expr | None, cond: str, slots: list[str], tm: TileMap,
                     loads: dict) -> str:
    """`cond` and, with a where= mask, the mask at every one of `slots` (a scalar mask once)."""
    if mask is None:
        return cond
    if not isinstance(mask.type, TileT):
        return f"{cond} && {em.sx(mask)}"
    return " && ".join([cond, *(em.ex(mask, k, tm, loads) for k in slots)])


def store(em: Emitter, s: ir.Store) -> None:
    """Register tile -> global tile, in runs of V columns: one vector store when the run is inside the
    tensor and aligned, else one store per in-range element."""
    gv = gview(em, s.dst)
    dt = s.dst.dtype
    shape = s.dst.shape
    if isinstance(s.value.type, TileT):
        lay = s.layout
        if lay is None:
            raise unsupported("this store's value: it would need two different register layouts", s.span)
    else:
        lay = em.default_layout(shape, dt.bytes)
    tm = em.tilemap(lay)
    loads = em.preload(s.value, tm) if isinstance(s.value.type, TileT) else {}
    mask = getattr(s, "mask", None)  # store(..., where=m): written only where m is true
    if mask is not None and isinstance(mask.type, TileT):
        loads.update(em.preload(mask, tm))
    v = tm.run if gv.contiguous else 1
    v = min(v, max(1, 16 // dt.bytes))
    ct = ctype(dt)
    ptr = gv.ptr
    em.line(f"// store {tm.slots} elements per thread, in runs of {v}")
    gb = open_runs(em, gv, tm, v, dt.bytes)
    off = gv.offset(gb, "ag_r", "ag_c")

    def value(k: str) -> str:
        return written_value(em, s.value, dt, k, tm, loads)

    def where(cond: str, slots: list[str]) -> str:
        return masked_condition(em, mask, cond, slots, tm, loads)

    if v > 1:
        cond = where(gv.in_range("ag_r", "ag_c", v) if s.masked else "true", [f"ag_i + {u}" for u in range(v)])
        em.open(f"if (ag_aligned && {cond})")
        em.line(f"ag_vec<{ct}, {v}> ag_w;")
        em.line("#pragma unroll")
        em.line(f"for (int ag_u = 0; ag_u < {v}; ++ag_u) ag_w.v[ag_u] = {value('ag_i + ag_u')};")
        em.line(f"*reinterpret_cast<ag_vec<{ct}, {v}>*>({ptr} + {off}) = ag_w;")
        em.depth -= 1
        em.open("} else")
        em.line("#pragma unroll")
        em.open(f"for (int ag_u = 0; ag_u < {v}; ++ag_u)")
        cond_u = where(gv.in_range("ag_r", "ag_c + ag_u") if s.masked else "true", ["ag_i + ag_u"])
        em.line(f"if ({cond_u}) {ptr}[{gv.offset(gb, 'ag_r', 'ag_c + ag_u')}] = {value('ag_i + ag_u')};")
        em.close()
        em.close()
    else:
        cond = where(gv.in_range("ag_r", "ag_c") if s.masked else "true", ["ag_i"])
        em.line(f"if ({cond}) {ptr}[{off}] = {value('ag_i')};")
    em.close()
    if tm.replicas > 1:
        em.close()
    em.close()
