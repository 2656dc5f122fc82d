#!/usr/bin/env python3
"""Few-row GEMMs (decode): the persistent examples against swapped-operand kernels, vs cuBLAS.

    python3 benchmarks/probes/gemm_decode_variants.py --json $OUT/d.json --md $OUT/d.md

Per shape (M x N x K, M small) and layout (NN: B stored [K, N], compared with torch.matmul(A, B); NT: W
stored [N, K], compared with F.linear(X, W)): gemm_ws / linear of gemm_ws.arg as `argus.load(...)` runs them
(their `specialize` picks), and their decode kernels gemm_ws_decode / linear_decode (Y^T = W^T X^T: the
weight tile on the wgmma's M side, BT token rows on its N side) at several BT / BK / STAGES. Every variant
is checked against the float64 product (fresh random inputs, NaN-poisoned output) before it is timed; the
correct ones and the torch call are timed interleaved in one process (median of --iters, inputs rotated
past the L2). Ratio = torch time / Argus time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ops as B  # noqa: E402
from ops_variants import checked  # noqa: E402

SMEM = 220 * 1024


def swapped_variants(m: int) -> list[dict]:
    out = []
    for bt in (8, 16, 32, 64, 128):
        if bt < min(m, 16) or bt < m // 2 or bt > max(16, 2 * m):
            continue
        for bk in (64, 128, 256):
            stage = (64 * bk + bt * bk) * 2
            top = min(10, SMEM // stage)
            for st in sorted({top, max(2, top // 2)}):
                out.append({"BT": bt, "BK": bk, "STAGES": st})
    return out


def _kernel(path: Path, name: str, params: dict, dims: dict | None = None):
    import argus
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    k = argus.load(path, name, **params)
    if dims is not None:
        k = k.specialized(dims)
    return GpuKernel(build(k.lower(), arch=detect_arch(0)), 0), dict(k.params)


def run_shape(m: int, n: int, k: int, layout: str, iters: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    nt = layout == "NT"

    def make():
        w = B.randn(n, k, scale=0.05) if nt else B.randn(k, n, scale=0.05)
        return {"X": B.randn(m, k, scale=0.05), "W": w, "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    def ref(s):
        w = s["W"].double()
        return s["X"].double() @ (w.T if nt else w)

    def torch_fn(s):
        return F.linear(s["X"], s["W"]) if nt else torch.matmul(s["X"], s["W"])

    dims = {"M": m, "N": n, "K": k}
    variants = []
    base = ("gemm_ws.arg", "linear") if nt else ("gemm_ws.arg", "gemm_ws")
    kb, pb = _kernel(B.EX / base[0], base[1], {}, dims)
    names = ("X", "W", "Y") if nt else ("A", "B", "C")
    variants.append((f"{base[1]} auto ({' '.join(f'{p}={pb[p]}' for p in ('BM', 'BN', 'BK', 'STAGES') if p in pb)})",
                     lambda s, kb=kb: kb.prepare(**dict(zip(names, (s["X"], s["W"], s["Y"]))))))
    for p in swapped_variants(m):
        try:
            kk, _ = _kernel(B.EX / base[0], "linear_decode" if nt else "gemm_ws_decode", p)
        except Exception as e:  # a build failure is a row
            print(f"[{layout}] {m}x{n}x{k} {p}: build failed: {str(e).splitlines()[0]}", flush=True)
            continue
        variants.append(("swapped " + " ".join(f"{a}={b}" for a, b in p.items()),
                         lambda s, kk=kk: kk.prepare(**dict(zip(names, (s["X"], s["W"], s["Y"]))))))
    sets = B.rotate(make, 2.0 * (m * k + n * k))
    fns = {"torch": [lambda s=s: torch_fn(s) for s in sets]}
    rows = checked(variants, make, ref, sets, fns, {"layout": layout, "shape": f"{m}x{n}x{k}"})
    from argus.runtime.bench import time_interleaved

    times = {a: t.median_ms for a, t in time_interleaved(fns, iters).items()}
    flops = 2.0 * m * n * k
    for r in rows:
        if r["ok"]:
            t = times[r["variant"]]
            r["ms"], r["tflops"], r["ratio"] = t, flops / t / 1e9, times["torch"] / t
    rows.append({"layout": layout, "shape": f"{m}x{n}x{k}", "variant": "torch", "ok": True, "ms": times["torch"],
                 "tflops": flops / times["torch"] / 1e9, "ratio": 1.0})
    for r in rows:
        if "ms" in r:
            print(f"[{layout}] {r['shape']} {r['variant']:<44} {r['tflops']:7.1f} TFLOP/s {r['ratio']:6.3f}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="16x8192x8192,64x8192x8192,128x8192x8192,1x8192x8192,16x14336x4096")
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default="gemm_decode_variants.json")
    ap.add_argument("--md", default="gemm_decode_variants.md")
    args = ap.parse_args()
    import torch

    rows: list[dict] = []
    t0 = time.time()
    for s in args.shapes.split(","):
        m, n, k = (int(x) for x in s.split("x"))
        for lo in args.layouts.split(","):
            rows += run_shape(m, n, k, lo, args.iters)
            print(f"[{time.time() - t0:.0f}s]", flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    Path(args.json).write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    lines = [f"{env['gpu']}, torch {env['torch']}, {env['date']}", "",
             "| layout | M x N x K | variant | TFLOP/s | vs torch |", "|---|---|---|---:|---:|"]
    for r in rows:
        if "ms" in r:
            lines.append(f"| {r['layout']} | {r['shape']} | {r['variant']} | {r['tflops']:.1f} | {r['ratio']:.3f} |")
        else:
            lines.append(f"| {r['layout']} | {r['shape']} | {r['variant']} | - | wrong: {r['check'][:60]} |")
    Path(args.md).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
