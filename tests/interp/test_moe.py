"""The MoE kernels of examples/moe.arg in the interpreter, at small irregular shapes, against their
reference: blocks and the float64 per-token layer (the `layer moe` reference block, through
argus.moe.moe_layer_reference)."""

from __future__ import annotations

import numpy as np
import pytest

from argus import moe
from argus.dsl.diagnostics import ArgusError
from argus.interp.machine import execute
from argus.interp.run import compare
from argus.ir.build import build_file
from tests.conftest import EXAMPLES

PATH = EXAMPLES / "moe.arg"
SMALL = {"BM": 64, "BN": 64, "BK": 64, "STAGES": 2, "CONSUMERS": 1}


def _problem(t=37, e=4, k=2, hid=72, f=80, seed=1, empty=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, hid))
    logits = rng.standard_normal((t, e))
    if empty:
        logits[:, e - 1] = -1e9  # expert e-1 gets no token
    wg, wu = rng.standard_normal((e, hid, f)) / 8, rng.standard_normal((e, hid, f)) / 8
    wd = rng.standard_normal((e, f, hid)) / 8
    return x, logits, wg, wu, wd


def test_routing_metadata():
    logits = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 1.0, 5.0], [1.0, 1.0, 0.0]])
    ids, w = moe.route(logits, 2)
    assert ids.tolist() == [[1, 2], [0, 2], [2, 1], [0, 1]]
    assert np.allclose(w.sum(axis=1), 1.0) and (w[:, 0] >= w[:, 1]).all()
    rows = moe.sort_rows(ids, 3)
    assert rows.offs.tolist() == [0, 2, 5, 8]
    assert rows.row_expert.tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    assert rows.row_token.tolist() == [1, 3, 0, 2, 3, 0, 1, 2]  # stable in token order within an expert
    for t in range(4):
        for k in range(2):
            r = rows.pos[t, k]
            assert rows.row_token[r] == t and rows.row_expert[r] == ids[t, k]
    te, tr = moe.tile_schedule(np.array([0, 5, 5, 12]), 4)
    assert te.tolist() == [0, 0, 2, 2] and tr.tolist() == [0, 4, 5, 9]  # expert 1 has no rows, no tile
    assert moe.row_tiles(te, tr, np.array([0, 5, 5, 12]), 4).tolist() == [0, 0, 0, 0, 1, 2, 2, 2, 2, 3, 3, 3]


def test_masked_store_writes_only_where_true():
    from argus.ir.build import build_source

    k = build_source("""
kernel k(X: f32[R, C], n: i32[1], Y: f32[R, C]):
    launch grid=(1,), threads=128
    lim = load(n[0])
    store(Y[0:+8, 0:+4], load(X[0:+8, 0:+4]), where=(arange(8) < lim)[:, None])
""")
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    y = np.full((8, 4), -1.0, np.float32)
    execute(k, {"X": x, "n": np.array([3], np.int32), "Y": y}, {"R": 8, "C": 4}, {})
    assert (y[:3] == x[:3]).all() and (y[3:] == -1).all()


def _assert_matches_reference(k, inputs: dict, arrays: dict, dims: dict) -> None:
    """Every output of the run (`arrays`) against the kernel's float64 reference on its `inputs`."""
    from argus.dsl.reference import evaluate_reference

    env = {n: a.astype(np.float64) if a.dtype.kind == "f" else a for n, a in inputs.items()}
    env.update(dims)
    env.update(k.param_dict)
    ref = evaluate_reference(k.reference, env)
    for o in k.outputs:
        c = compare(o, arrays[o], ref[o], k.tensor(o).dtype)
        assert c.ok, c.describe()


