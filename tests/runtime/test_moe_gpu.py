"""examples/moe.arg on the GPU: every kernel on a real routing (argus.moe) with irregular expert sizes
(not multiples of BM, one expert without tokens), random bf16 activations and weights, outputs poisoned
with NaN, compared with the kernel's float64 reference; then the whole layer against the per-token
float64 layer reference. Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from argus import moe
from argus.ir.build import build_file
from tests.conftest import EXAMPLES

gpu = pytest.mark.gpu
MOE = EXAMPLES / "moe.arg"
ROUTINGS = [dict(tokens=37, experts=4, top_k=2, hid=200, ffn=136),
            dict(tokens=300, experts=8, top_k=2, hid=512, ffn=384),
            dict(tokens=96, experts=16, top_k=4, hid=136, ffn=72, empty_expert=False)]
IDS = ["T37-E4-k2", "T300-E8-k2", "T96-E16-k4"]


def _gpu_kernel(kernel):
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    return GpuKernel(build(kernel, arch=detect_arch(0)), 0)


@gpu
@pytest.mark.parametrize("name", ["moe_up", "moe_down", "moe_combine"])
@pytest.mark.parametrize("routing", ROUTINGS, ids=IDS)
def test_moe_kernel_on_gpu(name: str, routing: dict) -> None:
    from argus.runtime.bench import check_on_gpu

    k = build_file(MOE, {}, name)
    dims, meta = moe.routed_dims(k, seed=len(name), **routing)
    arrays = moe.make_inputs(k, dims, meta, np.random.default_rng(routing["tokens"]))
    checks, _ = check_on_gpu(_gpu_kernel(k), dims, arrays=arrays)
    assert all(c.ok for c in checks), [c.describe() for c in checks]


@gpu
def test_moe_layer_on_gpu() -> None:
    """Route, gather, moe_up, moe_down, moe_combine on the GPU vs the layer computed per token."""
    import torch

    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.bench import to_device

    rng = np.random.default_rng(7)
    T, E, K, HID, FF = 150, 8, 2, 256, 192
    x = moe._bf16(rng.standard_normal((T, HID)))
    wg, wu = (moe._bf16(rng.standard_normal((E, HID, FF)) / HID ** 0.5) for _ in range(2))
    wd = moe._bf16(rng.standard_normal((E, FF, HID)) / FF ** 0.5)
    logits = rng.standard_normal((T, E))
    ids, w = moe.route(logits, K)
    kernels = {n: _gpu_kernel(build_file(MOE, {}, n)) for n in ("moe_up", "moe_down", "moe_combine")}
    meta = moe.metadata(ids, w, E, int(kernels["moe_up"].ir.param_dict["BM"]))
    d = {n: to_device(v, "i32" if v.dtype.kind == "i" else "f32") for n, v in meta.items()}
    xs = to_device(moe.gather(x, meta["row_token"]), "bf16")
    M = T * K
    hs = torch.full((M, FF), float("nan"), device="cuda", dtype=torch.bfloat16)
    ys = torch.full((M, HID), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = torch.full((T, HID), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernels["moe_up"](Xs=xs, Wg=to_device(wg, "bf16"), Wu=to_device(wu, "bf16"), offs=d["offs"],
                      tile_expert=d["tile_expert"], tile_row=d["tile_row"], row_tile=d["row_tile"], Hs=hs)
    kernels["moe_down"](Hs=hs, Wd=to_device(wd, "bf16"), offs=d["offs"], tile_expert=d["tile_expert"],
                        tile_row=d["tile_row"], row_tile=d["row_tile"], Ys=ys)
    kernels["moe_combine"](Ys=ys, pos=d["pos"], topk_w=d["topk_w"], topk_ids=d["topk_ids"],
                           row_token=d["row_token"], row_expert=d["row_expert"], Out=out)
    torch.cuda.synchronize()
    ref = moe.moe_layer_reference(x, wg, wu, wd, K, logits=logits)  # examples/moe.arg's `layer moe`
    # H and Y pass through bf16 between the kernels; the layer's tolerance is the bf16 one
    check = compare("Out", out.float().cpu().numpy(), ref, DTYPES["bf16"])
    assert check.ok, check.describe()


@gpu
@pytest.mark.parametrize("name", ["moe_up", "moe_combine"])
def test_cli_runs_moe_kernels_on_a_real_routing(name: str, capsys) -> None:
    """`argus run --gpu --bench` builds routed metadata (random integers would break the assumes and
    index out of range) from -D T= E= KTOP= HID= F=, checks, then times one routed input set."""
    from argus.cli import main

    assert main(["run", str(MOE), "--kernel", name, "-D", "T=300", "-D", "E=8", "-D", "HID=256", "-D", "F=192",
                 "--bench", "--iters", "3"]) == 0
    out = capsys.readouterr().out
    assert "ok   " in out and "GB/s" in out, out


@gpu
@pytest.mark.parametrize(("t", "e", "k", "params"), [(5000, 64, 2, {}), (333, 8, 2, {"BT": 32}),
                                                     (1000, 16, 4, {"BT": 16, "BE": 32})])
def test_moe_sort_on_gpu(t: int, e: int, k: int, params: dict) -> None:
    """examples/moe_route.arg's moe_sort on the GPU against argus.moe.sort_rows (exact), outputs poisoned."""
    import torch

    logits = np.random.default_rng(t).standard_normal((t, e))
    logits[:, 1] = -1e9  # an expert without pairs
    ids, _ = moe.route(logits, k)
    kern = _gpu_kernel(build_file(EXAMPLES / "moe_route.arg", {"K": k, **params}, "moe_sort"))
    pos = torch.full((t, k), -7, dtype=torch.int32, device="cuda")
    offs = torch.full((e + 1,), -7, dtype=torch.int32, device="cuda")
    kern(topk_ids=torch.from_numpy(ids).cuda(), pos=pos, offs=offs)
    torch.cuda.synchronize()
    rows = moe.sort_rows(ids, e)
    assert offs.cpu().numpy().tolist() == rows.offs.tolist()
    assert (pos.cpu().numpy() == rows.pos).all()


