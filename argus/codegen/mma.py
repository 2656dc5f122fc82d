"""`acc = mma(a, b, acc)` in generated code: wgmma from shared-memory descriptors, or ldmatrix + mma.sync.

The accumulator is a register tile with the mma's fragment layout (TileMap); its slot of instruction
tile (i, j) follows fragments.tile_fragment (blocked): slot = atom_slot + atom_slots * (i + I * j).

wgmma (sm_90a): warpgroup g of the scope sits at (g % warps_m, g // warps_m). For every k16 step and
every m64 x n instruction tile it issues one `wgmma.mma_async` whose descriptors point at the
operand's first element; LBO / SBO come from fragments.wgmma_descriptor_strides for the buffer's tile
layout (A K-major, B N-major when stored [K, N]; a transposed view flips the major-ness). The k16 step
and instruction offsets are pre-swizzle offsets in the tile layout: the hardware applies the swizzle
to the address bits, which is why buffers are aligned to the 1024-byte pattern. The IR's mma is
synchronous, so the group is waited for (wait_group 0) before the accumulator is used or the stage
released.

mma.sync m16n8k16 (sm_80+): warp w sits at (w % warps_m, w // warps_m); per k16 step it loads A
fragments with ldmatrix.x4 (rows = M: .trans when A is stored [K, M]) and B fragments two n8 tiles at a
time with ldmatrix.x4.trans (B stored [K, N]) or .x4 (stored [N, K]), then issues the MMAs.

A operand in registers (`mma(cast(p, bf16), v_s[s], acc)`): the layout pass has proved that the
source tile's fragment holds, in each thread, the elements of the instruction's A fragments
(layouts.register_a_map); they are packed two per .b32 register (rounded to bf16 / f16, low half
first) in A-fragment order -- for an f32 accumulator this is its own slot order (FlashAttention-3's
observation; fragments.register_operand_map checks it) -- and fed to the register-A form
`wgmma.mma_async ... {d}, {a0..a3}, descB` or to mma.sync in place of ldmatrix. Such a wgmma is
waited for at once: deferring it would keep its A registers and the accumulator reserved. An A operand
in another layout (a loaded or computed tile, not an accumulator) is written to the scope's shared
scratch and read back in A-fragment order (_register_a_exchanged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from argus.codegen.cexpr import render_layout
from argus.codegen.errors import unsupported
from argus.codegen.memory import SView, sview
from argus.codegen.prelude import wgmma_function, wgmma_rs_function
from argus.codegen.tiles import TileMap
from argus.ir import nodes as ir
from argus.ir.fragments import wgmma_descriptor_strides
from argus.ir.layout import Layout, flatten
from argus.ir.passes.layouts import register_a_fragment, register_a_map

if TYPE_CHECKING:
    from argus.codegen.emit import Emitter

_WGMMA_MODE = {128: 1, 64: 2, 32: 3}
_PTX_TYPE = {"bf16": "bf16", "f16": "f16", "f8e4m3": "e4m3", "f8e5m2": "e5m2"}


def emit(em: Emitter, name: str, m: ir.Mma, tm: TileMap) -> None:
    lay = m.layout
    if lay is None:
        raise unsupported("an mma without a fragment layout", m.span)
    a_regs = not isinstance(m.a, ir.Ref)
    if not isinstance(m.b, ir.Ref) or m.b.space != "shared" or (not a_regs and m.a.space != "shared"):
        raise unsupported("mma operands in registers or global memory", m.span,
                          "keep B in a shared buffer; A may be a shared buffer or a register tile")
    ab = m.a.type.dtype if a_regs else m.a.dtype
    if ab.name not in ("bf16", "f16", "f8e4m3", "f8e5m2") or m.b.dtype != ab:
        raise unsupported(f"mma on {ab} x {m.b.dtype} operands", m.span, "bf16, f16 and fp8 (e4m3, e5m2) are supported")
    if ab.bytes == 1:
        if a_regs:
            raise unsupported("an fp8 mma with its A operand in registers", m.span, "keep A in a shared buffer")
        if m.a.transposed or not m.b.transposed:
            # 8-bit MMAs read both operands K-major (no transposed form of wgmma / ldmatrix for bytes)
            raise unsupported("an fp8 mma whose operands are not both K-major", m.span,
                              "store A as [M, K] and B as [N, K] (a linear layer's weight) and pass b_s.T")
    if tm.layout.kind != "mma" or tm.layout.mma != lay:
        raise unsupported("an mma whose result has another register layout", m.span)
    acc = m.acc
    while isinstance(acc, ir.Tag):
        acc = acc.x
    if not (isinstance(acc, ir.Var) and em.local(acc.name) == name):
        # acc = mma(a, b, other): start from `other`, then accumulate in place
        loads = em.preload(m.acc, tm)
        em.line("#pragma unroll")
        em.line(f"for (int ag_i = 0; ag_i < {tm.slots}; ++ag_i) {name}[ag_i] = {em.ex(m.acc, 'ag_i', tm, loads)};")
    b = sview(em, m.b)
    a = register_a(em, m) if a_regs else sview(em, m.a)
    if lay.instr == "wgmma":
        _wgmma(em, name, m, a, b)
    else:
        _mma_sync(em, name, m, a, b)


def _affine_map(amap: np.ndarray, shape: tuple[int, ...]) -> Layout | None:
    """`amap` as a layout over the (flat) slot modes `shape`, when it is one (then a loop renders it)."""
    strides, prefix = [], 1
    if amap[0] != 0:
        return None
    for size in shape:
        strides.append(int(amap[prefix]) if size > 1 else 0)
        prefix *= size
    lay = Layout(tuple(shape), tuple(strides))
    return lay if (np.asarray(lay(np.arange(len(amap)))) == amap).all() else None


def register_a(em: Emitter, m: ir.Mma) -> str:
    """The register A operand packed in the instruction's A-fragment order: `t[r][0..3]` are the four
    .b32 registers (two elements each, low half first) of A instruction tile r = m-tile + M-tiles * k16
    step. Each element comes, in the same thread, from the slot of the source tile that
    layouts.register_a_map names (an f32 accumulator's pairs are A's pairs: fragments.register_operand_map)."""
    src = em.expr_layout(m.a)
    amap = register_a_map(m, src)
    if amap is None:
        if src.kind == "mma":  # the layout pass refuses these (mma-layout); never silently exchanged
            raise unsupported("this mma's register A operand: its layout is not the instruction's A fragment",
                              m.span)
        return _register_a_exchanged(em, m, src)
    stm = em.tilemap(src)
    loads = em.preload(m.a, stm)
    pack = {"bf16": "ag_pack_bf16x2", "f16": "ag_pack_f16x2"}[m.a.type.dtype.name]
    em.features.add("pack")
    n = len(amap) // 2
    t = em.tmp("pa")
    em.line(f"// A operand from registers: {m.a.type.shape[0]}x{m.a.type.shape[1]} in {n // 4} A fragments of 4 x .b32")
    em.line(f"ag_u32 {t}[{n // 4}][4];")
    flat = flatten(register_a_fragment(m).row.shape[1])
    lay = _affine_map(amap, flat)

    def elem(slot) -> str:
        return em.ex(m.a, slot, stm, loads, top=True)

    if lay is not None:
        em.line("#pragma unroll")
        em.line(f"for (int ag_q = 0; ag_q < {n}; ++ag_q) {t}[ag_q / 4][ag_q % 4] = "
                f"{pack}({elem(render_layout(lay, '2 * ag_q'))}, {elem(render_layout(lay, '2 * ag_q + 1'))});")
    else:
        for q in range(n):
            em.line(f"{t}[{q // 4}][{q % 4}] = {pack}({elem(int(amap[2 * q]))}, {elem(int(amap[2 * q + 1]))});")
    return t


def _register_a_exchanged(em: Emitter, m: ir.Mma, src: ir.RegLayout) -> str:
    """A register A operand held in another layout than an accumulator (a loaded, scaled or cast tile):
    its elements go through the scope's shared scratch (fp32, rows padded by one word) and every thread
    reads back the elements of its A fragments (layouts.register_a_fragment), packed as register_a packs
    them."""
    from argus.codegen.cexpr import c_add

    fa = register_a_fragment(m)
    stm = em.tilemap(src)
    loads = em.preload(m.a, stm)
    rows, cols = m.a.type.shape
    pitch = cols + 1
    base = em.scratch(rows * pitch * 4, m.span)
    sp = f"reinterpret_cast<float*>({base})"
    pack = {"bf16": "ag_pack_bf16x2", "f16": "ag_pack_f16x2"}[m.a.type.dtype.name]
    em.features.add("pack")
    n = fa.slots
    t = em.tmp("pa")
    em.line(f"// A operand from registers in layout {src.kind}{list(src.shape)}: to the A fragments "
            "through shared memory")
    em.line(f"ag_u32 {t}[{n // 8}][4];")
    em.open("")
    if stm.replicas > 1:
        em.open(f"if ({stm.owner()})")
    em.line("#pragma unroll")
    r, c = (0 if stm.one_d else stm.row("ag_i")), stm.col("ag_i")
    em.line(f"for (int ag_i = 0; ag_i < {stm.slots}; ++ag_i) {sp}[({r}) * {pitch} + ({c})] = "
            f"{em.ex(m.a, 'ag_i', stm, loads, top=True)};")
    if stm.replicas > 1:
        em.close()
    em.close()
    em.sync_scope()
    tid = em.scope.tid

    def at(slot: str) -> str:
        rr = c_add(render_layout(fa.row[0], tid), render_layout(fa.row[1], slot))
        cc = c_add(render_layout(fa.col[0], tid), render_layout(fa.col[1], slot))
        return f"{sp}[({rr}) * {pitch} + ({cc})]"

    em.line("#pragma unroll")
    em.line(f"for (int ag_q = 0; ag_q < {n // 2}; ++ag_q) {t}[ag_q / 4][ag_q % 4] = "
            f"{pack}({at('2 * ag_q')}, {at('2 * ag_q + 1')});")
    return t


def _check_tile_start(sv: SView, span, what: str) -> None:
    if not isinstance(sv.r0, int) or not isinstance(sv.c0, int):
        raise unsupported(f"an mma {what} operand at a run-time offset inside its buffer's tile", span)


# ---- wgmma -----------------------------------------------------------------------------------------


def _wgmma(em: Emitter, name: str, m: ir.Mma, a: SView | str, b: SView) -> None:
    """a: a shared view, or the C name of the packed register A operand (register_a)."""
    lay = m.layout
    span = m.span
    a_regs = isinstance(a, str)
    (mm, kk), nn = m.a.type.shape if a_regs else m.a.shape, m.b.shape[1]
    gm, gn = lay.warps_m, lay.warps_n
    inst_n = lay.inst_shape[1]
    per_m, per_n = mm // gm, nn // gn
    ma, na = per_m // 64, per_n // inst_n
    for sv, what in ((b, "B"),) if a_regs else ((a, "A"), (b, "B")):
        _check_tile_start(sv, span, what)
        if sv.buf.explicit is not None:
            raise unsupported(f"a wgmma {what} operand in a buffer with an explicit layout=", span,
                               "wgmma reads the canonical swizzled layouts: declare the buffer with swizzle=")
        if sv.buf.alloc.swizzle not in _WGMMA_MODE:
            raise unsupported(f"a wgmma {what} operand in an unswizzled buffer", span,
                               "declare the buffer with swizzle=32, 64 or 128")
    e = b.buf.elem_bytes
    # A is indexed (m, k): K-major when stored [M, K]; B (k, n): N-major when stored [K, N].
    b_major = "K" if b.transposed else "MN"
    b_lbo, b_sbo = _strides(b, b_major)
    wb = b.buf.alloc.swizzle // e
    if not a_regs:
        a_major = "MN" if a.transposed else "K"
        a_lbo, a_sbo = _strides(a, a_major)
        if a_major == "MN" and 64 % (a.buf.alloc.swizzle // e):
            raise unsupported("a transposed wgmma A operand narrower than its swizzle row", span)
    if b_major == "MN" and inst_n % wb:
        raise unsupported(f"wgmma N={inst_n} that is not a multiple of the {b.buf.alloc.swizzle}B swizzle row of B",
                           span, "make each warpgroup's share of BN a multiple of the swizzle row (64 for bf16, 128B)")
    ab = m.b.dtype.name
    kstep = lay.inst_shape[2]
    if m.b.dtype.bytes == 1:
        fn, body = wgmma_function(inst_n, _PTX_TYPE[ab])
    elif a_regs:
        fn, body = wgmma_rs_function(inst_n, ab, 0 if b.transposed else 1)
    else:
        fn, body = wgmma_function(inst_n, ab, int(a.transposed), 0 if b.transposed else 1)
    em.extra.setdefault(fn, body)
    em.features.update({"wgmma", "proxy-fence"})
    regs = inst_n // 2
    em.line(f"// wgmma m64n{inst_n}k{kstep} x {kk // kstep} k-steps; warpgroups {gm}x{gn}, each {per_m}x{per_n} "
            f"({ma}x{na} instructions){'; A from registers' if a_regs else ''}")
    em.open("")
    wm = "" if a_regs else f"ag_wm = ag_wg % {gm}, "  # a register A needs no M offset: its rows are this warpgroup's
    em.line(f"const int ag_wg = {em.scope.tid} >> 7, {wm}ag_wn = ag_wg / {gm};")
    em.line("#pragma unroll")
    em.line(f"for (int ag_i = 0; ag_i < {regs * ma * na}; ++ag_i) ag_reg_fence({name}[ag_i]);")
    em.line("ag_wgmma_fence();")
    em.line("#pragma unroll")
    em.open(f"for (int ag_k = 0; ag_k < {kk // kstep}; ++ag_k)")
    em.line("#pragma unroll")
    em.open(f"for (int ag_mi = 0; ag_mi < {ma}; ++ag_mi)")
    em.line("#pragma unroll")
    em.open(f"for (int ag_ni = 0; ag_ni < {na}; ++ag_ni)")
    if a_regs:
        b_addr = b.addr("ag_k * 16", f"ag_wn * {per_n} + ag_ni * {inst_n}", swizzled=False)
    else:
        a_addr, b_addr = wgmma_operand_addrs(a, b, per_m, per_n, inst_n, kstep)
        a_mode = _WGMMA_MODE[a.buf.alloc.swizzle]
        em.line(f"const ag_u64 ag_da = ag_wgmma_desc({a_addr}, {a_lbo}u, {a_sbo}u, {a_mode}u);")
    em.line(f"const ag_u64 ag_db = ag_wgmma_desc({b_addr}, {b_lbo}u, {b_sbo}u, {_WGMMA_MODE[b.buf.alloc.swizzle]}u);")
    a_arg = f"{a}[ag_mi + {ma} * ag_k]" if a_regs else "ag_da"
    em.line(f"{fn}({name} + (ag_mi + {ma} * ag_ni) * {regs}, {a_arg}, ag_db);")
    em.close()
    em.close()
    em.close()
    em.line("ag_wgmma_commit();")
    # A register A operand stays reserved until the wait: deferring it keeps those registers and the
    # accumulator live across what follows (measured: it made FlashAttention spill), so wait at once,
    # except in the step of a consumer written to overlap it (codegen/held_release.py).
    if em.defer_wgmma and (not a_regs or em.defer_reg_a):
        em.line("// waited for before the next statement that needs the accumulator or this stage")
        em.pending.pop(name, None)  # commit order: a chained group is the newest
        em.pending[name] = regs * ma * na
    else:
        em.line("ag_wgmma_wait<0>();")
        em.line("#pragma unroll")
        em.line(f"for (int ag_i = 0; ag_i < {regs * ma * na}; ++ag_i) ag_reg_fence({name}[ag_i]);")
    em.close()


def wgmma_operand_addrs(a: SView, b: SView, per_m: int, per_n: int, inst_n: int,
                        kstep: int = 16) -> tuple[str, str]:
    """Descriptor start addresses (pre-swizzle: the hardware swizzles address bits) of the A and B
    operands of instruction (ag_mi, ag_ni) at k-step ag_k for warpgroup (ag_wm, ag_wn)."""
    a_addr = a.addr(f"ag_wm * {per_m} + ag_mi * 64", f"ag_k * {kstep}", swizzled=False)
    b_addr = b.addr(f"ag_k * {kstep}", f"ag_wn * {per_n} + ag_ni * {inst_n}", swizzled=False)
    return a_addr, b_addr


def _strides(sv: SView, major: str) -> tuple[int, int]:
    """(LBO, SBO) bytes of the buffer's stored tile: rows of the stored tile are its non-contiguous axis."""
    buf = sv.buf
    contiguous, other = buf.cols, buf.rows
    # wgmma_descriptor_strides(mn, k, major): K-major stores k contiguously (rows = mn); MN-major rows = k.
    if major == "K":
        _, sbo = wgmma_descriptor_strides(other, contiguous, "K", buf.elem_bytes, buf.alloc.swizzle)
        # A swizzled K-major operand never crosses a swizzle row within one k16 step, so the hardware
        # ignores LBO; 16 (encoded 1) is the value the H200 probe ran with.
        return 16, sbo
    return wgmma_descriptor_strides(contiguous, other, "MN", buf.elem_bytes, buf.alloc.swizzle)


