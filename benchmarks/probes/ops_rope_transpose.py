#!/usr/bin/env python3
"""Variants of examples/rope.arg (rope, rope_heads) and examples/transpose.arg, timed side by side at
bench_ops.py's shapes.

    python3 benchmarks/probes/ops_rope_transpose.py --json $OUT/rt.json --md $OUT/rt.md

Per shape: every variant checked against float64 like bench_ops.py (a wrong one is reported, not timed),
then the correct ones and torch eager timed interleaved in one process (median of --iters, input sets
rotated past the L2). GB/s counts the bytes the op must move; "of copy" divides by a device-to-device copy
measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ops as B  # noqa: E402


def rope_variants(h: int, d: int) -> list[tuple[str, dict]]:
    """Positions per block and threads. (The 2026-12-04 run also tried `rope_heads`, HB heads of the same
    positions per block sharing the tables' tile: 48-67% of copy against 52-73%, not kept.)"""
    return [("rope", {"HD": d, "BS": bs, "THREADS": t}) for bs, t in ((16, 128), (32, 256), (64, 256))]


TMA_ONLY = False  # --tma: the bench's transpose beside transpose_tma (a TMA ring, persistent grid) only


def transpose_variants() -> list[tuple[str, dict]]:
    tma = [("transpose_tma", {"BM": bm, "BN": 64, "STAGES": st, "CONSUMERS": c})
           for bm, st, c in ((64, 8, 1), (64, 16, 1), (64, 16, 2), (128, 8, 2))]
    if TMA_ONLY:
        return [("transpose", {"BM": 64, "BN": 64, "THREADS": 256})] + tma
    return [("transpose", {"BM": bm, "BN": bn, "THREADS": t})
            for bm, bn, t in ((64, 64, 256), (64, 64, 128), (32, 128, 256), (128, 64, 256), (128, 128, 512),
                              (64, 128, 256))] + tma


def rope_shape(b: int, s_: int, h: int, d: int):
    import torch

    d2 = d // 2

    def make():
        theta = torch.arange(s_, device="cuda", dtype=torch.float32)[:, None] * \
            (10000.0 ** (-torch.arange(d2, device="cuda", dtype=torch.float32) / d2))[None, :]
        return {"X": B.randn(b, s_, h, d), "COS": torch.cos(theta), "SIN": torch.sin(theta),
                "Y": torch.empty(b, s_, h, d, device="cuda", dtype=torch.bfloat16)}

    def ref(st):
        x = st["X"].double()
        c, sn = st["COS"].double()[None, :, None, :], st["SIN"].double()[None, :, None, :]
        return torch.cat((x[..., :d2] * c - x[..., d2:] * sn, x[..., d2:] * c + x[..., :d2] * sn), dim=-1)

    def eager(st):
        x1, x2 = st["X"][..., :d2].float(), st["X"][..., d2:].float()
        c, sn = st["COS"][None, :, None, :], st["SIN"][None, :, None, :]
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1).to(torch.bfloat16)

    return (f"B{b} S{s_} H{h} D{d}", make, ref, eager, [("rope.arg", n, p) for n, p in rope_variants(h, d)],
            4.0 * b * s_ * h * d + 8.0 * s_ * d2)


def transpose_shape(m: int, n: int):
    import torch

    def make():
        return {"X": B.randn(m, n), "Y": torch.empty(n, m, device="cuda", dtype=torch.bfloat16)}

    return (f"{m}x{n}", make, lambda st: st["X"].double().t(), lambda st: st["X"].t().contiguous(),
            [("transpose.arg", n_, p) for n_, p in transpose_variants()], 4.0 * m * n)


def run_shape(op: str, spec, iters: int, copy: float) -> list[dict]:
    import torch

    from argus.runtime.bench import time_interleaved

    label, make, ref, eager, variants, nbytes = spec
    sets = B.rotate(make, int(nbytes))
    fns = {"eager": [lambda st=st: eager(st) for st in sets]}
    rows = []
    for file, name, params in variants:
        v = f"{name} " + " ".join(f"{k}={x}" for k, x in params.items())
        try:
            k = B.kernel(file, name, **params)
            st = make()
            st["Y"].fill_(float("nan"))
            k(**st)
            torch.cuda.synchronize()
            c = B.compare("Y", st["Y"], ref(st))
            ok, why = c.ok, c.describe()
        except Exception as e:  # a build or launch failure is a row
            ok, why = False, f"{type(e).__name__}: {e}"
        rows.append({"op": op, "shape": label, "variant": v, "ok": ok, "check": why})
        if ok:
            fns[v] = [k.prepare(**st) for st in sets]
        else:
            print(f"[{op}] {label} {v}: WRONG/FAILED {why}", flush=True)
    times = {k: t.median_ms for k, t in time_interleaved(fns, iters).items()}
    for r in rows:
        if r["ok"]:
            t = times[r["variant"]]
            r.update(ms=t, gbs=nbytes / t / 1e6, of_copy=nbytes / t / 1e6 / copy, vs_eager=times["eager"] / t)
    rows.append({"op": op, "shape": label, "variant": "torch eager", "ok": True, "ms": times["eager"],
                 "gbs": nbytes / times["eager"] / 1e6, "of_copy": nbytes / times["eager"] / 1e6 / copy, "vs_eager": 1.0})
    for r in rows:
        if "gbs" in r:
            print(f"[{op}] {label} {r['variant']:<56} {r['gbs']:6.0f} GB/s {r['of_copy']:5.0%}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="rope,transpose")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"), "rope_transpose.json"))
    ap.add_argument("--md", default=os.path.join(os.environ.get("OUT", "/tmp"), "rope_transpose.md"))
    ap.add_argument("--tma", action="store_true", help="transpose: the bench's kernel beside transpose_tma only")
    args = ap.parse_args()
    global TMA_ONLY
    TMA_ONLY = args.tma
    copy = B.copy_bandwidth(args.iters)
    rows = []
    for op in args.ops.split(","):
        for shape in B.OPS[op][2]:
            rows += run_shape(op, rope_shape(*shape) if op == "rope" else transpose_shape(*shape), args.iters, copy)
    Path(args.json).write_text(json.dumps({"copy_gbs": copy, "rows": rows}, indent=1))
    md = [f"copy bandwidth {copy:.0f} GB/s", "", "| op | shape | variant | GB/s | of copy | vs eager |",
          "|---|---|---|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['op']} | {r['shape']} | {r['variant']} | " + (
            f"{r['gbs']:.0f} | {r['of_copy']:.0%} | {r['vs_eager']:.2f} |" if "gbs" in r else
            f"WRONG: {r['check'][:80]} | | |"))
    Path(args.md).write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
