#!/usr/bin/env python3
"""Parameter variants of the memory-bound example kernels, timed side by side at bench_ops.py's shapes.

    python3 benchmarks/probes/ops_variants.py --ops layernorm,rmsnorm,softmax --json $OUT/v.json --md $OUT/v.md

Per op and shape: every variant (block rows BM, the row tile BN, THREADS; RMSNorm's two-pass
`rmsnorm_looped` at several BC and THREADS; for softmax rows longer than a block also the two-kernel
path softmax_stats + softmax_normalize at several tiles) is checked against
float64 like bench_ops.py (a wrong variant is reported and not timed), then all correct variants and torch
eager are timed interleaved in one process (median of --iters, input sets rotated past the L2). GB/s counts
the bytes the op must move; "of copy" divides by a 1 GiB device-to-device copy measured in the same run.
The best variant per shape is what bench_ops.py's parameter choice (_row_params) should pick.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ops as B  # noqa: E402

SHAPES = {op: B.OPS[op][2] for op in ("layernorm", "rmsnorm", "softmax")}
LOOPED = True  # --no-looped: the whole-row variants only
TMA = False  # --tma: bench_ops.py's current choice beside the TMA-ring kernels (*_tma) only


def tma_variants(n: int) -> list[dict]:
    """The TMA-ring kernels (rmsnorm_tma, layernorm_tma, softmax_tma): BR rows a stage, CONSUMERS warpgroups,
    STAGES so that the ring holds about 192 KB of loads in flight per SM; 16 or 32 elements of the stage
    per consumer thread."""
    bn = -(-n // 8) * 8
    out = []
    for br in (1, 2, 4, 8):
        for cons in (1, 2):
            per = br * bn // (128 * cons)
            stage = br * bn * 2
            if per not in (16, 32) or stage > 64 * 1024:
                continue
            st = min(192 * 1024 // stage, 32)
            if st >= 2:
                out.append({"BR": br, "BN": bn, "CONSUMERS": cons, "STAGES": st})
    return out


def row_variants(n: int, long_ok: bool) -> list[dict]:
    """Whole-row configs: 1, 2 and 4 16-byte vectors per thread (THREADS in 32..1024), at short rows
    several rows per block (also a warp per row), each also with full occupancy promised to ptxas."""
    bn = 1 << (n - 1).bit_length()
    out = []
    for per in (8, 16, 32):
        t = bn // per
        if 32 <= t <= 1024:
            out.append({"BM": 1, "BN": bn, "THREADS": t})
    if bn <= 2048:
        out += [{"BM": 2, "BN": bn, "THREADS": max(32, bn // 8)}, {"BM": 4, "BN": bn, "THREADS": max(32, bn // 4)}]
    if bn <= 2048:  # a warp per row (the layout of a tile reduced along its rows): no shared memory, no barrier
        out += [{"BM": w, "BN": bn, "THREADS": 32 * w} for w in (2, 4, 8, 16)]
    # the same configs with full occupancy promised to ptxas (launch blocks_per_sm=OCC caps the registers)
    # (a warp per row at full occupancy spills: 8-24% of copy on the H200, 2026-12-04 10:20 UTC)
    out += [{**p, "OCC": 2048 // p["THREADS"]} for p in list(out)
            if 2 <= 2048 // p["THREADS"] <= 32 and (p["BM"] == 1 or p["THREADS"] > 32 * p["BM"])]
    if not long_ok:
        out = [p for p in out if p["BN"] // p["THREADS"] <= 32]
    return out


def looped_variants(n: int) -> list[dict]:
    """The two-pass kernels (`rmsnorm_looped`, `layernorm_looped`): BC columns per step, 4-16 elements per
    thread, at the code generator's occupancy (OCC=0) and with full and 3/4 occupancy promised to ptxas
    (launch blocks_per_sm=OCC caps registers). (layernorm_looped at OCC=0 measured 41-52% of copy on
    2026-12-03 08:29 with 63 registers: results/ops_layernorm_shifted_2026-12-03.md.)"""
    bn = 1 << (n - 1).bit_length()
    out = []
    for bc in (1024, 2048, 4096):
        for t in (128, 256, 512):
            if bc < bn and 4 <= bc // t <= 16:
                # OCC: blocks per SM promised to ptxas (0: the code generator's two); full and 3/4 occupancy
                out += [{"BN": bn, "BC": bc, "THREADS": t, "OCC": occ} for occ in sorted({0, 2048 // t, 1536 // t})]
    return out


def _label(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def norm_variants(which: str, m: int, n: int):
    import torch
    import torch.nn.functional as F

    eps = 1e-6 if which == "rmsnorm" else 1e-5

    def make():
        s = {"X": B.randn(m, n), "W": B.randn(n), "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}
        if which == "layernorm":
            s["B"] = B.randn(n)
        return s

    def ref(s):
        x = s["X"].double()
        if which == "rmsnorm":
            return x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + eps) * s["W"].double()
        mu = x.mean(dim=1, keepdim=True)
        return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(dim=1, keepdim=True) + eps) * s["W"].double() \
            + s["B"].double()

    def torch_fn(s):
        if which == "rmsnorm":
            return F.rms_norm(s["X"], (n,), s["W"], eps)
        return F.layer_norm(s["X"], (n,), s["W"], s["B"], eps)

    variants = []
    if TMA:
        name, p = B.kernel_choice(which, n)
        k = B.kernel(f"{which}.arg", name, **p)
        variants.append((f"bench {name} " + _label(p), lambda s, k=k: k.prepare(**s)))
        for p in tma_variants(n):
            k = B.kernel(f"{which}.arg", f"{which}_tma", **p)
            variants.append(("tma " + _label(p), lambda s, k=k: k.prepare(**s)))
        return make, ref, torch_fn, variants
    for p in row_variants(n, True):
        k = B.kernel(f"{which}.arg", which, **p)
        variants.append((_label(p), lambda s, k=k: k.prepare(**s)))
    for p in looped_variants(n) if LOOPED else []:
        k = B.kernel(f"{which}.arg", f"{which}_looped", **p)
        variants.append(("looped " + _label(p), lambda s, k=k: k.prepare(**s)))
    return make, ref, torch_fn, variants


def softmax_variants(m: int, n: int):
    import torch

    def make():
        return {"X": B.randn(m, n), "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
                "m": torch.empty(m, device="cuda"), "l": torch.empty(m, device="cuda")}

    def ref(s):
        return torch.softmax(s["X"].double(), dim=1)

    def torch_fn(s):
        return torch.softmax(s["X"], dim=-1)

    variants = []
    if TMA:
        name, p = B.kernel_choice("softmax", n)
        k = B.kernel("softmax.arg", name, **p)
        variants.append((f"bench {name} " + _label(p), lambda s, k=k: k.prepare(X=s["X"], Y=s["Y"])))
        for p in tma_variants(n):
            k = B.kernel("softmax.arg", "softmax_tma", **p)
            variants.append(("tma " + _label(p), lambda s, k=k: k.prepare(X=s["X"], Y=s["Y"])))
        return make, ref, torch_fn, variants
    for p in row_variants(n, n <= 32768):
        k = B.kernel("softmax.arg", "softmax", **p)
        variants.append((_label(p), lambda s, k=k: k.prepare(X=s["X"], Y=s["Y"])))
    if n >= 4096:  # one kernel, two passes over column steps (the second from L2)
        for bc, t, occ in ((1024, 128, 16), (2048, 256, 0), (2048, 256, 8), (4096, 512, 4), (2048, 128, 16)):
            k = B.kernel("softmax.arg", "softmax_looped", BC=bc, THREADS=t, OCC=occ)
            variants.append((f"looped BC={bc} THREADS={t} OCC={occ}", lambda s, k=k: k.prepare(X=s["X"], Y=s["Y"])))
    if n > 8192:
        for bn, t in ((1024, 128), (2048, 256), (4096, 256), (4096, 512)):
            st = B.kernel("softmax.arg", "softmax_stats", BN=bn, THREADS=t)
            no = B.kernel("softmax.arg", "softmax_normalize", BN=bn, THREADS=t)

            def run(s, st=st, no=no):
                a = st.prepare(X=s["X"], RowMax=s["m"], RowSum=s["l"])
                b = no.prepare(X=s["X"], RowMax=s["m"], RowSum=s["l"], Y=s["Y"])
                return lambda: (a(), b())
            variants.append((f"stats+normalize BN={bn} THREADS={t}", run))
    return make, ref, torch_fn, variants


def checked(variants: list, make, ref, sets: list, fns: dict, row: dict) -> list[dict]:
    """Each (label, build) variant launched once on fresh inputs with Y poisoned and compared with the
    float64 `ref` (a build or launch failure is a wrong row); the correct ones join `fns` (one launch per
    input set of `sets`) to be timed. Returns one row per variant, `row`'s keys first."""
    import torch

    rows = []
    for label, build in variants:
        try:
            s = make()
            s["Y"].fill_(float("nan"))
            build(s)()
            torch.cuda.synchronize()
            c = B.compare("Y", s["Y"], ref(s))
            ok, why = c.ok, c.describe()
        except Exception as e:  # a build or launch failure is a row
            ok, why = False, f"{type(e).__name__}: {e}"
        rows.append({**row, "variant": label, "ok": ok, "check": why})
        if ok:
            fns[label] = [build(s) for s in sets]
        else:
            print(f"[{' '.join(map(str, row.values()))}] {label}: WRONG/FAILED {why}", flush=True)
    return rows


