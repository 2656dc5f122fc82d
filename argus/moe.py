"""Host-side routing for the Mixture-of-Experts kernels of examples/moe.arg (NumPy only).

The layer, for tokens X[T, HID], router logits[T, E] and expert weights Wg, Wu: [E, HID, F],
Wd: [E, F, HID]:

    topk_ids, topk_w = route(logits, top_k)          # top-k experts, softmax over their logits
    rows = sort_rows(topk_ids, E)                    # M = T*K rows grouped by expert
    tile_expert, tile_row = tile_schedule(rows.offs, BM)
    Xs = gather(X, rows.row_token)                   # X_sorted[M, HID]
    moe_up:      Hs = silu(Xs @ Wg[e]) * (Xs @ Wu[e])          (per row, e = its expert)
    moe_down:    Ys = Hs @ Wd[e]
    moe_combine: Out[t] = sum_k topk_w[t, k] * Ys[pos[t, k]]

Metadata (all int32):
- `row_token[M]`, `row_expert[M]`: the (token, expert) pair of each sorted row. Rows are grouped by
  expert in increasing expert order, and within an expert in increasing token order (stable).
- `offs[E + 1]`: expert e owns rows offs[e] .. offs[e+1] (offs[0] = 0, offs[E] = M; an expert may
  own no rows).
- `pos[T, K]`: the sorted row of pair (t, k), so row_token[pos[t, k]] == t and
  row_expert[pos[t, k]] == topk_ids[t, k].
- `tile_expert[NT]`, `tile_row[NT]`: one entry per BM-row tile of each expert's segment, in expert
  order; tile j of expert e starts at row offs[e] + j * BM, and the last tile of an expert may run
  past its segment (the kernels mask those rows with where=). Experts without rows get no tile. A tile
  may also be empty (tile_row = offs[tile_expert + 1]): the GPU schedule pads to cdiv(M, BM) + E tiles
  with (E - 1, M), and moe_up / moe_down skip such a block.
- `row_tile[M]`: the tile that stores each row (the schedule's inverse). moe_up / moe_down state
  the schedule contract with it (assume(lambda ..., over=...)), which is what lets the verifier prove
  that every row of Hs / Ys is written exactly once.

On the GPU, `route_on_gpu()` computes the same metadata (and Xs) with the kernels of examples/moe_route.arg
(moe_route, moe_count + moe_place, moe_schedule, moe_rows, moe_gather), nothing read back to the host: the tile
schedule is padded to its bound with empty tiles, which moe_up and moe_down skip.

`layer()` chains the three kernels through the interpreter; `moe_layer_reference()` evaluates the same
layer per token in float64 from examples/moe.arg's `layer moe` reference block, the ground truth for tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "moe.arg"
ROUTE_EXAMPLE = EXAMPLE.parent / "moe_route.arg"  # the routing as GPU kernels (route_on_gpu)


def route(logits: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k experts of each token (largest logit first, ties to the lower expert) and their weights,
    a softmax over the top-k logits (float32)."""
    logits = np.asarray(logits, dtype=np.float64)
    t, e = logits.shape
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k={top_k} must be in 1..{e}")
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    sel = np.take_along_axis(logits, ids, axis=1)
    w = np.exp(sel - sel.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    return ids.astype(np.int32), w.astype(np.float32)


@dataclass(frozen=True)
class Rows:
    row_token: np.ndarray  # [M] i32
    row_expert: np.ndarray  # [M] i32
    offs: np.ndarray  # [E + 1] i32
    pos: np.ndarray  # [T, K] i32


def sort_rows(topk_ids: np.ndarray, n_experts: int) -> Rows:
    """Group the T*K (token, expert) pairs by expert, stable in token order."""
    ids = np.asarray(topk_ids, dtype=np.int64)
    t, k = ids.shape
    if ids.size and (ids.min() < 0 or ids.max() >= n_experts):
        raise ValueError(f"expert ids must be in 0..{n_experts - 1}")
    flat = ids.reshape(-1)  # pair p = t * K + k
    order = np.argsort(flat, kind="stable")  # sorted row -> pair
    counts = np.bincount(flat, minlength=n_experts)
    offs = np.concatenate([[0], np.cumsum(counts)])
    pos = np.empty(t * k, np.int64)
    pos[order] = np.arange(t * k)
    return Rows((order // k).astype(np.int32), flat[order].astype(np.int32), offs.astype(np.int32),
                pos.reshape(t, k).astype(np.int32))


def tile_schedule(offs: np.ndarray, bm: int) -> tuple[np.ndarray, np.ndarray]:
    """One (expert, first row) entry per BM-row tile of each expert's segment (see row_tiles)."""
    offs = np.asarray(offs, dtype=np.int64)
    te, tr = [], []
    for e in range(len(offs) - 1):
        for r in range(int(offs[e]), int(offs[e + 1]), bm):
            te.append(e)
            tr.append(r)
    return np.asarray(te, np.int32), np.asarray(tr, np.int32)


def row_tiles(tile_expert: np.ndarray, tile_row: np.ndarray, offs: np.ndarray, bm: int) -> np.ndarray:
    """row_tile[M]: the tile that stores each sorted row (the schedule's inverse; the grouped GEMMs
    state the schedule contract with it)."""
    offs = np.asarray(offs, dtype=np.int64)
    out = np.full(int(offs[-1]), -1, np.int32)
    for t, (e, r0) in enumerate(zip(tile_expert, tile_row)):
        out[int(r0):min(int(r0) + bm, int(offs[int(e) + 1]))] = t
    return out


def gather(x: np.ndarray, row_token: np.ndarray) -> np.ndarray:
    """X_sorted: row r is the token row_token[r] of x."""
    return np.asarray(x)[np.asarray(row_token, dtype=np.int64)]


def moe_layer_reference(x, wg, wu, wd, top_k: int, logits, path: str | Path = EXAMPLE) -> np.ndarray:
    """The layer per token in float64, routing included: `layer moe`'s reference block in examples/moe.arg
    (top-k of the logits, softmax over them, silu(x Wg[e]) * (x Wu[e]) times Wd[e], weighted sum)."""
    from argus.dsl.check import check_layer
    from argus.dsl.parser import parse_file
    from argus.dsl.reference import evaluate_reference

    checked = check_layer(parse_file(path).layer("moe"), {"KTOP": int(top_k)})
    env: dict[str, object] = {n: np.asarray(a, dtype=np.float64)
                              for n, a in (("X", x), ("logits", logits), ("Wg", wg), ("Wu", wu), ("Wd", wd))}
    (t, hid), (e, _, f) = env["X"].shape, env["Wg"].shape
    env.update({"T": t, "HID": hid, "E": e, "F": f}, **checked.params)
    return np.asarray(evaluate_reference(checked.layer.reference, env)["Out"], dtype=np.float64)


def _bf16(a):
    from argus.interp.numerics import round_to

    return round_to(np.asarray(a, dtype=np.float32), _dtype("bf16"))


def _dtype(name):
    from argus.dsl.types import DTYPES

    return DTYPES[name]


def metadata(topk_ids: np.ndarray, topk_w: np.ndarray, n_experts: int, bm: int) -> dict[str, np.ndarray]:
    """Every metadata tensor the three kernels take, by argument name."""
    rows = sort_rows(topk_ids, n_experts)
    te, tr = tile_schedule(rows.offs, bm)
    return {"row_token": rows.row_token, "row_expert": rows.row_expert, "offs": rows.offs, "pos": rows.pos,
            "tile_expert": te, "tile_row": tr, "row_tile": row_tiles(te, tr, rows.offs, bm),
            "topk_ids": np.asarray(topk_ids, np.int32), "topk_w": np.asarray(topk_w, np.float32)}


def layer(x, logits, wg, wu, wd, top_k: int, defines: dict | None = None, path: str | Path = EXAMPLE,
          order=None) -> np.ndarray:
    """Route on the host, then run moe_up, moe_down and moe_combine in the interpreter; bf16 output.

    `defines` are compile-time parameters (e.g. BM=64) given to all three kernels; `order` optionally
    reverses the block order of every launch ("reverse") to exercise another schedule."""
    from argus.ir.build import build_file

    defines = dict(defines or {})
    x, wg, wu, wd = (_bf16(a) for a in (x, wg, wu, wd))
    t, hid = x.shape
    e, _, f = wg.shape
    ids, w = route(logits, top_k)
    bm = int(build_file(path, {n: v for n, v in defines.items() if n != "BH"}, "moe_up").param_dict["BM"])
    meta = metadata(ids, w, e, bm)
    m = t * top_k
    xs = gather(x, meta["row_token"])
    hs = np.full((m, f), np.nan, np.float32)
    ys = np.full((m, hid), np.nan, np.float32)
    out = np.full((t, hid), np.nan, np.float32)
    run = _runner(path, defines, order)
    run("moe_up", Xs=xs, Wg=wg, Wu=wu, offs=meta["offs"], tile_expert=meta["tile_expert"],
        tile_row=meta["tile_row"], row_tile=meta["row_tile"], Hs=hs)
    run("moe_down", Hs=hs, Wd=wd, offs=meta["offs"], tile_expert=meta["tile_expert"], tile_row=meta["tile_row"],
        row_tile=meta["row_tile"], Ys=ys)
    run("moe_combine", Ys=ys, pos=meta["pos"], topk_w=meta["topk_w"], topk_ids=meta["topk_ids"],
        row_token=meta["row_token"], row_expert=meta["row_expert"], Out=out)
    return out


def _runner(path, defines, order):
    from argus.dsl import ast
    from argus.dsl.parser import parse_file
    from argus.interp.machine import execute, grid_size
    from argus.ir.build import build_file

    module = parse_file(path)

    def run(name: str, **arrays):
        node = next(k for k in module.kernels if k.name == name)
        own = {s.name for s in node.body if isinstance(s, ast.Param)}
        k = build_file(path, {n: v for n, v in defines.items() if n in own}, name)
        dims: dict[str, int] = {}
        for td in k.tensors:
            for d, n in zip(td.dims, arrays[td.name].shape):
                if isinstance(d, str):
                    if dims.setdefault(d, n) != n:
                        raise ValueError(f"{name}: dimension {d} is {dims[d]} and {n}")
        blocks = None
        if order == "reverse":
            import itertools

            g = grid_size(k, dims, {})
            blocks = list(itertools.product(*(range(n) for n in g)))[::-1]
        execute(k, arrays, dims, {}, blocks=blocks)
    return run


# ---- inputs for `argus run`, the bench and `argus tune` of a kernel whose launch statement names
# metadata="moe_routing" (argus.metadata) ----
METADATA_NAMES = {"offs", "tile_expert", "tile_row", "row_tile", "pos", "topk_w", "topk_ids", "row_token", "row_expert"}


ROUTED_DIMS = {"M", "HID", "F", "E", "E1", "NT", "T", "KTOP"}  # what routed_dims can size


def routed_dims(kernel, tokens: int = 37, experts: int = 4, top_k: int = 2, bm: int | None = None,
                hid: int = 72, ffn: int = 80, seed: int = 0, empty_expert: bool = True
                ) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Dims and metadata tensors of a real routing for `kernel` (an MoE kernel of examples/moe.arg):
    irregular expert sizes (not multiples of BM), one expert without rows when `empty_expert`."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((tokens, experts))
    if empty_expert and experts > top_k:
        logits[:, experts - 1] = -1e9  # the last expert gets no token
    ids, w = route(logits, top_k)
    bm = bm or int(kernel.param_dict.get("BM", 128))
    meta = metadata(ids, w, experts, bm)
    m = tokens * top_k
    dims = {"M": m, "HID": hid, "F": ffn, "E": experts, "E1": experts + 1, "NT": len(meta["tile_expert"]),
            "T": tokens, "KTOP": top_k}
    return {d: dims[d] for d in kernel.dims if d in dims}, meta


ROUTING_SIZES = ("T", "E", "KTOP", "HID", "F")  # `argus run -D` names that size a routing


def routed_inputs(kernel, defines: dict, seed: int | None = None) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Dims and inputs of an MoE kernel for `argus run` (interpreter or GPU): a real routing whose sizes
    follow from -D T= E= KTOP= HID= F= (defaults 37, 4, 2, 72, 80; M, NT, E1 are derived), random bf16
    activations and weights, outputs poisoned. Random integers would break the kernel's assumes."""
    if seed is None:  # fresh routing and activations on every unseeded run
        seed = int(np.random.default_rng().integers(1 << 31))
    g = {d: int(defines[d]) for d in ("T", "E", "KTOP", "HID", "F") if d in defines}
    dims, meta = routed_dims(kernel, tokens=g.get("T", 37), experts=g.get("E", 4), top_k=g.get("KTOP", 2),
                             hid=g.get("HID", 72), ffn=g.get("F", 80), seed=seed)
    return dims, make_inputs(kernel, dims, meta, np.random.default_rng(seed))


def make_inputs(kernel, dims: dict[str, int], meta: dict[str, np.ndarray], rng: np.random.Generator
                ) -> dict[str, np.ndarray]:
    """Random float inputs (bf16-rounded), the given metadata (for inputs only: a routing kernel's outputs,
    pos or row_token, are metadata names too), outputs poisoned with NaN."""
    from argus.interp.run import make_arrays

    arrays = make_arrays(kernel, dims, rng)
    for name, v in meta.items():
        # an output keeps its poison: filled with the routing's answer, a kernel that writes nothing would pass
        if name in arrays and name not in kernel.outputs:
            arrays[name] = np.asarray(v).astype(arrays[name].dtype)
    return arrays


# ---- routing on the GPU: examples/moe_route.arg's kernels over torch tensors ----
def _pow2(n: int, lo: int = 32) -> int:
    p = lo
    while p < n:
        p *= 2
    return p


def route_kernels(experts: int, top_k: int, bm: int, path: str | Path = ROUTE_EXAMPLE, device: int = 0) -> dict:
    """The routing kernels built and loaded for `experts` experts, top-`top_k`, BM-row tiles. The
    expert axis is held in registers (BE = the next power of two >= experts, at least 32)."""
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.ir.build import build_file
    from argus.runtime.launch import GpuKernel

    be = _pow2(experts)
    params = {"moe_route": {"K": top_k, "BE": be}, "moe_count": {"K": top_k, "BE": be},
              "moe_place": {"K": top_k, "BE": be},
              "moe_schedule": {"BM": bm, "BE": be}, "moe_rows": {"K": top_k}, "moe_gather": {}}
    arch = detect_arch(device)
    return {n: GpuKernel(build(build_file(path, p, n), arch=arch), device) for n, p in params.items()}


def route_on_gpu(x, logits, top_k: int, bm: int, kernels: dict) -> dict:
    """Every metadata tensor of moe.arg's kernels (as `metadata()` computes on the host), and Xs, from
    torch tensors x [T, HID] (bf16) and logits [T, E] (f32) on the GPU, with no read back to the host: the
    tile schedule is padded to its bound cdiv(M, BM) + E with empty tiles (expert E - 1, first row M),
    which moe_up and moe_down skip, so their grid is known before the routing runs."""
    import torch

    t, e = logits.shape
    dev = logits.device
    i32 = dict(dtype=torch.int32, device=dev)
    m = t * top_k
    ids = torch.empty((t, top_k), **i32)
    w = torch.empty((t, top_k), dtype=torch.float32, device=dev)
    kernels["moe_route"](logits=logits, topk_ids=ids, topk_w=w)
    pos = torch.empty((t, top_k), **i32)
    offs = torch.empty((e + 1,), **i32)
    be = int(kernels["moe_count"].ir.param_dict["BE"])
    chunks = -(-t // int(kernels["moe_count"].ir.param_dict["BT"]))
    h, g = torch.empty((chunks, be), **i32), torch.empty((chunks, be), **i32)  # per-chunk counts
    kernels["moe_count"](topk_ids=ids, H=h, G=g)
    kernels["moe_place"](topk_ids=ids, H=h, G=g, pos=pos, offs=offs)
    nt = -(-m // bm) + e
    te, tr, row_tile = torch.empty((nt,), **i32), torch.empty((nt,), **i32), torch.empty((m,), **i32)
    kernels["moe_schedule"](offs=offs, tile_expert=te, tile_row=tr, row_tile=row_tile)
    row_token, row_expert = torch.empty((m,), **i32), torch.empty((m,), **i32)
    kernels["moe_rows"](pos=pos, topk_ids=ids, row_token=row_token, row_expert=row_expert)
    xs = torch.empty((m, x.shape[1]), dtype=x.dtype, device=dev)
    kernels["moe_gather"](X=x, row_token=row_token, Xs=xs)
    return {"topk_ids": ids, "topk_w": w, "pos": pos, "offs": offs, "tile_expert": te, "tile_row": tr,
            "row_tile": row_tile, "row_token": row_token, "row_expert": row_expert, "Xs": xs}