@pytest.mark.parametrize("name", ["moe_up", "moe_down", "moe_combine"])
def test_kernel_matches_reference(name):
    params = SMALL if name != "moe_combine" else {"BH": 64}
    k = build_file(PATH, params, name)
    dims, meta = moe.routed_dims(k, tokens=37, experts=4, top_k=2, bm=params.get("BM"), hid=72, ffn=80)
    assert meta["offs"][4] - meta["offs"][3] == 0  # an expert without rows
    counts = np.diff(meta["offs"])
    assert any(c % 64 for c in counts)  # segments that are not tile multiples
    arrays = moe.make_inputs(k, dims, meta, np.random.default_rng(0))
    inputs = {n: a.copy() for n, a in arrays.items()}
    hazards = execute(k, arrays, dims, {}, observe_hazards=True)
    assert not hazards, hazards
    _assert_matches_reference(k, inputs, arrays, dims)


@pytest.mark.parametrize("name", ["moe_up", "moe_down"])
def test_kernel_skips_the_empty_tiles_of_a_padded_schedule(name):
    """The schedule the GPU routing builds (moe_schedule): padded to cdiv(M, BM) + E tiles with empty ones
    (expert E - 1, first row M), which the kernel's `if r0 < r_end:` skips; the output against the reference."""
    k = build_file(PATH, SMALL, name)
    dims, meta = moe.routed_dims(k, tokens=37, experts=4, top_k=2, bm=SMALL["BM"], hid=72, ffn=80)
    nt = -(-dims["M"] // SMALL["BM"]) + 4
    pad = nt - len(meta["tile_expert"])
    assert pad > 0
    meta = {**meta, "tile_expert": np.concatenate([meta["tile_expert"], np.full(pad, 3, np.int32)]),
            "tile_row": np.concatenate([meta["tile_row"], np.full(pad, dims["M"], np.int32)])}
    dims = {**dims, "NT": nt}
    arrays = moe.make_inputs(k, dims, meta, np.random.default_rng(1))
    inputs = {n: a.copy() for n, a in arrays.items()}
    execute(k, arrays, dims, {})
    _assert_matches_reference(k, inputs, arrays, dims)


@pytest.mark.parametrize("order", [None, "reverse"])
def test_layer_matches_float64_reference(order):
    x, logits, wg, wu, wd = _problem()
    out = moe.layer(x, logits, wg, wu, wd, 2, SMALL, order=order)
    b = moe._bf16
    ref = moe.moe_layer_reference(b(x), b(wg), b(wu), b(wd), 2, logits=logits)
    assert not np.isnan(out).any()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def _per_token_loop(x, wg, wu, wd, ids, w):
    """The layer written as the loop its definition reads, independently of the .arg's reference."""
    out = np.zeros((x.shape[0], wd.shape[2]))
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            g, u = x[t] @ wg[e], x[t] @ wu[e]
            out[t] += float(w[t, k]) * ((g / (1.0 + np.exp(-g)) * u) @ wd[e])
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_layer_reference_block_is_the_per_token_loop(k):
    """`layer moe`'s reference block (the ground truth) against a plain per-token loop with routing
    weights computed by hand: softmax over the top-k logits, largest first."""
    x, logits, wg, wu, wd = _problem(t=23, e=5, hid=24, f=16, seed=k, empty=False)
    ids = np.argsort(-logits, axis=1)[:, :k]
    sel = np.take_along_axis(logits, ids, axis=1)
    w = np.exp(sel - sel.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    ref = moe.moe_layer_reference(x, wg, wu, wd, k, logits=logits)
    assert np.allclose(ref, _per_token_loop(x, wg, wu, wd, ids, w), rtol=1e-12, atol=1e-12)


def test_layer_default_tiles_top1_three_experts():
    x, logits, wg, wu, wd = _problem(t=29, e=3, k=1, hid=64, f=48, seed=3, empty=False)
    out = moe.layer(x, logits, wg, wu, wd, 1)  # BM=128: every expert's rows sit in one partial tile
    b = moe._bf16
    ref = moe.moe_layer_reference(b(x), b(wg), b(wu), b(wd), 1, logits=logits)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def test_broken_schedule_fails_the_assume_with_values():
    k = build_file(PATH, SMALL, "moe_up")
    dims, meta = moe.routed_dims(k, bm=64)
    meta = dict(meta)
    meta["tile_row"] = meta["tile_row"].copy()
    meta["tile_row"][1] += 1000  # a tile that starts outside its expert's rows
    arrays = moe.make_inputs(k, dims, meta, np.random.default_rng(0))
    with pytest.raises(ArgusError) as ei:
        execute(k, arrays, dims, {})
    d = ei.value.diagnostics[0]
    assert d.code == "precondition"
    assert any("= 1025" in n and "tile_row" in n for n in d.notes), d.notes  # names the values it saw


def test_a_kernel_with_a_metadata_name_but_no_builder_gets_generic_inputs() -> None:
    """Routed inputs are only for kernels that name the routing builder in their launch statement; an
    integer input that happens to be called `offs` must not send a kernel there (it used to end in a
    KeyError, when kernels were picked out by argument names)."""
    from argus.interp.run import run_interp
    from argus.ir.build import build_source

    k = build_source("""
kernel ragged(X: f32[N, C], offs: i32[S1], Y: f32[N, C]):
    param BR = 32
    launch grid=(cdiv(N, BR),), threads=128
    r = block_id(0)
    o = load(offs[0])
    store(Y[r * BR : +BR, 0 : +32], load(X[r * BR : +BR, 0 : +32]) * 2.0 + o)
reference:
    Y = X * 2.0 + offs[0]
""")
    assert k.metadata is None
    res = run_interp(k, {"N": 100, "C": 32, "S1": 5}, seed=1)
    assert res.ok, [c.describe() for c in res.checks]


ROUTE = EXAMPLES / "moe_route.arg"


def _sorted_on_interp(ids: np.ndarray, experts: int, params: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    k = build_file(ROUTE, {"K": ids.shape[1], **(params or {})}, "moe_sort")
    pos = np.full(ids.shape, -7, np.int32)  # poisoned: every element must be written
    offs = np.full(experts + 1, -7, np.int32)
    execute(k, {"topk_ids": ids, "pos": pos, "offs": offs}, {"T": ids.shape[0], "KTOP": ids.shape[1],
                                                             "E1": experts + 1}, {})
    return pos, offs


@pytest.mark.parametrize(("t", "e", "k", "params"), [(37, 4, 2, {}), (150, 8, 2, {"BT": 32}),
                                                     (70, 16, 4, {"BT": 16, "BE": 32})])
def test_moe_sort_matches_the_host_sort(t, e, k, params):
    """moe_sort (examples/moe_route.arg) against argus.moe.sort_rows on a real top-k routing: several
    blocks, a last block past T, an expert without pairs, K = 4."""
    logits = np.random.default_rng(t).standard_normal((t, e))
    logits[:, 1] = -1e9  # expert 1 gets no pair
    ids, _ = moe.route(logits, k)
    pos, offs = _sorted_on_interp(ids, e, params)
    rows = moe.sort_rows(ids, e)
    assert offs.tolist() == rows.offs.tolist()
    assert pos.tolist() == rows.pos.tolist()


def test_moe_sort_refuses_an_id_outside_its_experts():
    ids = np.array([[0, 1], [2, 4]], np.int32)  # 4 is not an expert of 4
    with pytest.raises(ArgusError, match="assume"):
        _sorted_on_interp(ids, 4)


def _run_route_kernel(name: str, params: dict, arrays: dict, dims: dict) -> dict:
    execute(build_file(ROUTE, params, name), arrays, dims, {})
    return arrays


@pytest.mark.parametrize(("t", "e", "k", "bm"), [(37, 4, 2, 16), (150, 8, 2, 64), (70, 16, 4, 32)])
def test_moe_schedule_rows_gather_match_the_host(t, e, k, bm):
    """moe_schedule, moe_rows and moe_gather (examples/moe_route.arg) in the interpreter against
    argus.moe's tile_schedule / row_tiles, sort_rows and gather, on a routing with an empty expert."""
    rng = np.random.default_rng(t + e)
    logits = rng.standard_normal((t, e))
    logits[:, 1] = -1e9
    ids, w = moe.route(logits, k)
    meta = moe.metadata(ids, w, e, bm)
    m = t * k
    nt = -(-m // bm) + e
    got = _run_route_kernel("moe_schedule", {"BM": bm, "BE": 32}, {
        "offs": meta["offs"], "tile_expert": np.full(nt, -7, np.int32), "tile_row": np.full(nt, -7, np.int32),
        "row_tile": np.full(m, -7, np.int32)}, {"E1": e + 1, "NT": nt, "M": m})
    tiles = len(meta["tile_expert"])
    assert got["tile_expert"][:tiles].tolist() == meta["tile_expert"].tolist()
    assert got["tile_row"][:tiles].tolist() == meta["tile_row"].tolist()
    assert (got["tile_expert"][tiles:] == e - 1).all() and (got["tile_row"][tiles:] == m).all()  # empty tiles
    assert got["row_tile"].tolist() == meta["row_tile"].tolist()
    got = _run_route_kernel("moe_rows", {"K": k, "BR": 32, "BP": 16}, {
        "pos": meta["pos"], "topk_ids": ids, "row_token": np.full(m, -7, np.int32),
        "row_expert": np.full(m, -7, np.int32)}, {"T": t, "KTOP": k, "M": m})
    assert got["row_token"].tolist() == meta["row_token"].tolist()
    assert got["row_expert"].tolist() == meta["row_expert"].tolist()
    x = moe._bf16(rng.standard_normal((t, 40)))
    got = _run_route_kernel("moe_gather", {"BH": 32}, {
        "X": x, "row_token": meta["row_token"], "Xs": np.full((m, 40), np.nan, np.float32)},
        {"T": t, "HID": 40, "M": m})
    assert np.array_equal(got["Xs"], moe.gather(x, meta["row_token"]))


def test_routed_inputs_leave_a_routing_kernels_outputs_poisoned():
    """moe_sort's outputs (pos, offs) are routing metadata names too: make_inputs must not fill them with
    the routing's answer (a kernel that wrote nothing would then pass its check)."""
    k = build_file(ROUTE, {}, "moe_sort")
    dims, meta = moe.routed_dims(k, tokens=50, experts=8)
    arrays = moe.make_inputs(k, dims, meta, np.random.default_rng(0))
    assert np.array_equal(arrays["topk_ids"], meta["topk_ids"])
    assert not np.array_equal(arrays["pos"], meta["pos"]) and not np.array_equal(arrays["offs"], meta["offs"])


@pytest.mark.parametrize(("t", "e", "k", "params"), [(37, 4, 2, {}), (150, 8, 2, {"BT": 32}),
                                                     (70, 16, 4, {"BT": 16, "BE": 32})])
def test_moe_count_and_place_match_the_host_sort(t, e, k, params):
    """The two linear passes route_on_gpu runs (moe_count, then moe_place) against argus.moe.sort_rows."""
    logits = np.random.default_rng(t).standard_normal((t, e))
    logits[:, 1] = -1e9
    ids, _ = moe.route(logits, k)
    p = {"K": k, **params}
    bt, be = p.get("BT", 64), p.get("BE", 64)
    nb = -(-t // bt)
    hg = {"H": np.full((nb, be), -7, np.int32), "G": np.full((nb, be), -7, np.int32)}
    got = _run_route_kernel("moe_count", p, {"topk_ids": ids, **hg}, {"T": t, "KTOP": k, "NB": nb, "BE1": be})
    pos, offs = np.full(ids.shape, -7, np.int32), np.full(e + 1, -7, np.int32)
    _run_route_kernel("moe_place", p, {"topk_ids": ids, "H": got["H"], "G": got["G"], "pos": pos, "offs": offs},
                      {"T": t, "KTOP": k, "NB": nb, "BE1": be, "E1": e + 1})
    rows = moe.sort_rows(ids, e)
    assert offs.tolist() == rows.offs.tolist() and pos.tolist() == rows.pos.tolist()
