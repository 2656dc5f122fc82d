#!/usr/bin/env python3
"""`argus tune` on the GPU from naive starts: GEMM, FlashAttention, MoE up-projection, in one command.

    python3 benchmarks/tune/device_tune.py --out "$OUT"              # on the H200: ~9 minutes
    python3 benchmarks/tune/device_tune.py --out /tmp/dry --dry      # CPU: cost model, tiny shapes
    # 48 attention evaluations take ~15 minutes, a device command at most 10: tune, then continue and compare
    python3 benchmarks/tune/device_tune.py --out /tmp/t --families attention,moe --minutes 9.2 --no-compare
    python3 benchmarks/tune/device_tune.py --out /tmp/t --families attention,moe --minutes 9 --resume

For each family the built-in planner tunes a naive start (benchmarks/tune/starts/: GEMM mma.sync
64x64x32 one stage; FlashAttention mma.sync BQ 64 one stage, no warp specialisation; MoE up-projection
cp.async 64x64x32 mma.sync) for at most --budget evaluations and --minutes of wall time. The three runs
go in parallel (CPU work: verifier, interpreter; --parallel 1 runs them one after another), timing
each candidate alone on the GPU (a lock). Each run writes OUT/<family>/ (record.jsonl, report.md,
reward.png, the tuned kernel, tune.log) and adds its steps to OUT/tune-store.json (or --store).

Then, in this one process, every family's start, best tuned kernel (from its run record), best
hand-written example (examples/gemm_ws.arg; examples/flash_attention_ws.arg's persistent kernel, what
`argus.load` runs up to 8k queries; examples/moe.arg moe_up) and
library baseline (cuBLAS via torch.matmul; torch's scaled_dot_product_attention; torch._grouped_mm
over the same routed rows, with and without SiLU*up) run on the same inputs, are checked against the
library's output and timed interleaved (argus.runtime.bench.time_interleaved: CUDA events, a sleep
kernel ahead of each sample, medians). The ratios go to stdout, OUT/summary.md and OUT/summary.json.
With --dry nothing touches a GPU: the runs use the CPU cost model and the comparison reports the
model's estimates (no library figures).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STARTS = Path(__file__).resolve().parent / "starts"
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT))

FAMILIES = {
    "gemm": {"start": "gemm_naive.arg", "kernel": None, "hand": ("gemm_ws.arg", None),
             "shapes": "M=4096,N=4096,K=4096;M=8192,N=8192,K=8192", "dry": "M=256,N=256,K=256"},
    "attention": {"start": "flash_attention_naive.arg", "kernel": None,
                  "hand": ("flash_attention_ws.arg", "flash_attention_ws_persistent"),
                  "shapes": "B=4,H=16,SQ=4096,D=128,HKV=16,SKV=4096", "dry": "B=1,H=2,SQ=256,D=128,HKV=2,SKV=256"},
    "moe": {"start": "moe_up_naive.arg", "kernel": "moe_up", "hand": ("moe.arg", "moe_up"),
            "shapes": "T=4096,E=8,KTOP=2,HID=4096,F=14336", "dry": "T=128,E=4,KTOP=2,HID=256,F=256"},
}
COMPARE_RESERVE_S = 70.0  # wall time kept for the comparison after the runs (about 35 s per family measured)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "device-tune"), help="output folder (default $OUT)")
    ap.add_argument("--budget", type=int, default=48, help="evaluations per family at most (default 48)")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of the whole command (default 9)")
    ap.add_argument("--families", default="gemm,attention,moe", help="comma-separated subset of gemm,attention,moe")
    ap.add_argument("--parallel", type=int, default=3, help="tune runs at once (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=30, help="timed samples per kernel in the comparison")
    ap.add_argument("--store", help="learning store to read and extend (default OUT/tune-store.json)")
    ap.add_argument("--shapes", action="append", default=[], metavar="FAMILY=SHAPES",
                    help="tune and compare a family at other shapes, e.g. 'moe=T=4096,E=8,KTOP=2,HID=4096,F=8192' "
                    "(a related kernel for a second run with --store); the last ';'-separated set is compared")
    ap.add_argument("--dry", action="store_true", help="no GPU: CPU cost model, tiny shapes, estimates only")
    ap.add_argument("--resume", action="store_true",
                    help="continue the runs recorded in --out (a device command is limited to 10 minutes: a run of "
                    "48 attention evaluations takes two)")
    ap.add_argument("--no-compare", action="store_true", help="tune only; leave the comparison to a --resume call")
    ap.add_argument("--verify-timeout", type=float, default=60.0,
                    help="seconds per static-verifier run (default 60: a three-stage FlashAttention candidate "
                    "takes 20-30 s, and at 30 s six of 13 attention candidates of the 2026-12-01 run were unknown)")
    args = ap.parse_args(argv)
    fams = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in fams if f not in FAMILIES]
    if bad or not fams:
        ap.error(f"--families: unknown {', '.join(bad) or '(none)'}; choose from {', '.join(FAMILIES)}")
    if args.budget < 0 or args.minutes <= 0 or args.parallel < 1:
        ap.error("--budget >= 0, --minutes > 0 and --parallel >= 1")
    args.families = fams
    for item in args.shapes:
        fam, _, spec = item.partition("=")
        if fam not in FAMILIES or "=" not in spec:
            ap.error(f"--shapes {item!r}: write FAMILY=NAME=V,... with FAMILY one of {', '.join(FAMILIES)}")
        FAMILIES[fam] = {**FAMILIES[fam], "shapes": spec}  # this process's table: the runs and the comparison
    return args


def tune_command(fam: str, args: argparse.Namespace, out: Path, limit_s: float) -> list[str]:
    spec = FAMILIES[fam]
    cmd = [sys.executable, "-c", "import sys; from argus.cli import main; sys.exit(main(sys.argv[1:]))", "tune",
           str(STARTS / spec["start"]), "--out", str(out / fam), "--budget", str(args.budget),
           "--time-limit", f"{limit_s:.0f}", "--seed", str(args.seed), "--store", str(args.store),
           "--shapes", spec["dry" if args.dry else "shapes"], "--evaluator", "model" if args.dry else "gpu",
           "--verify-timeout", str(args.verify_timeout)]
    if spec["kernel"]:
        cmd += ["--kernel", spec["kernel"]]
    if args.resume and (out / fam / "record.jsonl").exists():
        cmd += ["--resume"]
    if args.dry:
        cmd += ["--verifier", "interp", "--timeout", "300"]
    return cmd


def run_tunes(args: argparse.Namespace, out: Path, t_end: float) -> dict[str, int]:
    """The tune runs, `args.parallel` at a time, each bounded by the time left; their output is prefixed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["ARGUS_GPU_LOCK"] = str(out / "gpu.lock")
    codes: dict[str, int] = {}
    queue = list(args.families)
    running: list[tuple[str, subprocess.Popen, threading.Thread, float]] = []
    waves = math.ceil(len(queue) / args.parallel)

    def pump(fam: str, p: subprocess.Popen) -> None:
        with open(out / fam / "tune.log", "a") as log:
            for line in p.stdout:  # type: ignore[union-attr]
                log.write(line)
                log.flush()
                print(f"[{fam}] {line}", end="", flush=True)

    while queue or running:
        while queue and len(running) < args.parallel:
            fam = queue.pop(0)
            left = t_end - time.monotonic() - (0 if args.no_compare else COMPARE_RESERVE_S)
            share = left / max(1, waves)
            if share < 60:
                print(f"[{fam}] skipped: no time left", flush=True)
                codes[fam] = -1
                continue
            (out / fam).mkdir(parents=True, exist_ok=True)
            # the run starts no step that would end past share - 40 s; anything still running at share is stopped
            cmd = tune_command(fam, args, out, share - 40)
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
            th = threading.Thread(target=pump, args=(fam, p), daemon=True)
            th.start()
            running.append((fam, p, th, time.monotonic() + share))
        time.sleep(1.0)
        for item in list(running):
            fam, p, th, hard = item
            if p.poll() is None and time.monotonic() > hard:  # past its own limit: stop it, keep its record
                print(f"[{fam}] past its time limit: stopping it (the record keeps every finished step)", flush=True)
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            if p.poll() is not None:
                th.join(5)
                codes[fam] = p.returncode
                running.remove(item)
        if queue and len(running) < args.parallel:
            waves = max(1, math.ceil(len(queue) / args.parallel))
    return codes