def run_shape(op: str, shape: tuple, iters: int, copy: float) -> list[dict]:

    m, n = shape
    if op == "softmax":
        make, ref, torch_fn, variants = softmax_variants(m, n)
    else:
        make, ref, torch_fn, variants = norm_variants(op, m, n)
    sets = B.rotate(make, 4 * m * n)
    fns = {"eager": [lambda s=s: torch_fn(s) for s in sets]}
    rows = checked(variants, make, ref, sets, fns, {"op": op, "shape": f"{m}x{n}"})
    times = B_time(fns, iters)
    nbytes = 4.0 * m * n
    for r in rows:
        if r["ok"]:
            t = times[r["variant"]]
            r["ms"], r["gbs"] = t, nbytes / t / 1e6
            r["of_copy"], r["vs_eager"] = r["gbs"] / copy, times["eager"] / t
    rows.append({"op": op, "shape": f"{m}x{n}", "variant": "torch eager", "ok": True, "ms": times["eager"],
                 "gbs": nbytes / times["eager"] / 1e6, "of_copy": nbytes / times["eager"] / 1e6 / copy})
    for r in rows:
        if "gbs" in r:
            print(f"[{op}] {m}x{n} {r['variant']:<34} {r['gbs']:6.0f} GB/s {r['of_copy']:5.0%} of copy", flush=True)
    return rows