@gpu
@pytest.mark.parametrize("routing", ROUTINGS + [dict(tokens=2000, experts=64, top_k=2, hid=256, ffn=128),
                                                dict(tokens=500, experts=128, top_k=8, hid=128, ffn=128)],
                         ids=IDS + ["T2000-E64-k2", "T500-E128-k8"])
def test_route_on_gpu_matches_the_host_routing(routing: dict) -> None:
    """examples/moe_route.arg's five kernels (argus.moe.route_on_gpu) against argus.moe's host routing:
    every metadata tensor exact (weights to f32 rounding), Xs exact, an expert without tokens."""
    import torch

    t, e, k = routing["tokens"], routing["experts"], routing["top_k"]
    rng = np.random.default_rng(t + e)
    logits = rng.standard_normal((t, e)).astype(np.float32)
    if routing.get("empty_expert", True):
        logits[:, e - 1] = -1e9
    x = moe._bf16(rng.standard_normal((t, routing["hid"])))
    bm = 64
    got = moe.route_on_gpu(torch.from_numpy(x).cuda().to(torch.bfloat16), torch.from_numpy(logits).cuda(), k, bm,
                           moe.route_kernels(e, k, bm))
    ids, w = moe.route(logits, k)
    want = moe.metadata(ids, w, e, bm)
    tiles = len(want["tile_expert"])  # then empty tiles up to the bound cdiv(M, BM) + E: (E - 1, M)
    assert got["tile_expert"].shape[0] == -(-t * k // bm) + e
    assert (got["tile_expert"][tiles:] == e - 1).all() and (got["tile_row"][tiles:] == t * k).all()
    for name, v in want.items():
        g = got[name].cpu().numpy()
        if name in ("tile_expert", "tile_row"):
            g = g[:tiles]
        if name == "topk_w":
            assert np.allclose(g, v, rtol=1e-5, atol=1e-6), name
        else:
            assert g.tolist() == v.tolist(), name
    assert np.array_equal(got["Xs"].float().cpu().numpy(), moe.gather(x, want["row_token"]))


@gpu
def test_moe_layer_with_gpu_routing() -> None:
    """The whole layer on the GPU from the logits: route_on_gpu, then moe_up, moe_down, moe_combine over its
    padded schedule (empty tiles skipped), against the layer computed per token in float64 (examples/moe.arg's
    `layer moe`)."""
    import torch

    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.bench import to_device

    rng = np.random.default_rng(11)
    T, E, K, HID, FF = 333, 8, 2, 256, 192
    x = moe._bf16(rng.standard_normal((T, HID)))
    wg, wu = (moe._bf16(rng.standard_normal((E, HID, FF)) / HID ** 0.5) for _ in range(2))
    wd = moe._bf16(rng.standard_normal((E, FF, HID)) / FF ** 0.5)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    kernels = {n: _gpu_kernel(build_file(MOE, {}, n)) for n in ("moe_up", "moe_down", "moe_combine")}
    bm = int(kernels["moe_up"].ir.param_dict["BM"])
    r = moe.route_on_gpu(to_device(x, "bf16"), torch.from_numpy(logits).cuda(), K, bm, moe.route_kernels(E, K, bm))
    sched = {n: r[n] for n in ("offs", "tile_expert", "tile_row", "row_tile")}
    M = T * K
    hs = torch.full((M, FF), float("nan"), device="cuda", dtype=torch.bfloat16)
    ys = torch.full((M, HID), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = torch.full((T, HID), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernels["moe_up"](Xs=r["Xs"], Wg=to_device(wg, "bf16"), Wu=to_device(wu, "bf16"), Hs=hs, **sched)
    kernels["moe_down"](Hs=hs, Wd=to_device(wd, "bf16"), Ys=ys, **sched)
    kernels["moe_combine"](Ys=ys, pos=r["pos"], topk_w=r["topk_w"], topk_ids=r["topk_ids"], row_token=r["row_token"],
                           row_expert=r["row_expert"], Out=out)
    torch.cuda.synchronize()
    ref = moe.moe_layer_reference(x, wg, wu, wd, K, logits=logits)
    check = compare("Out", out.float().cpu().numpy(), ref, DTYPES["bf16"])
    assert check.ok, check.describe()
