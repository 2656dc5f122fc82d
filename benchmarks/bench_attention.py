#!/usr/bin/env python3
"""Argus FlashAttention (examples/flash_attention.arg) against torch SDPA's cuDNN and flash backends,
side by side in one process: bf16 Q, K, V, O in [B, H, S, D], fp32 statistics, forward only.

    python3 benchmarks/bench_attention.py                 # every variant and config; updates benchmarks/RESULTS.md
    python3 benchmarks/bench_attention.py --variants default --configs 4096x128 --iters 10 --md -

Configurations: B * S = 16384 tokens, H * D = 2048, S in {1024, 4096, 16384}, D in {64, 128}, causal
and not (SQ = SKV, so causal alignment is the same for torch and Argus); D = 256 at S 4096; and with an
explicit batch and heads (`SxD[c]:B/H/HKV`): GQA prefill (H 32, HKV 8, causal, S 8192) and a large batch of
short sequences (B 32, H 32, S 512). FLOPs = 4 * B * H * S^2 * D, halved for causal; torch runs GQA with
enable_gqa=True.

Decode (`--decode`, a section of its own): split-KV attention over a KV cache (examples/decode_attention.arg:
decode_split_ws + decode_combine, one query per head; decode_spec_ws, 16 new queries per sequence causal among
themselves) at KV 8k, 32k and 128k with GQA (HKV 8), each checked against float64 and timed beside every
torch path that takes the shape (SDPA's own choice, each SDPA backend pinned, flash_attn_with_kvcache where
installed): the rows of benchmarks/bench_ops.py's decode cases at these shapes, ratio to the fastest path.

Each variant is first checked in a child process at small irregular shapes (D 64 and 128, causal and
not, GQA, SQ != SKV): a faulting kernel then costs only that variant. In the main process, per
config: fresh random inputs, O poisoned with NaN, one launch of every variant and of each torch
backend, each compared on a few (batch, head) pairs with a float64 attention computed on the GPU
(argus.interp.run.compare, the interpreter's criterion); then every variant and both torch backends
are timed interleaved on rotated input sets (CUDA events, stream backed up by a sleep kernel, median
of --iters; argus.runtime.bench.time_interleaved). Ratios are backend time / Argus time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import checked_variants, output_args, pick_variant, write_markdown  # noqa: E402

FA_FILE = "examples/flash_attention.arg"
TOKENS, WIDTH = 16384, 2048
# (S, D, causal, B, H, GROUP): GROUP query heads share a kv head (HKV = H / GROUP)
CONFIGS = [(s, d, c, TOKENS // s, WIDTH // d, 1) for s in (1024, 4096, 16384) for d in (64, 128) for c in (False, True)]
CONFIGS += [(4096, 256, c, TOKENS // 4096, WIDTH // 256, 1) for c in (False, True)]
CONFIGS += [(8192, 128, True, 1, 32, 4), (512, 128, False, 32, 32, 1), (512, 128, True, 32, 32, 1)]


def config_name(cfg) -> str:
    s, d, c, b, h, g = cfg
    name = f"{s}x{d}{'c' if c else ''}"
    return name if (b, h, g) == (TOKENS // s, WIDTH // d, 1) else f"{name}:{b}/{h}/{h // g}"


def parse_config(text: str):
    """`SxD[c]` (B * S = 16384, H * D = 2048) or `SxD[c]:B/H/HKV`."""
    head, _, tail = text.partition(":")
    causal = head.endswith("c")
    s, d = (int(x) for x in head.rstrip("c").split("x"))
    if not tail:
        return s, d, causal, TOKENS // s, WIDTH // d, 1
    b, h, hkv = (int(x) for x in tail.split("/"))
    if h % hkv:
        raise SystemExit(f"config {text}: H = {h} is not a multiple of HKV = {hkv}")
    return s, d, causal, b, h, h // hkv
# (HD, CAUSAL, GROUP, B, HKV, SQ, SKV)
CHECKS = [(128, False, 1, 1, 2, 200, 333), (64, True, 4, 1, 1, 333, 517), (128, True, 1, 2, 1, 256, 256),
          (64, False, 1, 1, 2, 129, 100)]


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    params: dict = field(default_factory=dict)  # besides HD and CAUSAL, which each config sets
    codegen: dict = field(default_factory=dict)  # code generator options (argus.codegen.compile.build)
    file: str = FA_FILE
    kernel: str | None = None  # which kernel of the file (default: its first)
    auto: bool = False  # per config, the kernel the file's `specialize` routes pick (as argus.load(file)(...) runs)


R240 = {"PRODUCER_REGS": 24, "CONSUMER_REGS": 240}
VARIANTS = [
    Variant("default", "flash_attention.arg defaults: BQ=256 (4 warpgroups) for D=128 and 128 (2) for D=64, "
            "BKV=64 (D=128) / 128 (D=64), 2 stages, wgmma"),
    Variant("ws", "flash_attention_ws.arg: TMA producer warpgroup, 2 consumer warpgroups (BQ=128), BKV=128, K/V ring "
            "of 2 stages (3 causal, 4 at D=64), setmaxnreg 24 / 240; derived by argus tune",
            file="examples/flash_attention_ws.arg"),
    Variant("ws-auto", "flash_attention_ws.arg as `argus.load(...)(Q, K, V, O, LSE)` runs it: the kernel its "
            "`specialize` routes pick per shape (named beside B, H, HKV)", file="examples/flash_attention_ws.arg",
            auto=True),
    Variant("ws-bkv64", "flash_attention_ws.arg BKV=64, 4 stages (its default before 2026-12-02)",
            {"BKV": 64, "STAGES": 4}, file="examples/flash_attention_ws.arg"),
    Variant("ws-direct", "flash_attention_ws.arg with O stored from registers to global (no TMA store)",
            codegen={"bulk_store": False}, file="examples/flash_attention_ws.arg"),
    Variant("ws-bkv128", "flash_attention_ws.arg BKV=128, 2 stages (half as many kv steps, n=128 score wgmmas)",
            {"BKV": 128, "STAGES": 2}, file="examples/flash_attention_ws.arg"),
    Variant("ws-bkv128-s3", "flash_attention_ws.arg BKV=128, 3 stages", {"BKV": 128, "STAGES": 3},
            file="examples/flash_attention_ws.arg"),
    Variant("ws-fa3", "FlashAttention-3's order in the source (QK of block j, then P·V of block j-1 and its release, "
            "then block j's softmax; tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg): the P·V wgmma stays in "
            "flight under the softmax (codegen/held_release.py)",
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    # setmaxnreg split: the producer at the 24-register minimum leaves each consumer 240 (ptxas at D=128: the FA3
    # order spills 76 B at 232, 12 B at 240; the literal order spills at neither)
    Variant("ws-r240", "flash_attention_ws.arg with producer 24 / consumers 240 registers",
            R240, file="examples/flash_attention_ws.arg"),
    Variant("ws-fa3-r240", "ws-fa3 with producer 24 / consumers 240 registers", R240,
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-fa3-s3-r240", "ws-fa3, 3 stages, producer 24 / consumers 240 registers", {**R240, "STAGES": 3},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-fa3-bf16-r240", "ws-fa3-bf16 with producer 24 / consumers 240 registers", R240,
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"),
    Variant("fa3", "flash_attention_ws.arg's kernel flash_attention_ws_fa3 (FA3's order in the example; its own "
            "registers and stages)", file="examples/flash_attention_ws.arg", kernel="flash_attention_ws_fa3"),
    Variant("fa3-pp", "flash_attention_ws_fa3 with PINGPONG: the two consumer warpgroups issue QK and P·V in turns "
            "(`with turn()`), one's wgmmas under the other's softmax", {"PINGPONG": True},
            file="examples/flash_attention_ws.arg", kernel="flash_attention_ws_fa3"),
    Variant("persist-pp", "flash_attention_ws_persistent with PINGPONG: the consumer warpgroups issue QK, then P·V, "
            "in turns", {"PINGPONG": True}, file="examples/flash_attention_ws.arg",
            kernel="flash_attention_ws_persistent"),
    Variant("persist-r240", "flash_attention_ws_persistent with producer 24 / consumers 240 registers", R240,
            file="examples/flash_attention_ws.arg", kernel="flash_attention_ws_persistent"),
    Variant("persist-fa3", "the persistent kernel in FA3's order (QK j, P·V j-1, softmax j), 3 stages (2 at D=256), "
            "producer 24 / consumers 240 registers", file="benchmarks/probes/attention/fa_persistent_fa3.arg"),
    Variant("ws-fa3-s3", "ws-fa3 with 3 stages at every causality (the stage held for P·V leaves a 2-stage ring "
            "no room to prefetch)", {"STAGES": 3}, file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-fa3-bf16", "ws-fa3 with P carried to the next step in bf16 (fa_ws_pipelined_pv_bf16.arg)",
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"),
    Variant("ws-fa3-64", "ws-fa3 with BKV=64 and 4 stages (S, P and O fit the consumer's registers: no spills)",
            {"BKV": 64, "STAGES": 4}, file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-fa3-bf16-64", "ws-fa3-bf16 with BKV=64 and 4 stages", {"BKV": 64, "STAGES": 4},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"),
    Variant("ws-fa3-112", "ws-fa3 with BKV=112 and 2 stages (ptxas: 44 B of spills at 168 registers, against 216 B "
            "at BKV=128)", {"BKV": 112, "STAGES": 2}, file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-fa3-96", "ws-fa3 with BKV=96 and 3 stages", {"BKV": 96, "STAGES": 3},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-112", "flash_attention_ws.arg (literal order) with BKV=112", {"BKV": 112},
            file="examples/flash_attention_ws.arg"),
    Variant("ws-fa3-64-s2", "ws-fa3 with BKV=64 and 2 stages", {"BKV": 64, "STAGES": 2},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    # builds without the wait's watchdog: equal to the default builds since its trap left the setmaxnreg
    # regions (2026-12-03; benchmarks/probes/README.md)
    Variant("ws-fa3-bf16-nowd", "ws-fa3-bf16 built without the wait watchdog (-DAG_WATCHDOG_SPINS=0)",
            codegen={"options": ("-DAG_WATCHDOG_SPINS=0",)},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv_bf16.arg"),
    Variant("ws-fa3-nowd", "ws-fa3 built without the wait watchdog", codegen={"options": ("-DAG_WATCHDOG_SPINS=0",)},
            file="tests/analysis/corpus/correct/fa_ws_pipelined_pv.arg"),
    Variant("ws-nowd", "flash_attention_ws.arg built without the wait watchdog",
            codegen={"options": ("-DAG_WATCHDOG_SPINS=0",)}, file="examples/flash_attention_ws.arg"),
    # separate K and V rings (benchmarks/probes/attention): K released once QK has completed, so the producer
    # refills it under the softmax; the FA3 order then keeps a V stage and a K stage in flight
    Variant("split-lit", "flash_attention_ws.arg with separate K and V rings",
            file="benchmarks/probes/attention/fa_ws_split_literal.arg"),
    Variant("split-fa3", "FA3 order (QK j, P·V j-1, softmax j) with separate K and V rings",
            file="benchmarks/probes/attention/fa_split_ring.arg"),
    Variant("split-fa3-s3", "split-fa3 with 3 stages", {"STAGES": 3},
            file="benchmarks/probes/attention/fa_split_ring.arg"),
    Variant("split-lit-s3", "split-lit with 3 stages", {"STAGES": 3},
            file="benchmarks/probes/attention/fa_ws_split_literal.arg"),
    Variant("persist", "flash_attention_ws_persistent (examples/flash_attention_ws.arg): one block per SM looping over "
            "tiles, Q loaded by the producer, so the next tile's loads run under this tile's epilogue",
            file="examples/flash_attention_ws.arg", kernel="flash_attention_ws_persistent"),
    Variant("bq128", "BQ=128 (2 warpgroups, two blocks per SM; the D=128 default before 2026-11-30)", {"BQ": 128}),
    Variant("mask-all", "every kv block masked per element (uniform_select=False), causal blocks in launch order",
            {"HEAVY_FIRST": False}, {"uniform_select": False}),
    Variant("in-order", "causal query blocks in launch order (HEAVY_FIRST=False)", {"HEAVY_FIRST": False}),
    Variant("bkv64", "BKV=64", {"BKV": 64}),
    Variant("bkv128", "BKV=128, BQ=128", {"BKV": 128, "BQ": 128}),
    Variant("mma.sync", "MMA=\"mma.sync\" (ldmatrix + mma.sync m16n8k16, 8 warps, BKV=64)", {"MMA": "mma.sync",
                                                                                           "BKV": 64}),
]


def _build(params: dict, codegen: dict, file: str = FA_FILE, kernel: str | None = None):
    import argus
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch

    return build(argus.load(ROOT / file, kernel, **params).lower(), arch=detect_arch(0), **codegen)


def _load(v: Variant, hd: int, causal: bool, group: int = 1, dims: dict[str, int] | None = None):
    """The variant built for this GPU and loaded; an `auto` variant with the route its file picks for `dims`."""
    import argus
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    params = {**v.params, "HD": hd, "CAUSAL": causal, "GROUP": group}
    if not (v.auto and dims):
        return GpuKernel(_build(params, v.codegen, v.file, v.kernel), 0)
    k = argus.load(ROOT / v.file, v.kernel, **params).specialized(dims)
    return GpuKernel(build(k.lower(), arch=detect_arch(0), **v.codegen), 0)


def _dims(b: int, h: int, hkv: int, sq: int, skv: int, d: int) -> dict[str, int]:
    return {"B": b, "H": h, "HKV": hkv, "SQ": sq, "SKV": skv, "D": d}


def _warm(job: tuple[dict, dict, str, str | None]) -> str:
    b = _build(*job)
    return "; ".join(r.summary() for r in b.resources.values())


def prebuild(variants: list[Variant], configs) -> None:
    """Compile every kernel the run needs in parallel processes (NVRTC's disk cache then serves them)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = {(v.key, hd, causal, group): ({**v.params, "HD": hd, "CAUSAL": causal, "GROUP": group}, v.codegen, v.file,
                                         v.kernel)
            for v in variants for hd, causal, group, *_ in CHECKS}
    jobs.update({(v.key, d, c, g): ({**v.params, "HD": d, "CAUSAL": c, "GROUP": g}, v.codegen, v.file, v.kernel)
                 for v in variants for _, d, c, _, _, g in configs})
    t0 = time.time()
    with cf.ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 4), mp_context=mp.get_context("spawn")) as pool:
        for key, res in zip(jobs, pool.map(_warm, list(jobs.values())), strict=True):
            print(f"[prebuild] {key}: {res}", flush=True)
    print(f"[prebuild] {len(jobs)} kernels in {time.time() - t0:.1f}s", flush=True)


