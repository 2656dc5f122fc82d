#!/usr/bin/env python3
"""Argus MoE kernels (examples/moe.arg) against torch._grouped_mm, side by side in one process.

    python3 benchmarks/bench_moe.py                       # all three shapes; updates benchmarks/RESULTS.md
    python3 benchmarks/bench_moe.py --shapes mixtral --iters 10 --md -

Per shape (T = 4096 tokens, random router logits): routing on the host (argus.moe: top-k, softmax over
the top-k, rows sorted by expert, the BM-row tile schedule), then

* up-projection: Argus `moe_up` (gate and up grouped GEMMs with SiLU(gate)·up fused in the epilogue,
  writing [M, F]) vs torch._grouped_mm(Xs, [Wg | Wu]) on the same sorted rows (writing [M, 2F], no
  activation) and vs grouped_mm + silu·mul; FLOPs 2·M·HID·2F for all of them;
* the whole layer from X: gather (torch index_select, the same for both), Argus moe_up, moe_down,
  moe_combine vs torch (grouped_mm, silu·mul, grouped_mm, index_add_ of the weighted rows); routing
  metadata is computed once and shared (not timed for either);
* the whole layer from X and the router logits, routing timed: Argus's routing kernels
  (examples/moe_route.arg through argus.moe.route_on_gpu) then moe_up, moe_down, moe_combine, vs torch's
  topk, softmax, stable argsort, bincount, cumsum, index_select, then the same grouped_mm layer.

Correctness first: outputs poisoned with NaN, fresh random inputs, compared with float64 results
computed on the GPU per expert (argus.interp.run.compare, the interpreter's criterion). Timing: CUDA
events, stream backed up by a sleep kernel, samples interleaved, median of --iters
(argus.runtime.bench.time_interleaved). The weights are far larger than the L2, so no rotation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import output_args, write_markdown  # noqa: E402

T = 4096
SHAPES = {  # name: (experts, top_k, hidden, ffn)
    "mixtral": (8, 2, 4096, 14336),
    "deepseek-v3": (256, 8, 7168, 2048),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
}
MOE_FILE = ROOT / "examples" / "moe.arg"


def load_kernels(params: dict[str, dict]):
    import argus
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    out = {}
    for name in ("moe_up", "moe_down", "moe_combine"):
        k = argus.load(MOE_FILE, name, **params.get(name, {}))
        out[name] = GpuKernel(build(k.lower(), arch=detect_arch(0)), 0)
    return out


def run_shape(name: str, kernels: dict, bm: int, iters: int, seed: int) -> dict:
    import torch
    import torch.nn.functional as F

    from argus import moe
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.bench import time_interleaved

    E, K, HID, FF = SHAPES[name]
    dev = "cuda"
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    x = torch.randn((T, HID), device=dev, generator=g).to(torch.bfloat16)
    logits = torch.randn((T, E), device=dev, generator=g)
    wg = (torch.randn((E, HID, FF), device=dev, generator=g) / HID ** 0.5).to(torch.bfloat16)
    wu = (torch.randn((E, HID, FF), device=dev, generator=g) / HID ** 0.5).to(torch.bfloat16)
    wd = (torch.randn((E, FF, HID), device=dev, generator=g) / FF ** 0.5).to(torch.bfloat16)

    topk_ids, topk_w_np = moe.route(logits.cpu().numpy(), K)
    meta = moe.metadata(topk_ids, topk_w_np, E, bm)
    i32 = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in meta.items() if k != "topk_w"}
    topk_w = torch.from_numpy(np.ascontiguousarray(meta["topk_w"])).to(dev)
    offs_np = meta["offs"]
    M = int(offs_np[-1])
    counts = np.diff(offs_np)
    row_token = i32["row_token"].long()
    offs_end = i32["offs"][1:].contiguous()
    w_row_np = np.empty(M, np.float32)
    w_row_np[meta["pos"].reshape(-1)] = meta["topk_w"].reshape(-1)  # the routing weight of each sorted row
    w_row = torch.from_numpy(w_row_np).to(dev)
    wgu = torch.cat([wg, wu], dim=2).contiguous()

    xs = x.index_select(0, row_token)
    bf16 = DTYPES["bf16"]
    up, down, comb = kernels["moe_up"], kernels["moe_down"], kernels["moe_combine"]

    sched = dict(offs=i32["offs"], tile_expert=i32["tile_expert"], tile_row=i32["tile_row"], row_tile=i32["row_tile"])

    def argus_up(xs_, hs_):
        up(Xs=xs_, Wg=wg, Wu=wu, Hs=hs_, **sched)

    def argus_layer(out_):
        xs_ = x.index_select(0, row_token)
        hs_ = torch.empty((M, FF), device=dev, dtype=torch.bfloat16)
        up(Xs=xs_, Wg=wg, Wu=wu, Hs=hs_, **sched)
        ys_ = torch.empty((M, HID), device=dev, dtype=torch.bfloat16)
        down(Hs=hs_, Wd=wd, Ys=ys_, **sched)
        comb(Ys=ys_, pos=i32["pos"], topk_w=topk_w, topk_ids=i32["topk_ids"], row_token=i32["row_token"],
             row_expert=i32["row_expert"], Out=out_)

    def torch_layer():
        xs_ = x.index_select(0, row_token)
        gu = torch._grouped_mm(xs_, wgu, offs=offs_end)
        h = F.silu(gu[:, :FF]) * gu[:, FF:]
        y = torch._grouped_mm(h, wd, offs=offs_end)
        out = torch.zeros((T, HID), device=dev, dtype=torch.float32)
        out.index_add_(0, row_token, y.float() * w_row[:, None])
        return out.to(torch.bfloat16)

    # the layer from the router logits, routing included: Argus's routing kernels (examples/moe_route.arg,
    # argus.moe.route_on_gpu: nothing read back, the schedule padded with empty tiles) against torch's
    # routing (topk, softmax, a stable argsort of the experts, bincount / cumsum, index_select)
    rkern = moe.route_kernels(E, K, bm)

    def argus_layer_routed(out_):
        r = moe.route_on_gpu(x, logits, K, bm, rkern)
        sc = {n: r[n] for n in ("offs", "tile_expert", "tile_row", "row_tile")}
        hs_ = torch.empty((M, FF), device=dev, dtype=torch.bfloat16)
        up(Xs=r["Xs"], Wg=wg, Wu=wu, Hs=hs_, **sc)
        ys_ = torch.empty((M, HID), device=dev, dtype=torch.bfloat16)
        down(Hs=hs_, Wd=wd, Ys=ys_, **sc)
        comb(Ys=ys_, pos=r["pos"], topk_w=r["topk_w"], topk_ids=r["topk_ids"], row_token=r["row_token"],
             row_expert=r["row_expert"], Out=out_)

    def torch_layer_routed():
        vals, ids = torch.topk(logits, K, dim=1)
        w = torch.softmax(vals, dim=1)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        ends = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
        tok = order // K
        gu = torch._grouped_mm(x.index_select(0, tok), wgu, offs=ends)
        y = torch._grouped_mm(F.silu(gu[:, :FF]) * gu[:, FF:], wd, offs=ends)
        out = torch.zeros((T, HID), device=dev, dtype=torch.float32)
        out.index_add_(0, tok, y.float() * w.reshape(-1)[order][:, None])
        return out.to(torch.bfloat16)

    # ---- correctness (float64 per expert on the GPU) ----
    hs = torch.full((M, FF), float("nan"), device=dev, dtype=torch.bfloat16)
    argus_up(xs, hs)
    out = torch.full((T, HID), float("nan"), device=dev, dtype=torch.bfloat16)
    argus_layer(out)
    torch.cuda.synchronize()
    h_ref = torch.empty((M, FF), device=dev, dtype=torch.float64)
    y_ref = torch.empty((M, HID), device=dev, dtype=torch.float64)
    for e in range(E):
        a, b = int(offs_np[e]), int(offs_np[e + 1])
        if a == b:
            continue
        xe = xs[a:b].double()
        ge, ue = xe @ wg[e].double(), xe @ wu[e].double()
        h_ref[a:b] = ge / (1 + torch.exp(-ge)) * ue
        # the layer in float64 throughout (H and Y are not rounded: the bf16 interfaces between the
        # kernels are part of what the comparison's tolerance must absorb)
        y_ref[a:b] = h_ref[a:b] @ wd[e].double()
    out_ref = torch.zeros((T, HID), device=dev, dtype=torch.float64)
    out_ref.index_add_(0, row_token, y_ref * w_row.double()[:, None])
    chk_up = compare("Hs", hs.float().cpu().numpy(), h_ref.cpu().numpy(), bf16)
    chk_layer = compare("Out", out.float().cpu().numpy(), out_ref.cpu().numpy(), bf16)
    chk_torch = compare("Out(torch)", torch_layer().float().cpu().numpy(), out_ref.cpu().numpy(), bf16)
    out_r = torch.full((T, HID), float("nan"), device=dev, dtype=torch.bfloat16)
    argus_layer_routed(out_r)
    chk_routed = compare("Out(routed)", out_r.float().cpu().numpy(), out_ref.cpu().numpy(), bf16)
    chk_torch_routed = compare("Out(torch routed)", torch_layer_routed().float().cpu().numpy(),
                               out_ref.cpu().numpy(), bf16)
    del h_ref, y_ref, out_ref
    # ---- the same layer on sampled tokens against examples/moe.arg's `layer moe` reference block, which
    # routes from the logits itself (independent of argus.moe.route); each token sees only its top-k
    # experts' weights (the top-k of those k logits are all of them, in the same order)
    sample = sorted({0, T - 1, *np.random.default_rng(seed).integers(0, T, 6).tolist()})
    sample_ref = np.empty((len(sample), HID))
    for i, t in enumerate(sample):
        sel = torch.topk(logits[t], K).indices
        sample_ref[i] = moe.moe_layer_reference(
            x[t:t + 1].double().cpu().numpy(), wg[sel].double().cpu().numpy(), wu[sel].double().cpu().numpy(),
            wd[sel].double().cpu().numpy(), K, logits=logits[t:t + 1, sel].double().cpu().numpy())[0]
    chk_sample = compare("Out[sample]", out[sample].float().cpu().numpy(), sample_ref, bf16)
    print(f"[{name}] up {chk_up.describe()} | layer {chk_layer.describe()} | layer vs moe.arg's `layer moe` on "
          f"tokens {sample}: {chk_sample.describe()} | torch layer {chk_torch.describe()} | layer with GPU routing "
          f"{chk_routed.describe()} | torch's with its routing {chk_torch_routed.describe()}", flush=True)

    # ---- timing ----
    hs_t = torch.empty((M, FF), device=dev, dtype=torch.bfloat16)
    out_t = torch.empty((T, HID), device=dev, dtype=torch.bfloat16)
    up_launch = up.prepare(Xs=xs, Wg=wg, Wu=wu, Hs=hs_t, **sched)
    fns = {"grouped_mm": [lambda: torch._grouped_mm(xs, wgu, offs=offs_end)],
           "grouped_mm+act": [lambda: (lambda gu: F.silu(gu[:, :FF]) * gu[:, FF:])(
               torch._grouped_mm(xs, wgu, offs=offs_end))]}
    if chk_up.ok:
        fns["argus_up"] = [up_launch]
    times = time_interleaved(fns, iters)
    flops_up = 2.0 * M * HID * 2 * FF
    lfns = {"torch_layer": [torch_layer]}
    if chk_layer.ok:
        lfns["argus_layer"] = [lambda: argus_layer(out_t)]
    ltimes = time_interleaved(lfns, max(5, iters // 2))
    rfns = {"torch_layer_routed": [torch_layer_routed]}
    if chk_routed.ok:
        rfns["argus_layer_routed"] = [lambda: argus_layer_routed(out_t)]
    rtimes = time_interleaved(rfns, max(5, iters // 2))
    flops_layer = flops_up + 2.0 * M * FF * HID

    def tf(fl, t):
        return fl / t.median_ms / 1e9

    row = {"shape": name, "T": T, "E": E, "top_k": K, "hidden": HID, "ffn": FF, "M": M, "BM": bm,
           "tiles": int(len(meta["tile_expert"])), "rows_min": int(counts.min()), "rows_max": int(counts.max()),
           "up_ok": chk_up.ok, "up_rel_error": chk_up.rel_error, "layer_ok": chk_layer.ok and chk_sample.ok,
           "layer_sample_rel_error": chk_sample.rel_error,
           "layer_rel_error": chk_layer.rel_error, "torch_layer_rel_error": chk_torch.rel_error,
           "grouped_mm_tflops": tf(flops_up, times["grouped_mm"]),
           "grouped_mm_act_tflops": tf(flops_up, times["grouped_mm+act"]),
           "torch_layer_ms": ltimes["torch_layer"].median_ms,
           "routed_ok": chk_routed.ok, "routed_rel_error": chk_routed.rel_error,
           "torch_routed_rel_error": chk_torch_routed.rel_error,
           "torch_layer_routed_ms": rtimes["torch_layer_routed"].median_ms,
           "torch_layer_tflops": tf(flops_layer, ltimes["torch_layer"])}
    if "argus_up" in times:
        row.update(argus_up_tflops=tf(flops_up, times["argus_up"]),
                   up_ratio=times["grouped_mm"].median_ms / times["argus_up"].median_ms,
                   up_ratio_act=times["grouped_mm+act"].median_ms / times["argus_up"].median_ms)
    if "argus_layer" in ltimes:
        row.update(argus_layer_ms=ltimes["argus_layer"].median_ms,
                   argus_layer_tflops=tf(flops_layer, ltimes["argus_layer"]),
                   layer_ratio=ltimes["torch_layer"].median_ms / ltimes["argus_layer"].median_ms)
    if "argus_layer_routed" in rtimes:
        row.update(argus_layer_routed_ms=rtimes["argus_layer_routed"].median_ms,
                   layer_routed_ratio=rtimes["torch_layer_routed"].median_ms / rtimes["argus_layer_routed"].median_ms)
    print(json.dumps(row), flush=True)
    return row


def markdown(res: dict, iters: int) -> str:
    env = res["env"]
    lines = [
        "# MoE: Argus vs torch._grouped_mm",
        "",
        f"Measured {env.get('date')} on {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}; "
        "T = 4096 tokens, random router logits, bf16 weights and activations, fp32 accumulation.",
        "",
        "Method (benchmarks/bench_moe.py): routing on the host (argus.moe), rows sorted by expert; outputs "
        "poisoned with NaN and compared with float64 results computed per expert (interpreter criterion), and "
        "the layer's output on 8 sampled tokens with the `layer moe` reference block of examples/moe.arg (which "
        "routes from the logits itself); "
        f"then timed interleaved in one process (CUDA events, median of {iters}). Up-projection FLOPs "
        "2·M·hidden·2·ffn (gate and up); Argus fuses SiLU(gate)·up and writes [M, ffn], grouped_mm writes "
        "[M, 2·ffn] with no activation (the bar's baseline), grouped_mm+act adds torch's silu·mul. Layer: "
        "gather, up, down, weighted combine, from X to the output, routing metadata shared and untimed. "
        "Layer with routing: from X and the router logits, routing timed, Argus's routing kernels "
        "(examples/moe_route.arg: top-k, sort by expert, tile schedule padded with empty tiles, row table, "
        "gather; nothing read back to the host) against torch's topk, softmax, stable argsort, bincount, "
        "cumsum and index_select before its grouped_mm layer.",
        "",
        "| shape (E, top-k, hidden, ffn) | rows M | tiles | Argus up TFLOP/s | grouped_mm TFLOP/s | **ratio** | "
        "ratio vs grouped_mm+act | Argus layer ms | torch layer ms | layer ratio | Argus layer with routing ms | "
        "torch layer with routing ms | **layer with routing ratio** | correct (up / layer / routed) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in res["rows"]:
        shape = f"{r['shape']} ({r['E']}, {r['top_k']}, {r['hidden']}, {r['ffn']})"
        lines.append(
            f"| {shape} | {r['M']} | {r['tiles']} | {r.get('argus_up_tflops', float('nan')):.1f} | "
            f"{r['grouped_mm_tflops']:.1f} | **{r.get('up_ratio', float('nan')):.3f}** | "
            f"{r.get('up_ratio_act', float('nan')):.3f} | {r.get('argus_layer_ms', float('nan')):.3f} | "
            f"{r['torch_layer_ms']:.3f} | {r.get('layer_ratio', float('nan')):.3f} | "
            f"{r.get('argus_layer_routed_ms', float('nan')):.3f} | {r['torch_layer_routed_ms']:.3f} | "
            f"**{r.get('layer_routed_ratio', float('nan')):.3f}** | "
            f"{'yes' if r['up_ok'] else 'NO'} / {'yes' if r['layer_ok'] else 'NO'} / "
            f"{'yes' if r['routed_ok'] else 'NO'} |")
    lines.append("")
    lines.append("Rows per expert (min–max): " + "; ".join(f"{r['shape']} {r['rows_min']}–{r['rows_max']}"
                                                           for r in res["rows"]) + ". Kernel resources: "
                 + "; ".join(res.get("resources", [])) + ".")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    output_args(ap, "moe", iters=20, child_check=False)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-D", action="append", default=[], metavar="KERNEL.PARAM=VALUE",
                    help="kernel parameter, e.g. -D moe_up.BN=128")
    args = ap.parse_args()
    from argus.runtime.bench import gpu_description

    params: dict[str, dict] = {}
    for d in args.D:
        key, val = d.split("=", 1)
        kname, pname = key.split(".", 1)
        params.setdefault(kname, {})[pname] = int(val) if val.lstrip("-").isdigit() else val
    t0 = time.time()
    kernels = load_kernels(params)
    resources = [r.summary() for gk in kernels.values() for r in gk.built.resources.values()]
    for r in resources:
        print(r, flush=True)
    print(f"built in {time.time() - t0:.1f}s", flush=True)
    bm = int(kernels["moe_up"].ir.param_dict["BM"])  # the tile schedule is cut in moe_up's BM rows
    if kernels["moe_down"].ir.param_dict["BM"] != bm:
        raise SystemExit("moe_up and moe_down share the tile schedule: give them the same BM")
    res = {"env": gpu_description(), "rows": [], "resources": resources}
    for name in [s for s in args.shapes.split(",") if s]:
        res["rows"].append(run_shape(name, kernels, bm, args.iters, args.seed))
        import torch

        torch.cuda.empty_cache()
    Path(args.json).write_text(json.dumps(res, indent=1))
    md = markdown(res, args.iters)
    write_markdown(args.md, "moe", md)
    return 0 if all(r["up_ok"] and r["layer_ok"] and r["routed_ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
