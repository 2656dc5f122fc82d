#!/usr/bin/env python3
"""Split-K for long K and few C tiles: which KCHUNK / STAGES / reduce tile the route of gemm_ws.arg should pick.

    python3 benchmarks/probes/gemm_splitk_sweep.py [--shapes 256x256x262144,...] [--iters 30] [--out DIR]

Per shape: cuBLAS (torch.matmul), gemm_ws.arg as `argus.load(...)(A, B, C)` runs it, and the layer
gemm_ws_splitk of examples/gemm_ws.arg at each KCHUNK that gives between SMS / 3 and 3 * SMS blocks, with
tiles 128x128 (one or two MMA warpgroups) and 128x256 (two), and two reduce tiles. Every variant is checked against the float64 product first (NaN-poisoned
output); then all are timed interleaved on rotated inputs (argus.runtime.bench.time_interleaved). Ratio =
cuBLAS time / variant time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = [(256, 256, 262144), (256, 256, 524288), (512, 512, 131072), (1024, 1024, 65536), (128, 128, 1048576),
          (2048, 2048, 32768), (1024, 1024, 16384), (512, 512, 16384), (256, 256, 8192), (512, 2048, 65536)]
SMS = 132


def main() -> int:
    import torch

    import argus
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.bench import L2_ROTATE_BYTES, gpu_description, time_interleaved

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    ex = ROOT / "examples" / "gemm_ws.arg"
    auto = argus.load(ex)
    rows = []
    for M, N, K in shapes:
        variants = {"ws-auto": auto}
        for bn, cons in ((128, 1), (128, 2), (256, 2)):
            tiles = -(-M // 128) * -(-N // bn)
            for c in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536):
                if not (SMS // 3 <= tiles * -(-K // c) <= 3 * SMS and c < K):
                    continue
                tag = f"b{bn}c{cons}-k{c}"
                variants[tag] = argus.load(ex, "gemm_ws_splitk", KCHUNK=c, BN=bn, CONSUMERS=cons)
                if (bn, cons) == (128, 2):
                    variants[tag + "-r8x128"] = argus.load(ex, "gemm_ws_splitk", KCHUNK=c, BN=bn, CONSUMERS=cons,
                                                           RBM=8, RBN=128)
        g = torch.Generator(device="cuda")
        g.manual_seed(M + N + K)
        A = torch.randn((M, K), device="cuda", generator=g).to(torch.bfloat16)
        B = torch.randn((K, N), device="cuda", generator=g).to(torch.bfloat16)
        ref = (A.double() @ B.double()).cpu().numpy()
        ok = {}
        t0 = time.time()
        for name, k in variants.items():
            C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            k(A, B, C)
            torch.cuda.synchronize()
            chk = compare("C", C.float().cpu().numpy(), ref, DTYPES["bf16"])
            ok[name] = chk.ok
            if not chk.ok:
                print(f"{M}x{N}x{K} {name}: WRONG {chk.describe()}", flush=True)
        print(f"{M}x{N}x{K}: built and checked {len(variants)} variants in {time.time() - t0:.1f}s", flush=True)
        nsets = max(2, min(8, -(-L2_ROTATE_BYTES // ((M * K + K * N + M * N) * 2))))
        sets = [(torch.randn((M, K), device="cuda").to(torch.bfloat16), torch.randn((K, N), device="cuda")
                 .to(torch.bfloat16), torch.empty((M, N), device="cuda", dtype=torch.bfloat16)) for _ in range(nsets)]
        fns = {"cublas": [(lambda x=x, y=y, z=z: torch.matmul(x, y, out=z)) for x, y, z in sets]}
        for name, k in variants.items():
            if ok[name]:
                fns[name] = [k.prepare(x, y, z) for x, y, z in sets]
        times = time_interleaved(fns, a.iters)
        tc = times["cublas"].median_ms
        fl = 2.0 * M * N * K
        line = f"{M}x{N}x{K} cuBLAS {fl / tc / 1e9:.0f} TF/s:"
        for name in variants:
            if name in times:
                r = tc / times[name].median_ms
                rows.append({"M": M, "N": N, "K": K, "variant": name, "ok": ok[name], "ms": times[name].median_ms,
                             "cublas_ms": tc, "ratio": r})
                line += f" {name} {r:.3f}"
            else:
                rows.append({"M": M, "N": N, "K": K, "variant": name, "ok": False})
        print(line, flush=True)
    env = gpu_description()
    best = {}
    for r in rows:
        key = (r["M"], r["N"], r["K"])
        if r.get("ratio") and r["variant"] != "ws-auto" and r["ratio"] > best.get(key, {}).get("ratio", 0):
            best[key] = r
    md = [f"# Split-K sweep ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {env.get('gpu')}, driver "
          f"{env.get('driver')})", "", "| M x N x K | ws-auto / cuBLAS | best split-K | its ratio |", "|---|---:|---|---:|"]
    for (M, N, K), r in best.items():
        wa = next((x["ratio"] for x in rows if (x["M"], x["N"], x["K"]) == (M, N, K) and x["variant"] == "ws-auto"
                   and x.get("ratio")), float("nan"))
        md.append(f"| {M}x{N}x{K} | {wa:.3f} | {r['variant']} | **{r['ratio']:.3f}** |")
    text = "\n".join(md) + "\n"
    print(text)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gemm_splitk_sweep.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
        (out / "gemm_splitk_sweep.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
