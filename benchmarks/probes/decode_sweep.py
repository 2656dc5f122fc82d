#!/usr/bin/env python3
"""Split-KV decode (examples/decode_attention.arg) against every torch SDPA backend, per shape: the number
of splits (blocks in the grid), the ring depth (STAGES) and the key block (BKV) of decode_split, each variant
checked against float64 first, then all timed interleaved in one process (median of --iters).

    python3 benchmarks/probes/decode_sweep.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ops  # noqa: E402

SHAPES = [(8, 32, 8, 8192), (1, 64, 8, 32768), (32, 32, 8, 2048), (1, 32, 8, 131072), (4, 32, 8, 65536)]
VARIANTS = ([(264, {"split_kernel": "decode_split", "STAGES": 2, "BKV": 64})]  # the bench's before 2026-12-06
            + [(blocks, {"split_kernel": "decode_split_ws", "STAGES": st, "BKV": bkv})
               for bkv, st in ((64, 4), (64, 6), (128, 2), (128, 3)) for blocks in (0, 132, 264)]
            # two blocks per multiprocessor (launch blocks_per_sm=2: the roles split half the registers, 24 + 232;
            # the ring must fit half the shared memory)
            + [(blocks, {"split_kernel": "decode_split_ws", "STAGES": st, "BKV": 64, "OCCUPANCY": 2})
               for st in (2, 3) for blocks in (264, 528)])


def main() -> int:
    import torch
    from torch.nn.attention import SDPBackend

    from argus.runtime.bench import gpu_description, time_interleaved

    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default="-")
    ap.add_argument("--shapes", default="")
    ap.add_argument("--only", default="", help="comma-separated substrings: time only the variants whose label "
                    "has one (e.g. 'b0 s3 kv128,occ2')")
    args = ap.parse_args()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    out = {"env": gpu_description(), "rows": []}
    print("ENV", json.dumps(out["env"]), flush=True)
    for shape in shapes:
        t0 = time.time()
        fns, meta = {}, {}
        for name, backend in (("sdpa", None), ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION),
                              ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                case = bench_ops.decode_case(*shape, sdpa_backend=backend)
                case.torch[0]()
                torch.cuda.synchronize()
                fns[name] = case.torch
            except Exception as e:  # a backend that does not take this problem
                print(f"  {name}: unavailable ({type(e).__name__}: {str(e)[:80]})", flush=True)
        nbytes = case.nbytes
        for blocks, params in VARIANTS:
            label = (f"argus{'-ws' if params['split_kernel'] == 'decode_split_ws' else ''} b{blocks or 'fit'} "
                     f"s{params['STAGES']} "
                     f"kv{params['BKV']}" + (f" occ{params['OCCUPANCY']}" if "OCCUPANCY" in params else ""))
            if args.only and not any(x in label for x in args.only.split(",")):
                continue
            try:
                case = bench_ops.decode_case(*shape, blocks=blocks, **params)
                checks = case.check()
            except Exception as e:
                print(f"  {label}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            if not all(c.ok for c in checks):
                print(f"  {label}: WRONG {[c.describe() for c in checks]}", flush=True)
                continue
            fns[label] = case.argus
            meta[label] = case.params
        times = time_interleaved(fns, args.iters)
        best_torch = min((t.median_ms, n) for n, t in times.items() if n.startswith("sdpa"))
        for n, t in sorted(times.items(), key=lambda kv: kv[1].median_ms):
            row = {"shape": "B{} H{} HKV{} S{}".format(*shape), "variant": n, "ms": t.median_ms,
                   "gbs": nbytes / t.median_ms / 1e6, "vs_best_torch": best_torch[0] / t.median_ms,
                   "best_torch": best_torch[1], "params": meta.get(n, {})}
            out["rows"].append(row)
            print(f"  {row['shape']} {n:28s} {t.median_ms:8.4f} ms {row['gbs']:6.0f} GB/s "
                  f"{row['vs_best_torch']:.3f} of {best_torch[1]} {meta.get(n, '')}", flush=True)
        print(f"shape {shape} done in {time.time() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    text = json.dumps(out, indent=1)
    if args.json == "-":
        print(text)
    else:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
