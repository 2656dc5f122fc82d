"""The generated address math, evaluated in Python against the layout algebra (no GPU needed).

The C index expressions that the code generator emits for ldmatrix lanes and wgmma descriptors are
translated to Python and evaluated for every lane / warp / instruction; ldmatrix is simulated on a
shared buffer laid out by the buffer's tile layout, and the registers each lane receives must be the
mma.sync fragment elements (argus/ir/fragments.py). wgmma descriptors must describe, through the PTX
canonical layouts, exactly the buffer elements of the instruction's operand tile.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from argus.codegen import mma
from argus.codegen.emit import Emitter
from argus.codegen.memory import sview
from argus.ir import nodes as ir
from argus.ir.build import build_file, build_source
from argus.ir.fragments import mma_m16n8k16_a, mma_m16n8k16_b, wgmma_canonical_layout
from argus.ir.reg_layout import fragment_of
from argus.ir.transform import walk
from tests.conftest import EXAMPLES

# A and B stored transposed ([K, M] and [N, K]), read through .T views.
GEMM_T = """
kernel gemm_t(A: bf16[K, M], B: bf16[N, K], C: bf16[M, N]):
    param BM = 128
    param BN = 128
    param BK = 64
    param MMA = "mma.sync"
    param SW = 128
    launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=256
    bm = block_id(0)
    bn = block_id(1)
    a_s = shared(bf16[2, BK, BM], swizzle=SW)
    b_s = shared(bf16[2, BN, BK], swizzle=SW)
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)):
        s = k % 2
        copy_async(a_s[s], A[k * BK : +BK, bm * BM : +BM])
        copy_async(b_s[s], B[bn * BN : +BN, k * BK : +BK])
        wait_async(a_s[s], b_s[s])
        acc = mma(a_s[s].T, b_s[s].T, acc, instr=MMA)
        barrier()
    store(C[bm * BM : +BM, bn * BN : +BN], cast(acc, bf16))
reference:
    C = A.T @ B.T