def child_check(key: str) -> int:
    """Correctness of one variant at small irregular shapes (run in a child process)."""
    from argus.runtime.bench import check_on_gpu

    v = pick_variant(VARIANTS, key)
    ok = True
    for hd, causal, group, b, hkv, sq, skv in CHECKS:
        dims = _dims(b, hkv * group, hkv, sq, skv, hd)
        gk = _load(v, hd, causal, group, dims)
        checks, _ = check_on_gpu(gk, dims, seed=sq + skv)
        for c in checks:
            print(f"[{key}] D={hd} causal={causal} group={group} {b}x{hkv * group}x{sq}x{skv}: "
                  f"{'ok' if c.ok else 'FAIL'} {c.describe()}", flush=True)
            ok &= c.ok
    return 0 if ok else 1


def flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    return 4.0 * b * h * s * s * d / (2 if causal else 1)


def accepted(chk, library_checks) -> bool:
    """Correct: within the interpreter's criterion, or -- where the libraries miss it too -- no worse
    than they are. (Causal rows that see few keys: P rounded to bf16 before P @ V, as every flash
    kernel does, leaves an error of ~2^-9 of the few V rows it sums, which exceeds the per-element bound
    where they cancel; cuDNN and flash produce the same elements there.)"""
    if chk.ok:
        return True
    libs = list(library_checks)
    return all(not c.ok for c in libs) and chk.nonfinite == 0 and \
        chk.bad <= 1.1 * max(c.bad for c in libs) + 2 and chk.rel_error <= 1.05 * max(c.rel_error for c in libs)