# ---- the comparison ----
def best_of(fam: str, out: Path) -> dict | None:
    """The run's best step (argus.agent.loop.pick_best over the record) and its program."""
    from argus.agent.loop import pick_best
    from argus.agent.program import Candidate
    from argus.agent.record import RecordError, RunRecord

    try:
        rec = RunRecord.load(out / fam / "record.jsonl")
    except RecordError as e:
        print(f"[{fam}] no run record: {e}", flush=True)
        return None
    if not rec.steps:
        return None
    best = pick_best(rec.steps)
    cand = Candidate.from_json(best["candidate"])
    start = Candidate.from_json(rec.header["start"])
    if not (out / fam / "report.md").exists():  # a run stopped at its time limit: write its outputs now
        from argus.agent import kb
        from argus.agent.report import write_outputs

        write_outputs(out / fam, rec.header, rec.steps, best, start, kb.load())
    return {"header": rec.header, "steps": rec.steps, "best": best, "tuned": cand.materialise(),
            "start": start.materialise(), "kernel": rec.header.get("kernel"),
            "evaluations": len(rec.steps) - 1, "proved": (best.get("verify") or {}).get("status") == "verified"}


def kernels_of(fam: str, run: dict):
    """(name, lowered kernel) for the start, the tuned kernel and the hand-written example."""
    from argus.ir.build import build_file, build_source

    hand_file, hand_kernel = FAMILIES[fam]["hand"]
    return [("start", build_source(run["start"], {}, run["kernel"], path="<start>")),
            ("tuned", build_source(run["tuned"], {}, run["kernel"], path="<tuned>")),
            ("hand", build_file(EXAMPLES / hand_file, {}, hand_kernel))]