"""


@functools.cache
def _compiled(expr: str):
    py = re.sub(r"ag_swizzle<(\d+), (\d+), (\d+)>\(", r"_sw(\1, \2, \3, ", expr)
    py = py.replace("(ag_u32)", "")
    py = re.sub(r"\b(\d+)u\b", r"\1", py)
    py = py.replace(" / ", " // ")
    return compile(py, "<generated C>", "eval")


def c_eval(expr: str, env: dict):
    """Evaluate a generated C index expression (ints, / % >> & ^, ag_swizzle, (ag_u32) casts); the
    variables may be NumPy arrays (all index arithmetic here is on non-negative values)."""
    return eval(_compiled(expr), {"_sw": lambda s, d, m, x: x ^ (((x >> s) & m) << d), "ag_smem": 0, **env})  # noqa: S307


LANES = np.arange(32)


def _mmas(kernel: ir.Kernel) -> ir.Mma:
    return next(n for n in walk(kernel.body) if isinstance(n, ir.Mma))


def _smem_image(sv, stage_env: dict[str, int]) -> tuple[np.ndarray, int]:
    """A buffer image whose element at the address of view (r, c) holds r * 4096 + c."""
    buf = sv.buf
    image = np.full(buf.nbytes // buf.elem_bytes + 4096, -1, np.int64)
    r, c = np.meshgrid(np.arange(sv.rows), np.arange(sv.cols), indexing="ij")
    off = c_eval(str(sv.elem_offset("ag_R", "ag_C")), {**stage_env, "ag_R": r, "ag_C": c})
    image[off] = r * 4096 + c
    return image, buf.offset


def _ldmatrix(image: np.ndarray, base: int, addrs: np.ndarray, trans: bool, nmat: int) -> np.ndarray:
    """[lane, 2 * matrix + half]: the 16-bit elements each lane receives from ldmatrix.xN(.trans)."""
    rel = addrs[: 8 * nmat] - base
    assert (rel % 16 == 0).all(), "ldmatrix rows must be 16-byte aligned"
    mats = image[(rel // 2)[:, None] + np.arange(8)].reshape(nmat, 8, 8)  # [matrix, row, col]
    g, t = LANES // 4, LANES % 4
    if trans:
        lo, hi = mats[:, 2 * t, g], mats[:, 2 * t + 1, g]
    else:
        lo, hi = mats[:, g, 2 * t], mats[:, g, 2 * t + 1]
    return np.stack([lo.T, hi.T], axis=2).reshape(32, 2 * nmat)


@pytest.mark.parametrize("source", ["gemm.arg", "transposed"])
@pytest.mark.parametrize("swizzle", [128, 64, 0])
def test_ldmatrix_lanes_deliver_the_mma_fragments(source: str, swizzle: int) -> None:
    if source == "gemm.arg":
        k = build_file(EXAMPLES / "gemm.arg", {"MMA": "mma.sync", "SWIZZLE": swizzle, "BN": 64 if swizzle else 128})
    else:
        k = build_source(GEMM_T, {"SW": swizzle})
    em = Emitter(k)
    em.generate()
    m = _mmas(k)
    a, b = sview(em, m.a), sview(em, m.b)
    lay = m.layout
    (mm, kk), nn = m.a.shape, m.b.shape[1]
    tile_m, tile_n = mm // lay.warps_m, nn // lay.warps_n
    env = {"s": 1, "s__pf": 1}
    a_img, a_base = _smem_image(a, env)
    b_img, b_base = _smem_image(b, env)
    (ar, ac), (br, bc) = mma_m16n8k16_a().table(), mma_m16n8k16_b().table()
    a_expr, b_expr = mma.ldmatrix_a_addr(a, tile_m), mma.ldmatrix_b_addr(b, tile_n)
    for wm in range(lay.warps_m):
        for wn in range(lay.warps_n):
            for kstep in range(kk // 16):
                for mi in range(tile_m // 16):
                    addrs = c_eval(a_expr, {**env, "ag_wm": wm, "ag_mi": mi, "ag_k": kstep, "ag_l": LANES})
                    got = _ldmatrix(a_img, a_base, addrs, a.transposed, 4)
                    assert np.array_equal(got, (wm * tile_m + mi * 16 + ar) * 4096 + kstep * 16 + ac)
                for nj in range(tile_n // 16):
                    addrs = c_eval(b_expr, {**env, "ag_wn": wn, "ag_nj": nj, "ag_k": kstep, "ag_l": LANES})
                    got = _ldmatrix(b_img, b_base, addrs, not b.transposed, 4)
                    for h in range(2):  # two n8 tiles per ldmatrix.x4
                        want = (kstep * 16 + br) * 4096 + wn * tile_n + (2 * nj + h) * 8 + bc
                        assert np.array_equal(got[:, 4 * h: 4 * h + 4], want)


@pytest.mark.parametrize("params", [{}, {"BN": 256, "STAGES": 2}, {"SWIZZLE": 64, "BK": 32, "BN": 64}])
def test_wgmma_descriptors_cover_the_operand_tiles(params: dict) -> None:
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": "wgmma", **params})
    _check_wgmma(k)


def test_wgmma_descriptors_transposed_operands() -> None:
    _check_wgmma(build_source(GEMM_T, {"MMA": "wgmma"}))


def test_wgmma_descriptors_of_gemm_ws() -> None:
    _check_wgmma(build_file(EXAMPLES / "gemm_ws.arg"))


def _check_wgmma(k: ir.Kernel) -> None:
    em = Emitter(k)
    em.generate()
    m = _mmas(k)
    a, b = sview(em, m.a), sview(em, m.b)
    lay = m.layout
    (mm, kk), nn = m.a.shape, m.b.shape[1]
    inst_n = lay.inst_shape[1]
    per_m, per_n = mm // lay.warps_m, nn // lay.warps_n
    a_expr, b_expr = mma.wgmma_operand_addrs(a, b, per_m, per_n, inst_n)
    a_lbo, a_sbo = mma._strides(a, "MN" if a.transposed else "K")
    b_lbo, b_sbo = mma._strides(b, "K" if b.transposed else "MN")
    env = {"s": 1, "s__pf": 1}
    e = a.buf.elem_bytes
    for wm in range(lay.warps_m):
        for wn in range(lay.warps_n):
            for kstep in range(kk // 16):
                for mi in range(per_m // 64):
                    for ni in range(per_n // inst_n):
                        v = {**env, "ag_wm": wm, "ag_wn": wn, "ag_mi": mi, "ag_ni": ni, "ag_k": kstep}
                        for sv, expr, major, lbo, sbo, mn, row0, col0 in (
                                (a, a_expr, "MN" if a.transposed else "K", a_lbo, a_sbo, 64,
                                 wm * per_m + mi * 64, kstep * 16),
                                (b, b_expr, "K" if b.transposed else "MN", b_lbo, b_sbo, inst_n,
                                 wn * per_n + ni * inst_n, kstep * 16)):
                            start = (c_eval(expr, v) - sv.buf.offset) // e
                            canon = wgmma_canonical_layout(major, mn, 16, lbo, sbo, e, sv.buf.alloc.swizzle, start)
                            x, y = np.meshgrid(np.arange(mn), np.arange(16), indexing="ij")
                            # A is indexed (m, k); B's view is (k, n) and the canonical layout (n, k)
                            r, c = (row0 + x, col0 + y) if sv is a else (col0 + y, row0 + x)
                            want = c_eval(str(sv.elem_offset("ag_R", "ag_C")), {**v, "ag_R": r, "ag_C": c})
                            assert np.array_equal(canon(x, y), want), (sv.buf.name, major, wm, wn, kstep, mi, ni)


@pytest.mark.parametrize("mma_instr", ["wgmma", "mma.sync"])
def test_accumulator_slots_follow_the_instruction_tiles(mma_instr: str) -> None:
    """The slot the code generator hands instruction (i, j) is where the fragment map puts that tile."""
    k = build_file(EXAMPLES / "gemm.arg", {"MMA": mma_instr})
    m = _mmas(k)
    lay = m.layout
    f = fragment_of(ir.RegLayout("mma", lay.tile, k.threads, lay))
    rows, cols = f.table()
    im, inn = lay.inst_shape[:2]
    gm, gn = lay.warps_m, lay.warps_n
    per_m, per_n = lay.tile[0] // gm, lay.tile[1] // gn
    ni, nj = per_m // im, per_n // inn
    regs = 4 if mma_instr == "mma.sync" else inn // 2
    unit = 32 if mma_instr == "mma.sync" else 128
    for t in range(k.threads):
        g = t // unit
        for i in range(ni):
            for j in range(nj):
                base = (i + ni * j) * regs
                r, c = rows[t, base:base + regs], cols[t, base:base + regs]
                assert (r // im % ni == i).all() and (c // inn % nj == j).all()
                assert ((r // per_m) == g % gm).all() and ((c // per_n) == g // gm).all()