def reference_heads(q, k, v, causal: bool, pairs):
    """float64 attention on the GPU for the (batch, head) pairs: (O, LSE) of each (query head h reads kv
    head h // (H / HKV))."""
    import torch

    out = []
    group = q.shape[1] // k.shape[1]
    for b, h in pairs:
        qq, kk, vv = q[b, h].double(), k[b, h // group].double(), v[b, h // group].double()
        s = (qq @ kk.T) / (q.shape[-1] ** 0.5)
        if causal:
            n = s.shape[0]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        out.append(((torch.softmax(s, dim=-1) @ vv).cpu().numpy(), torch.logsumexp(s, dim=-1).cpu().numpy()))
        del s
    return out


def run(variants: list[Variant], configs, iters: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from argus.codegen.nvrtc import nvrtc_version
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.bench import L2_ROTATE_BYTES, gpu_description, time_interleaved

    env = gpu_description()
    env["nvrtc"] = ".".join(map(str, nvrtc_version()))
    print("ENV", json.dumps(env), flush=True)
    bf16 = DTYPES["bf16"]
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    out = {"env": env, "variants": {}, "rows": []}
    kernels, routes = {}, {}
    for v in variants:
        out["variants"][v.key] = {"title": v.title, "params": {**v.params, **v.codegen}, "resources": {},
                                  "file": v.file}
        for hd, causal, group in sorted({(d, c, g) for _, d, c, _, _, g in configs}):
            t0 = time.time()
            gk = _load(v, hd, causal, group)
            kernels[v.key, hd, causal, group] = gk
            res = "; ".join(r.summary() for r in gk.built.resources.values())
            what = f"D={hd} causal={causal}" + (f" GROUP={group}" if group > 1 else "")
            out["variants"][v.key]["resources"][what] = res
            print(f"[{v.key}] {what} built in {time.time() - t0:.1f}s: {res}", flush=True)
    for s, d, causal, b, h, group in configs:
        hkv = h // group
        fl = flops(b, h, s, d, causal)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(s * 7 + d + causal + 1000 * group + b)
        q = torch.randn((b, h, s, d), device="cuda", generator=gen).to(torch.bfloat16)
        k, v_ = (torch.randn((b, hkv, s, d), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
        pairs = [(0, 0), (b - 1, h - 1)]
        heads = reference_heads(q, k, v_, causal, pairs)
        ref, ref_lse = np.stack([o for o, _ in heads]), np.stack([x for _, x in heads])
        for v in variants:
            if v.auto:  # the route argus.load(file)(...) takes at these dims
                gk = kernels[v.key, d, causal, group] = _load(v, d, causal, group, _dims(b, h, hkv, s, s, d))
                routes[v.key, s, d, causal, b, h, hkv] = gk.built.kernel.name
                print(f"[{v.key}] S={s} D={d} causal={causal}: {gk.built.kernel.name}: "
                      + "; ".join(r.summary() for r in gk.built.resources.values()), flush=True)

        def check(o, pairs=pairs, ref=ref) -> object:
            return compare("O", torch.stack([o[bb, hh] for bb, hh in pairs]).float().cpu().numpy(), ref, bf16)

        checks, lse_checks = {}, {}
        for v in variants:
            o = torch.full((b, h, s, d), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.full((b, h, s), float("nan"), device="cuda", dtype=torch.float32)
            kernels[v.key, d, causal, group](q, k, v_, o, lse)
            torch.cuda.synchronize()
            checks[v.key] = check(o)
            lse_checks[v.key] = compare("LSE", torch.stack([lse[bb, hh] for bb, hh in pairs]).cpu().numpy(),
                                        ref_lse, DTYPES["f32"])
            del o, lse
        base_checks = {}
        for name, be in backends.items():
            with sdpa_kernel([be]):
                base_checks[name] = check(F.scaled_dot_product_attention(q, k, v_, is_causal=causal,
                                                                         enable_gqa=group > 1))
        set_bytes = (2 * h + 2 * hkv) * b * s * d * 2
        nsets = max(2, min(8, -(-L2_ROTATE_BYTES // set_bytes)))
        sets = [(torch.randn((b, h, s, d), device="cuda").to(torch.bfloat16),)
                + tuple(torch.randn((b, hkv, s, d), device="cuda").to(torch.bfloat16) for _ in range(2))
                + (torch.empty((b, h, s, d), device="cuda", dtype=torch.bfloat16),
                   torch.empty((b, h, s), device="cuda", dtype=torch.float32)) for _ in range(nsets)]

        def sdpa(be, x, y, z, c=causal, gqa=group > 1):
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(x, y, z, is_causal=c, enable_gqa=gqa)

        fns = {name: [(lambda x=x, y=y, z=z, be=be: sdpa(be, x, y, z)) for x, y, z, *_ in sets]
               for name, be in backends.items()}
        for v in variants:
            if accepted(checks[v.key], base_checks.values()) and lse_checks[v.key].ok:
                fns[v.key] = [kernels[v.key, d, causal, group].prepare(*args) for args in sets]
        times = time_interleaved(fns, iters)
        base = {name: fl / times[name].median_ms / 1e9 for name in backends}
        line = (f"S={s} D={d} causal={causal} (B={b} H={h} HKV={hkv}): cuDNN {base['cudnn']:6.1f} TF/s, "
                f"flash {base['flash']:6.1f} TF/s")
        for name, c in base_checks.items():
            if not c.ok:
                print(f"  [{name}] under the same criterion: {c.describe()}", flush=True)
        for v in variants:
            chk = checks[v.key]
            row = {"variant": v.key, "S": s, "D": d, "causal": causal, "B": b, "H": h, "HKV": hkv,
                   "kernel": routes.get((v.key, s, d, causal, b, h, hkv)),
                   "ok": accepted(chk, base_checks.values()) and lse_checks[v.key].ok, "strict_ok": chk.ok,
                   "lse_ok": lse_checks[v.key].ok, "lse_rel_error": lse_checks[v.key].rel_error,
                   "rel_error": chk.rel_error, "wrong": chk.bad, "nonfinite": chk.nonfinite,
                   "check": chk.describe(), **{f"{n}_tflops": base[n] for n in backends},
                   **{f"{n}_rel_error": base_checks[n].rel_error for n in backends},
                   **{f"{n}_ok": base_checks[n].ok for n in backends},
                   **{f"{n}_wrong": base_checks[n].bad for n in backends}}
            if v.key in times:
                t = times[v.key]
                tf = fl / t.median_ms / 1e9
                row.update(ms=t.median_ms, tflops=tf, **{f"vs_{n}": tf / base[n] for n in backends})
                line += f" | {v.key} {tf:6.1f} ({row['vs_cudnn']:.3f} cuDNN, {row['vs_flash']:.3f} flash)"
            else:
                line += f" | {v.key} WRONG: {chk.describe()}"
            if not chk.ok or not lse_checks[v.key].ok:
                print(f"  [{v.key}] {chk.describe()}; {lse_checks[v.key].describe()}", flush=True)
            out["rows"].append(row)
        print(line, flush=True)
        del sets, fns, q, k, v_
        torch.cuda.empty_cache()
    return out


def markdown(res: dict, iters: int) -> str:
    env = res["env"]
    lines = [
        "# Attention: Argus vs torch SDPA (cuDNN, flash)",
        "",
        f"Measured {env.get('date')} on {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
        f"NVRTC {env.get('nvrtc')}; forward, bf16 Q/K/V/O in [B, H, S, D] (K, V: [B, HKV, S, D]), B * S = "
        f"{TOKENS} tokens and H * D = {WIDTH} where B, H, HKV are not given, SQ = SKV = S.",
        "",
        "Method (benchmarks/bench_attention.py): per config, fresh random inputs and NaN-poisoned outputs; every "
        "variant and both torch backends checked on two (batch, head) pairs against a float64 attention with the "
        "interpreter's criterion; then timed interleaved in the same process (CUDA events, median of "
        f"{iters}, input sets rotated over >= 256 MB). TFLOP/s = 4 B H S^2 D / time (halved for causal); ratio = "
        "Argus TFLOP/s / backend TFLOP/s. The Argus kernel also writes the fp32 softmax statistics LSE (checked "
        "on the same pairs against float64 logsumexp); the torch calls return O only.",
        "",
    ]
    for key, v in res["variants"].items():
        lines += [f"## {v['title']}", "", f"`{v.get('file', FA_FILE)}` {v['params'] or ''}  "]
        lines += [f"ptxas {cfg}: {r}  " for cfg, r in v["resources"].items()]
        lines += ["", "| S | D | causal | B, H, HKV | Argus TFLOP/s | cuDNN TFLOP/s | flash TFLOP/s | vs cuDNN | "
                  "vs flash | rel. error | LSE rel. error | correct |",
                  "|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
        for r in res["rows"]:
            if r["variant"] != key:
                continue
            routed = f" ({r['kernel']})" if r.get("kernel") else ""
            head = (f"| {r['S']} | {r['D']} | {'yes' if r['causal'] else 'no'} | "
                    f"{r['B']}, {r['H']}, {r.get('HKV', r['H'])}{routed} |")
            if "tflops" in r:
                ok = "yes" if r["strict_ok"] else f"as libs ({r['wrong']} el.)*" if r["ok"] else "NO"
                lines.append(f"{head} {r['tflops']:.1f} | {r['cudnn_tflops']:.1f} | {r['flash_tflops']:.1f} | "
                             f"**{r['vs_cudnn']:.3f}** | {r['vs_flash']:.3f} | {r['rel_error']:.2e} | "
                             f"{r['lse_rel_error']:.1e} | {ok} |")
            else:
                lines.append(f"{head} - | {r['cudnn_tflops']:.1f} | {r['flash_tflops']:.1f} | - | - | "
                             f"{r['rel_error']:.2e} | {r['lse_rel_error']:.1e} | NO |")
        lines.append("")
    if any(r["ok"] and not r["strict_ok"] for r in res["rows"]):
        lines += ["\\* outside the interpreter's per-element bound at about as many elements as cuDNN and flash "
                  "(at most 1.1x theirs + 2; they produce the same values there: rows whose few dominant keys "
                  "nearly cancel, where P rounded to bf16 before P @ V leaves ~2^-9 of the summed V rows), "
                  "relative error within 5% of theirs.", ""]
    return "\n".join(lines)


DECODE_SHAPES = [(8, 32, 8, 8192), (1, 64, 8, 32768), (1, 32, 8, 131072)]  # (B, H, HKV, SKV)


def run_decode(iters: int, md: str, json_path: str) -> int:
    """The decode section: bench_ops.py's decode and speculative-decode cases at DECODE_SHAPES."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_ops

    table = {"decode": ("split-KV decode, one query per head (decode_split_ws + decode_combine) vs the best torch "
                        "path", bench_ops.decode_case, DECODE_SHAPES),
             "decode_spec": ("speculative decode, 16 new queries per sequence (decode_spec_ws + decode_combine) vs "
                             "the best torch path", bench_ops.spec_case, DECODE_SHAPES)}
    res = bench_ops.run(list(table), iters, False, table=table)
    Path(json_path).write_text(json.dumps(res, indent=1))
    text = bench_ops.markdown(res, iters).replace("# Ops: Argus examples vs torch",
                                                  "# Decode attention: Argus vs torch")
    write_markdown(md, "attention-decode", text)
    return 0 if all(r.get("ok") for r in res["rows"]) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decode", action="store_true", help="the decode section only (KV 8k-128k, 1 and 16 queries)")
    ap.add_argument("--variants", default=",".join(v.key for v in VARIANTS))
    ap.add_argument("--configs", default=",".join(config_name(c) for c in CONFIGS),
                    help="SxD, with a trailing c for causal, optionally :B/H/HKV (e.g. 4096x128,8192x128c:1/32/8)")
    output_args(ap, "attention", iters=30)
    args = ap.parse_args()
    if args.child_check:
        return child_check(args.child_check)
    if args.decode:
        return run_decode(args.iters, args.md, args.json.replace(".json", "_decode.json"))
    keys = [k for k in args.variants.split(",") if k]
    variants = [pick_variant(VARIANTS, k) for k in keys]  # KEY[P=V;P=V]: params on top of a variant (probes)
    configs = [parse_config(c) for c in args.configs.split(",") if c]
    prebuild(variants, configs)
    if not args.no_child_check:  # all children at once
        variants = checked_variants(__file__, variants, timeout=240)
    if not variants:
        return 1
    res = run(variants, configs, args.iters)
    Path(args.json).write_text(json.dumps(res, indent=1))
    md = markdown(res, args.iters)
    write_markdown(args.md, "attention", md)
    return 0 if all(r["ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