def ldmatrix_a_addr(a: SView, tile_m: int, kstep: int = 16) -> str:
    """Lane ag_l's row address for A fragment ag_mi at k-step ag_k of warp row ag_wm. Matrix q = lane / 8
    holds rows (q % 2) * 8.. and k (q / 2) * 8.. (16 bytes: kstep / 2 elements); a lane names one stored
    row of its matrix: an m row (A stored [M, K]) or, for .trans, a k row (A stored [K, M])."""
    m0, k0 = f"ag_wm * {tile_m} + ag_mi * 16", f"ag_k * {kstep}"
    if a.transposed:
        return a.addr(f"{m0} + ((ag_l >> 3) & 1) * 8", f"{k0} + (ag_l >> 4) * 8 + (ag_l & 7)")
    return a.addr(f"{m0} + (ag_l & 15)", f"{k0} + (ag_l >> 4) * {kstep // 2}")


def ldmatrix_b_addr(b: SView, tile_n: int, kstep: int = 16) -> str:
    """Lane ag_l's row address for B fragments 2 * ag_nj, 2 * ag_nj + 1 at k-step ag_k of warp column
    ag_wn. Matrix q holds k (q % 2) * 8.. (16 bytes: kstep / 2 elements) and n (q / 2) * 8..; a lane names a
    k row (B stored [K, N], read with .trans) or an n row (B stored [N, K])."""
    k0, n0 = f"ag_k * {kstep}", f"ag_wn * {tile_n} + ag_nj * 16"
    if b.transposed:
        return b.addr(f"{k0} + ((ag_l >> 3) & 1) * {kstep // 2}", f"{n0} + (ag_l >> 4) * 8 + (ag_l & 7)")
    return b.addr(f"{k0} + ((ag_l >> 3) & 1) * 8 + (ag_l & 7)", f"{n0} + (ag_l >> 4) * 8")