def B_time(fns: dict, iters: int) -> dict:
    from argus.runtime.bench import time_interleaved

    return {k: v.median_ms for k, v in time_interleaved(fns, iters).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="layernorm,rmsnorm,softmax")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--min-cols", type=int, default=0, help="only the shapes with at least this many columns")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"), "ops_variants.json"))
    ap.add_argument("--md", default=os.path.join(os.environ.get("OUT", "/tmp"), "ops_variants.md"))
    ap.add_argument("--no-looped", action="store_true", help="leave out the norms' two-pass (looped) variants")
    ap.add_argument("--tma", action="store_true", help="bench_ops.py's current kernel beside the TMA-ring kernels")
    args = ap.parse_args()
    global LOOPED, TMA
    LOOPED = not args.no_looped
    TMA = args.tma
    copy = B.copy_bandwidth(args.iters)
    print(f"copy bandwidth {copy:.0f} GB/s", flush=True)
    rows = []
    for op in [o for o in args.ops.split(",") if o]:
        for shape in [sh for sh in SHAPES[op] if sh[1] >= args.min_cols]:
            t0 = time.time()
            rows += run_shape(op, shape, args.iters, copy)
            print(f"[{op}] {shape}: {time.time() - t0:.0f}s", flush=True)
    Path(args.json).write_text(json.dumps({"copy_gbs": copy, "rows": rows}, indent=1))
    md = [f"copy bandwidth {copy:.0f} GB/s", "", "| op | shape | variant | GB/s | of copy | vs eager |",
          "|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "gbs" in r:
            md.append(f"| {r['op']} | {r['shape']} | {r['variant']} | {r['gbs']:.0f} | {r['of_copy']:.0%} | "
                      f"{r.get('vs_eager', 1.0):.2f} |")
        else:
            md.append(f"| {r['op']} | {r['shape']} | {r['variant']} | WRONG: {r['check'][:80]} | | |")
    Path(args.md).write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