def shape_of(fam: str, dry: bool) -> dict[str, int]:
    text = FAMILIES[fam]["dry" if dry else "shapes"].split(";")[-1]
    return {k: int(v) for k, v in (x.split("=") for x in text.split(","))}


def compare_dry(fam: str, run: dict) -> dict:
    """CPU: the cost model's estimates for the three kernels (no library figure)."""
    from argus.agent.costmodel import model
    from argus.agent.problem import problem_for
    from argus.agent.workload import useful_flops

    shape = shape_of(fam, True)
    row: dict = {"shape": shape, "estimate": True}
    for name, k in kernels_of(fam, run):
        dims = problem_for(k).dims(k, shape)
        fl = useful_flops(k, dims)
        row[f"{name}_ms"] = model(k, dims, fl).seconds * 1e3
        row[f"{name}_tflops"] = fl / (row[f"{name}_ms"] * 1e9) if fl else 0.0
    return row


def compare_gpu(fam: str, run: dict, iters: int, seed: int) -> dict:
    """One process, same inputs: start, tuned, hand-written and library, checked then timed interleaved."""
    import numpy as np
    import torch

    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.interp.run import compare
    from argus.runtime.bench import time_interleaved
    from argus.runtime.launch import GpuKernel

    arch = detect_arch(0)
    shape = shape_of(fam, False)
    kernels = [(n, GpuKernel(build(k, arch=arch), 0), k) for n, k in kernels_of(fam, run)]
    torch.manual_seed(seed)
    dev = "cuda"
    bf16 = torch.bfloat16
    fns: dict[str, list] = {}
    outs: dict[str, object] = {}
    flops = 0.0
    if fam == "gemm":
        m, n, kk = shape["M"], shape["N"], shape["K"]
        sets = [(torch.randn(m, kk, device=dev).to(bf16), torch.randn(kk, n, device=dev).to(bf16)) for _ in range(2)]
        for name, gk, _ in kernels:
            cs = [torch.empty(m, n, device=dev, dtype=bf16) for _ in sets]
            fns[name] = [gk.prepare(A=a, B=b, C=c) for (a, b), c in zip(sets, cs)]
            outs[name] = cs[0]
        lib = [torch.empty(m, n, device=dev, dtype=bf16) for _ in sets]
        fns["library"] = [lambda a=a, b=b, c=c: torch.matmul(a, b, out=c) for (a, b), c in zip(sets, lib)]
        outs["library"] = lib[0]
        flops, lib_name = 2.0 * m * n * kk, "cuBLAS (torch.matmul)"
    elif fam == "attention":
        import torch.nn.functional as F

        b, h, s, d = shape["B"], shape["H"], shape["SQ"], shape["D"]
        q, k_, v = (torch.randn(b, h, s, d, device=dev).to(bf16) for _ in range(3))
        for name, gk, _ in kernels:
            o = torch.empty(b, h, s, d, device=dev, dtype=bf16)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            fns[name] = [gk.prepare(Q=q, K=k_, V=v, O=o, LSE=lse)]
            outs[name] = o
        lib_out = {}
        fns["library"] = [lambda: lib_out.__setitem__("o", F.scaled_dot_product_attention(q, k_, v))]
        flops, lib_name = 4.0 * b * h * s * shape["SKV"] * d, "torch scaled_dot_product_attention"
    else:
        from argus import moe

        t_, e_, kt, hid, ff = shape["T"], shape["E"], shape["KTOP"], shape["HID"], shape["F"]
        rng = np.random.default_rng(seed)
        ids, w = moe.route(rng.standard_normal((t_, e_)), kt)
        x = torch.randn(t_, hid, device=dev).to(bf16)
        wg = (torch.randn(e_, hid, ff, device=dev) / hid ** 0.5).to(bf16)
        wu = (torch.randn(e_, hid, ff, device=dev) / hid ** 0.5).to(bf16)
        base = moe.metadata(ids, w, e_, 128)
        row_token = torch.from_numpy(base["row_token"].astype(np.int64)).to(dev)
        xs = x.index_select(0, row_token).contiguous()
        m = xs.shape[0]
        for name, gk, k in kernels:
            meta = moe.metadata(ids, w, e_, int(k.param_dict.get("BM", 128)))
            i32 = {n_: torch.from_numpy(np.ascontiguousarray(meta[n_])).to(dev)
                   for n_ in ("offs", "tile_expert", "tile_row", "row_tile")}
            hs = torch.empty(m, ff, device=dev, dtype=bf16)
            fns[name] = [gk.prepare(Xs=xs, Wg=wg, Wu=wu, Hs=hs, **i32)]
            outs[name] = hs
        offs_end = torch.from_numpy(base["offs"][1:].astype(np.int32)).to(dev)
        wgu = torch.cat([wg, wu], dim=2).contiguous()
        lib_out = {}

        def grouped_act():
            gu = torch._grouped_mm(xs, wgu, offs=offs_end)
            lib_out["hs"] = torch.nn.functional.silu(gu[:, :ff]) * gu[:, ff:]
        fns["library"] = [lambda: torch._grouped_mm(xs, wgu, offs=offs_end)]
        fns["library+act"] = [grouped_act]
        flops, lib_name = 2.0 * m * hid * 2 * ff, "torch._grouped_mm"
    for f in fns.values():
        f[0]()
    torch.cuda.synchronize()
    ref = outs.get("library")
    if fam == "attention":
        ref = lib_out["o"]
    elif fam == "moe":
        ref = lib_out["hs"]
    row: dict = {"shape": shape, "library": lib_name, "estimate": False}
    for name in ("start", "tuned", "hand"):
        from argus.dsl.types import DTYPES

        chk = compare(name, outs[name].float().cpu().numpy(), ref.float().cpu().numpy(), DTYPES["bf16"])
        row[f"{name}_vs_library_rel_error"] = chk.rel_error
    times = time_interleaved(fns, iters)
    for name, t in times.items():
        key = name.replace("+", "_")
        row[f"{key}_ms"] = t.median_ms
        row[f"{key}_tflops"] = flops / t.median_ms / 1e9
    return row