# ---- mma.sync --------------------------------------------------------------------------------------


def _mma_sync(em: Emitter, name: str, m: ir.Mma, a: SView | str, b: SView) -> None:
    """a: a shared view (ldmatrix), or the C name of the packed register A operand (register_a)."""
    lay = m.layout
    a_regs = isinstance(a, str)
    (mm, kk), nn = m.a.type.shape if a_regs else m.a.shape, m.b.shape[1]
    wm_, wn_ = lay.warps_m, lay.warps_n
    tm_, tn_ = mm // wm_, nn // wn_
    mi_n, ni_n = tm_ // 16, tn_ // 8
    for sv in (b,) if a_regs else (a, b):
        if (sv.buf.cols * sv.buf.elem_bytes) % 16:
            raise unsupported("ldmatrix from a buffer whose rows are not a multiple of 16 bytes", m.span)
    kstep = lay.inst_shape[2]
    if m.b.dtype.bytes == 1:
        em.features.update({"mma.sync", "mma.sync.fp8"})
        mma_fn = f"ag_mma_m16n8k32_{_PTX_TYPE[m.b.dtype.name]}"
    else:
        em.features.update({"mma.sync"})
        mma_fn = f"ag_mma_m16n8k16_{m.b.dtype.name}"
    em.line(f"// mma.sync m16n8k{kstep} x {kk // kstep} k-steps; warps {wm_}x{wn_}, each {tm_}x{tn_} "
            f"({mi_n}x{ni_n} instructions){'; A from registers' if a_regs else ''}")
    em.open("")
    em.line(f"const int ag_w = {em.scope.tid} >> 5, ag_l = ag_tid & 31;")
    em.line(f"const int {'' if a_regs else f'ag_wm = ag_w % {wm_}, '}ag_wn = ag_w / {wm_};")
    em.line("#pragma unroll")
    em.open(f"for (int ag_k = 0; ag_k < {kk // kstep}; ++ag_k)")
    if a_regs:
        em.line(f"ag_u32 ag_bf[{ni_n}][2];")
    else:
        em.line(f"ag_u32 ag_af[{mi_n}][4], ag_bf[{ni_n}][2];")
        # A (m, k): matrix q = lane / 8 covers rows (q % 2) * 8.., k (q / 2) * 8..
        em.line("#pragma unroll")
        em.open(f"for (int ag_mi = 0; ag_mi < {mi_n}; ++ag_mi)")
        a_addr = ldmatrix_a_addr(a, tm_, kstep)
        em.line(f"ag_ldmatrix_x4{'_trans' if a.transposed else ''}(ag_af[ag_mi], {a_addr});")
        em.close()
    # B (k, n): matrix q covers k (q % 2) * 8.., n (q / 2) * 8..: two n8 tiles per ldmatrix.x4
    trans_b = "" if b.transposed else "_trans"
    pairs, odd = ni_n // 2, ni_n % 2
    b_addr = ldmatrix_b_addr(b, tn_, kstep)
    if pairs:
        em.line("#pragma unroll")
        em.open(f"for (int ag_nj = 0; ag_nj < {pairs}; ++ag_nj)")
        em.line("ag_u32 ag_t[4];")
        em.line(f"ag_ldmatrix_x4{trans_b}(ag_t, {b_addr});")
        em.line("ag_bf[2 * ag_nj][0] = ag_t[0]; ag_bf[2 * ag_nj][1] = ag_t[1];")
        em.line("ag_bf[2 * ag_nj + 1][0] = ag_t[2]; ag_bf[2 * ag_nj + 1][1] = ag_t[3];")
        em.close()
    if odd:
        em.open("")
        em.line(f"const int ag_nj = {pairs};")
        em.line("ag_u32 ag_t[2];")
        em.line(f"ag_ldmatrix_x2{trans_b}(ag_t, {b_addr});")
        em.line(f"ag_bf[{ni_n - 1}][0] = ag_t[0]; ag_bf[{ni_n - 1}][1] = ag_t[1];")
        em.close()
    em.line("#pragma unroll")
    em.open(f"for (int ag_mi = 0; ag_mi < {mi_n}; ++ag_mi)")
    em.line("#pragma unroll")
    a_arg = f"{a}[ag_mi + {mi_n} * ag_k]" if a_regs else "ag_af[ag_mi]"
    em.line(f"for (int ag_ni = 0; ag_ni < {ni_n}; ++ag_ni) "
            f"{mma_fn}({name} + 4 * (ag_mi + {mi_n} * ag_ni), {a_arg}, ag_bf[ag_ni]);")
    em.close()
    em.close()
    em.close()
