"""Register layouts beyond the mma accumulators: row slices of a fragment (row statistics), index tiles,
and an accumulator reused in place as the A operand of the next mma (FlashAttention's P).

The facts the code generator relies on are checked here against the fragment tables, not assumed:
which lanes share a row (and nothing else), and that an f32 accumulator's register pairs are the A
fragment of the next mma (FlashAttention-3's observation for wgmma; the same for mma.sync m16n8k16).
"""

from __future__ import annotations

import numpy as np
import pytest

from argus.dsl.diagnostics import ArgusError
from argus.ir import nodes as ir
from argus.ir.build import build_file, build_source
from argus.ir.fragments import (
    mma_m16n8k16_a,
    mma_m16n8k16_c,
    mma_sync_block_fragment,
    register_operand_map,
    slice_fragment,
    tile_fragment,
    wgmma_block_a_fragment,
    wgmma_block_fragment,
    wgmma_m64k16_a,
    wgmma_m64nNk16_d,
)
from argus.ir.reg_layout import fragment_of, rows_reg_layout
from tests.conftest import EXAMPLES

# ---- accumulator -> A operand ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [16, 32, 64, 128, 256])
def test_wgmma_accumulator_is_the_register_a_fragment(n: int) -> None:
    """The f32 m64nN accumulator, read as pairs of slots, holds in each thread exactly the m64k16 A
    fragments of its 16-column chunks: chunk c's A slot a is accumulator slot a + 8c."""
    d = wgmma_m64nNk16_d(n)
    a = tile_fragment(wgmma_m64k16_a(), (64, n), (1, 1), (0, None))
    m = register_operand_map(d, a)
    assert m is not None and (m == np.arange(n // 2)).all()
    # element by element, from the tables: the same thread, the same (row, col)
    dr, dc = d.table()
    ar, ac = a.table()
    assert (dr[:, m] == ar).all() and (dc[:, m] == ac).all()


@pytest.mark.parametrize(("bm", "bk", "groups", "inst_n"), [(128, 64, 2, 64), (128, 128, 2, 128), (256, 64, 2, 64),
                                                          (192, 128, 3, 128), (64, 64, 1, 32)])
def test_wgmma_block_accumulator_feeds_block_a(bm: int, bk: int, groups: int, inst_n: int) -> None:
    """Over a block (warpgroups splitting M, several 64-row slabs and instruction tiles each) the map
    exists and is a permutation of the accumulator's slots."""
    src = wgmma_block_fragment(bm, bk, groups, 1, instr_n=inst_n)
    m = register_operand_map(src, wgmma_block_a_fragment(bm, bk, groups))
    assert m is not None and sorted(m.tolist()) == list(range(src.slots))


def test_mma_sync_two_n8_accumulators_are_one_k16_a_fragment() -> None:
    c2 = tile_fragment(mma_m16n8k16_c(), (16, 16), (1, 1), (0, 1))  # two n8 tiles side by side
    m = register_operand_map(c2, mma_m16n8k16_a())
    assert m is not None and (m == np.arange(8)).all()
    src = mma_sync_block_fragment("C", 128, 64, 16, 8, 1)
    dst = mma_sync_block_fragment("A", 128, 128, 64, 8, 1)
    m = register_operand_map(src, dst)
    assert m is not None and sorted(m.tolist()) == list(range(src.slots))


def test_a_operand_map_needs_the_same_split_over_m() -> None:
    # warps 4x2 over the scores: each warp holds half of a row band, not the A rows it would need
    assert register_operand_map(mma_sync_block_fragment("C", 128, 64, 16, 4, 2),
                                mma_sync_block_fragment("A", 128, 128, 64, 8, 1)) is None
    assert register_operand_map(wgmma_block_fragment(128, 64, 2, 1), wgmma_block_a_fragment(128, 64, 1)) is None


# ---- row slices ------------------------------------------------------------------------------------


@pytest.mark.parametrize("frag", [wgmma_block_fragment(128, 64, 2, 1, instr_n=64),
                                  wgmma_block_fragment(256, 128, 2, 1, instr_n=128),
                                  mma_sync_block_fragment("C", 128, 64, 16, 8, 1),
                                  mma_sync_block_fragment("C", 64, 128, 16, 2, 1)],
                         ids=["wgmma-128x64", "wgmma-256x128", "mma.sync-8x1", "mma.sync-2x1"])
def test_row_slice_from_tables(frag) -> None:
    sl = slice_fragment(frag, 0)
    assert sl.lanes == (1, 2)  # derived from the layout modes: the C layouts' tig bits
    rows, _ = frag.table()
    _, srow = sl.fragment.table()
    smap = np.asarray(sl.slot_map(np.arange(frag.slots)))
    assert (srow[:, smap] == rows).all()  # slot s of the fragment reads the slice's slot smap[s]
    for t in range(frag.threads):  # the lanes differing in bits 0, 1 hold the same rows, all their columns
        group = [t ^ x for x in (0, 1, 2, 3)]
        assert all(set(rows[g]) == set(rows[t]) for g in group)
        held = sum(int((rows[g] == rows[t][0]).sum()) for g in group)
        assert held == frag.tile[1]
    assert sl.fragment.slots == 2 * (frag.tile[0] // (frag.threads // 32 * 16) if frag.name.startswith("mma")
                                     else frag.tile[0] // (frag.threads // 128 * 64))


def test_row_slice_refuses_rows_across_warps() -> None:
    with pytest.raises(ValueError, match="not lanes of one warp"):
        slice_fragment(wgmma_block_fragment(64, 128, 1, 2), 0)  # two warpgroups share each row
    with pytest.raises(ValueError, match="not lanes of one warp"):
        slice_fragment(mma_sync_block_fragment("C", 128, 64, 16, 4, 2), 0)


# ---- the layout pass on flash_attention.arg ---------------------------------------------------------


def _layouts(kernel: ir.Kernel) -> dict[str, ir.RegLayout]:
    out: dict[str, ir.RegLayout] = {}

    def walk(body):
        for s in body:
            if isinstance(s, ir.Let) and s.layout is not None:
                out.setdefault(s.name, s.layout)
            for f in ("body", "then", "orelse"):
                if hasattr(s, f):
                    walk(getattr(s, f))
    walk(kernel.body)
    return out


@pytest.mark.parametrize("params", [{}, {"MMA": "mma.sync"}, {"CAUSAL": True, "HD": 64}, {"BQ": 192, "WARPGROUPS": 3}])
def test_flash_attention_layouts(params: dict) -> None:
    lays = _layouts(build_file(EXAMPLES / "flash_attention.arg", params))
    assert lays["sc"].kind == lays["p"].kind == lays["acc"].kind == "mma"
    assert lays["sc"].mma.warps_n == lays["acc"].mma.warps_n == 1  # rows whole per warp (group)
    assert lays["kpos"].kind == lays["qpos"].kind == "index"
    rows = {lays[n] for n in ("m", "l", "m_new", "alpha")}
    assert len(rows) == 1 and rows.pop() == rows_reg_layout(lays["sc"]) == rows_reg_layout(lays["acc"])
    # the rows layout is the row slice of both accumulators
    sl = fragment_of(lays["m"])
    for acc in ("sc", "acc"):
        assert (slice_fragment(fragment_of(lays[acc]), 0).fragment.table()[1] == sl.table()[1]).all()


@pytest.mark.parametrize(("file", "vectors"), [("rmsnorm.arg", ("w",)), ("layernorm.arg", ("w", "b"))])
@pytest.mark.parametrize("bn", [1024, 8192])
def test_one_row_block_holds_its_weights_in_the_rows_columns(file: str, vectors: tuple, bn: int) -> None:
    """BM=1: the [1, BN] row tile is blocked first and the weight vectors broadcast into it are its column
    slice, read straight from global memory 16 bytes at a time (they were blocked on their own, in 8-byte
    runs, and converted through 16-32 KB of shared memory with four barriers per vector)."""
    lays = _layouts(build_file(EXAMPLES / file, {"BM": 1, "BN": bn, "THREADS": max(32, bn // 8)}))
    assert lays["x"].kind == "blocked" and lays["x"].vec == 8
    for v in vectors:
        assert lays[v].kind == "slice" and lays[v].parent == lays["x"] and lays[v].keep == 1


REG_A = """
kernel two_mmas(A: bf16[M, K], B: bf16[K, N], C: bf16[N, P], O: f32[M, P]):
    param MMA = "mma.sync"
    launch grid=(1,), threads=256
    a_s = shared(bf16[128, 64], swizzle=128)
    b_s = shared(bf16[64, 64], swizzle=128)
    c_s = shared(bf16[64, 64], swizzle=128)
    copy(a_s, A[0:+128, 0:+64])
    copy(b_s, B[0:+64, 0:+64])
    copy(c_s, C[0:+64, 0:+64])
    barrier()
    x = mma(a_s, b_s, zeros(f32[128, 64]), instr=MMA)
    y = mma(cast(x, bf16), c_s, zeros(f32[128, 64]), instr=MMA)
    store(O[0:+128, 0:+64], y)
reference:
    O = (A[0:128, 0:64] @ B[0:64, 0:64]) @ C[0:64, 0:64]
"""


@pytest.mark.parametrize("mma", ["mma.sync", "wgmma"])
def test_register_a_forces_whole_rows(mma: str) -> None:
    lays = _layouts(build_source(REG_A.replace('"mma.sync"', f'"{mma}"')))
    assert lays["x"].mma.warps_n == 1 and lays["y"].mma.warps_n == 1
    assert lays["x"].mma.warps_m == lays["y"].mma.warps_m


@pytest.mark.parametrize("mma", ["mma.sync", "wgmma"])
def test_register_a_from_a_loaded_tile_goes_through_shared_memory(mma: str) -> None:
    """A register A operand that is not an accumulator (a loaded tile) is accepted: the code generator
    re-distributes it into the instruction's A fragments through its shared scratch."""
    from argus.codegen.emit import generate

    src = REG_A.replace('"mma.sync"', f'"{mma}"').replace(
        "    y = mma(cast(x, bf16), c_s", "    t = load(A[0:+128, 0:+64])\n    y = mma(t, c_s")
    k = build_source(src)
    assert _layouts(k)["t"].kind == "blocked"
    assert "to the A fragments through shared memory" in generate(k).source


def test_rows_layout_refused_for_rows_across_warpgroups() -> None:
    """wgmma M=64 over two warpgroups splits N: a row reduction of it has no row-slice layout."""
    with pytest.raises(ArgusError, match="cannot each own whole rows"):
        build_file(EXAMPLES / "flash_attention.arg", {"BQ": 64, "WARPGROUPS": 2})