def summarise(fam: str, run: dict, row: dict) -> dict:
    r = dict(row)
    r.update(family=fam, kernel=run["kernel"], evaluations=run["evaluations"], best_step=run["best"]["step"],
             proved=run["proved"], reward=run["best"]["reward"])
    if r.get("tuned_ms"):
        r["tuned_vs_hand"] = r["hand_ms"] / r["tuned_ms"]
        r["tuned_vs_start"] = r["start_ms"] / r["tuned_ms"]
        if r.get("library_ms"):
            r["tuned_vs_library"] = r["library_ms"] / r["tuned_ms"]
            r["hand_vs_library"] = r["library_ms"] / r["hand_ms"]
    return r


def markdown(rows: list[dict], info: dict) -> str:
    est = any(r.get("estimate") for r in rows)
    lines = ["# argus tune from naive starts" + (" (dry run: CPU cost-model estimates)" if est else ""), "",
             " ".join(f"{k}: {v}." for k, v in info.items()), "",
             "Ratios are times in one process (baseline time / tuned time; > 1: the tuned kernel is faster).", "",
             "| family | shape | evals | best step | proved | start TF/s | tuned TF/s | hand TF/s | library TF/s "
             "| tuned/hand | tuned/library | hand/library |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    def num(r: dict, k: str, digits: int) -> str:
        return f"{r[k]:.{digits}f}" if r.get(k) is not None else "-"

    for r in rows:
        f = lambda k, r=r: num(r, k, 0)  # noqa: E731
        g = lambda k, r=r: num(r, k, 2)  # noqa: E731
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        lines.append(f"| {r['family']} | {shape} | {r['evaluations']} | {r['best_step']} | "
                     f"{'yes' if r['proved'] else 'no (unknown)'} | {f('start_tflops')} | {f('tuned_tflops')} | "
                     f"{f('hand_tflops')} | {f('library_tflops')} | {g('tuned_vs_hand')} | {g('tuned_vs_library')} | "
                     f"{g('hand_vs_library')} |")
    libs = {r["family"]: r["library"] for r in rows if r.get("library")}
    if libs:
        lines += ["", "Libraries: " + "; ".join(f"{k}: {v}" for k, v in libs.items()) + ". MoE library time is "
                  "grouped_mm without the SiLU*up epilogue (library_act_ms in summary.json has it)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_end = time.monotonic() + args.minutes * 60
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.store = str(Path(args.store).resolve()) if args.store else str(out / "tune-store.json")
    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "budget": args.budget,
            "minutes": args.minutes, "seed": args.seed, "mode": "dry (CPU)" if args.dry else "GPU"}
    if not args.dry:
        from argus.agent.backend import RuntimeBackend

        why = RuntimeBackend.available()
        if why:
            print(f"device_tune: {why}; use --dry on a machine without a GPU", file=sys.stderr)
            return 1
        from argus.runtime.bench import gpu_description

        info.update(gpu_description(0))
    print(f"device_tune: {', '.join(args.families)} from benchmarks/tune/starts/, budget {args.budget}, "
          f"{args.minutes:.1f} min, out {out}", flush=True)
    codes = run_tunes(args, out, t_end)
    if args.no_compare:
        return 0 if all(c == 0 for c in codes.values()) else 1
    rows = []
    for fam in args.families:
        run = best_of(fam, out)
        if run is None:
            print(f"[{fam}] no result (exit {codes.get(fam)})", flush=True)
            continue
        try:
            row = compare_dry(fam, run) if args.dry else compare_gpu(fam, run, args.iters, args.seed)
        except Exception as e:  # noqa: BLE001 - one family's comparison failing must not lose the others
            print(f"[{fam}] comparison failed: {type(e).__name__}: {e}", flush=True)
            continue
        rows.append(summarise(fam, run, row))
    text = markdown(rows, info)
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"info": info, "rows": rows, "exit_codes": codes}, indent=2))
    print(text, flush=True)
    return 0 if rows and len(rows) == len(args.families) else 1


if __name__ == "__main__":
    sys.exit(main())
