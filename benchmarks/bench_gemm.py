#!/usr/bin/env python3
"""Argus GEMM kernels against cuBLAS, side by side in one process: bf16 in, fp32 accumulate, bf16 out.

    python3 benchmarks/bench_gemm.py                  # every variant and shape; writes benchmarks/RESULTS.md
    python3 benchmarks/bench_gemm.py --variants ws --shapes 4096x4096x4096 --iters 10 --md -

Each variant is first checked in a child process at small irregular shapes (a faulting or hanging kernel
then costs only that variant). In the main process, per shape: fresh random inputs, outputs poisoned
with NaN, one launch of every variant, each compared with the float64 product (argus.interp.run.compare,
the interpreter's criterion); then every variant and torch.matmul (cuBLAS) are timed interleaved on the
same rotated input sets (CUDA events, stream backed up by a sleep kernel, median of --iters samples;
argus.runtime.bench.time_interleaved). Ratios are cuBLAS time / Argus time from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import checked_variants, output_args, pick_variant, write_markdown  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (4096, 14336, 4096), (16384, 4096, 4096),
          (128, 4096, 4096), (16, 8192, 8192), (64, 8192, 8192), (16384, 16384, 64), (1000, 1000, 1000),
          (8205, 5921, 2949), (256, 256, 262144)]
CHECK_SHAPES = [(200, 136, 72), (129, 300, 520), (16, 136, 1000), (256, 200, 20000)]


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    file: str
    params: dict = field(default_factory=dict)
    codegen: dict = field(default_factory=dict)  # code generator options (argus.codegen.compile.build)
    layout: str = "NN"  # "NN": B stored [K, N]; "NT": B stored [N, K] (x @ W.T), the baseline matmul(A, W.T)
    auto: bool = False  # per shape, the params the kernel's `specialize` statements pick (as argus.load(...)(A, B, C))
    kernel: str | None = None  # the kernel of the file (default: its first)
    # "entry": launched exactly as `argus.load(file)(A, B, C)` (its routes included: layers, split-K), with A
    # and B as the layout says: NT passes B = W.t() (W stored [N, K]), TN A = X.t() (X stored [K, M])
    entry: bool = False
    # "bf16", or "e4m3": 8-bit operands with per-tensor scales (FP8_SCALES), bf16 out, timed against
    # torch._scaled_mm on the same arrays. 8-bit wgmma reads both operands K-major (and _scaled_mm takes
    # B column-major), so e4m3 variants are NT: A [M, K], B stored [N, K].
    dtype: str = "bf16"


FP8_SCALES = (0.5, 0.25)  # scale_a, scale_b

VARIANTS = [
    Variant("wgmma", "gemm.arg, MMA=\"wgmma\", eager wgmma wait (cp.async pipeline, 128x128x64, 3 stages)",
            "examples/gemm.arg", {"MMA": "wgmma"}, {"defer_wgmma": False}),
    Variant("wgmma-defer", "gemm.arg, MMA=\"wgmma\", deferred wgmma wait (the default; 128x128x64, 3 stages)",
            "examples/gemm.arg", {"MMA": "wgmma"}, {"defer_wgmma": True}),
    Variant("wgmma-256-defer", "gemm.arg, MMA=\"wgmma\" BN=256, deferred wgmma wait (128x256x64, 3 stages)",
            "examples/gemm.arg", {"MMA": "wgmma", "BN": 256}, {"defer_wgmma": True}),
    Variant("mma.sync", "gemm.arg, MMA=\"mma.sync\" (cp.async + ldmatrix, 128x128x64, 3 stages)",
            "examples/gemm.arg", {"MMA": "mma.sync"}),
    Variant("ws", "gemm_ws.arg (TMA + mbarriers, warp-specialised, persistent, 128x256x64, 4 stages)",
            "examples/gemm_ws.arg", {}),
    Variant("ws-direct", "gemm_ws.arg with its epilogue stored from registers to global (no TMA store)",
            "examples/gemm_ws.arg", {}, {"bulk_store": False}),
    Variant("ws-small", "gemm_ws.arg small tiles (BM=64 BN=64 CONSUMERS=1 STAGES=8)", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 8}),
    # tile shapes between the two (benchmarks/bench_gemm.py --variants ws,ws-small,ws-128x64,... picks the
    # `specialize` rules of gemm_ws.arg's gemm_ws / linear; each set verifies with argus check -D ...)
    Variant("ws-128x64", "gemm_ws.arg BM=128 BN=64 CONSUMERS=2 STAGES=8", "examples/gemm_ws.arg",
            {"BM": 128, "BN": 64, "CONSUMERS": 2, "STAGES": 8}),
    Variant("ws-128x64-nolag", "ws-128x64 with each stage released right after its step's wgmmas (release_lag off)",
            "examples/gemm_ws.arg", {"BM": 128, "BN": 64, "CONSUMERS": 2, "STAGES": 8}, {"release_lag": False}),
    Variant("ws-64x128", "gemm_ws.arg BM=64 BN=128 CONSUMERS=1 STAGES=6", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 6}),
    Variant("ws-128x128", "gemm_ws.arg BM=128 BN=128 CONSUMERS=2 STAGES=6", "examples/gemm_ws.arg",
            {"BM": 128, "BN": 128, "CONSUMERS": 2, "STAGES": 6}),
    Variant("ws-64x256", "gemm_ws.arg BM=64 BN=256 CONSUMERS=1 STAGES=4", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 256, "CONSUMERS": 1, "STAGES": 4}),
    # few tiles with long K (decode): a 64x64 tile's consumer waits for each step's wgmma group before it
    # releases the stage, so fewer, deeper steps (BK = 128) halve those waits
    Variant("ws-64x64-k128", "gemm_ws.arg BM=64 BN=64 BK=128 CONSUMERS=1 STAGES=4", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 4}),
    Variant("ws-64x64-k128-s6", "gemm_ws.arg BM=64 BN=64 BK=128 CONSUMERS=1 STAGES=6", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6}),
    Variant("ws-128x64-k128", "gemm_ws.arg BM=128 BN=64 BK=128 CONSUMERS=2 STAGES=4", "examples/gemm_ws.arg",
            {"BM": 128, "BN": 64, "BK": 128, "CONSUMERS": 2, "STAGES": 4}),
    Variant("ws-64x32-k128", "gemm_ws.arg BM=64 BN=32 BK=128 CONSUMERS=1 STAGES=8", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 32, "BK": 128, "CONSUMERS": 1, "STAGES": 8}),
    Variant("linear-64x32-k128", "linear BM=64 BN=32 BK=128 CONSUMERS=1 STAGES=8", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 32, "BK": 128, "CONSUMERS": 1, "STAGES": 8}, {}, "NT", kernel="linear"),
    Variant("linear-64x64-k128-s6", "linear BM=64 BN=64 BK=128 CONSUMERS=1 STAGES=6", "examples/gemm_ws.arg",
            {"BM": 64, "BN": 64, "BK": 128, "CONSUMERS": 1, "STAGES": 6}, {}, "NT", kernel="linear"),
    Variant("linear", "gemm_ws.arg's linear: Y = X @ W.T, W stored [N, K] (NT; TMA + wgmma transpose bit, 128x256x64)",
            "examples/gemm_ws.arg", {}, {}, "NT", kernel="linear"),
    Variant("ws-auto", "gemm_ws.arg as `argus.load(...)(A, B, C)` runs it: the kernel or layer its `specialize` "
            "lines pick per shape", "examples/gemm_ws.arg", auto=True, entry=True),
    Variant("ws-auto-NT", "gemm_ws.arg as `argus.load(...)(A, W.t(), C)` runs it (B a transposed view: linear)",
            "examples/gemm_ws.arg", layout="NT", auto=True, entry=True),
    Variant("ws-auto-TN", "gemm_ws.arg as `argus.load(...)(X.t(), B, C)` runs it (A a transposed view: gemm_tn)",
            "examples/gemm_ws.arg", layout="TN", auto=True, entry=True),
    Variant("ws-auto-TT", "gemm_ws.arg as `argus.load(...)(X.t(), W.t(), C)` runs it (both transposed views: gemm_tt)",
            "examples/gemm_ws.arg", layout="TT", auto=True, entry=True),
    Variant("linear-auto", "gemm_ws.arg's linear as `argus.load(..., \"linear\")(X, W, Y)` runs it",
            "examples/gemm_ws.arg", layout="NT", auto=True, kernel="linear"),
    # the consumer's stage release one step late (argus/codegen/release_lag.py, the default) against the
    # literal release after each step's wgmmas
    Variant("ws-auto-nolag", "ws-auto with each stage released right after its step's wgmmas (release_lag off)",
            "examples/gemm_ws.arg", {}, {"release_lag": False}, auto=True),
    Variant("linear-auto-nolag", "linear-auto with each stage released right after its step's wgmmas",
            "examples/gemm_ws.arg", {}, {"release_lag": False}, "NT", auto=True, kernel="linear"),
    Variant("fp8", "gemm_fp8.arg as `argus.load(...)(A, B, C, scale_a=, scale_b=)` runs it: e4m3 A [M, K] and "
            "B [N, K], per-tensor scales, bf16 out (TMA + wgmma k32, warp-specialised, persistent, 128x256x128 "
            "bytes, 4 stages; its `specialize` lines: split-K layer for a long K, swapped operands for few rows, "
            "64x64 tiles for few tiles)", "examples/gemm_fp8.arg", layout="NT", dtype="e4m3", auto=True, entry=True),
    # two-level accumulation (benchmarks/probes/gemm_fp8_promote.arg): each stage's products in the wgmma's own
    # accumulator, stages summed in fp32, as torch._scaled_mm's default; BN=128 (two fp32 tiles per thread)
    Variant("fp8-promote", "gemm_fp8 with two-level accumulation, 128x128x128 bytes, 4 stages",
            "benchmarks/probes/gemm_fp8_promote.arg", layout="NT", dtype="e4m3"),
    Variant("fp8-promote-s6", "fp8-promote with 6 stages", "benchmarks/probes/gemm_fp8_promote.arg",
            {"STAGES": 6}, layout="NT", dtype="e4m3"),
    Variant("fp8-128", "gemm_fp8 (one accumulator) at 128x128x128 bytes, 6 stages", "examples/gemm_fp8.arg",
            {"BN": 128, "STAGES": 6}, layout="NT", dtype="e4m3"),
    Variant("fp8-direct", "gemm_fp8 with its default tiles on every shape (no routes)", "examples/gemm_fp8.arg",
            layout="NT", dtype="e4m3"),
    Variant("fp8-decode", "gemm_fp8_decode: few rows, operands' roles swapped (BT=16, BK=256 bytes, 10 stages)",
            "examples/gemm_fp8.arg", {"BT": 16, "BK": 256, "STAGES": 10}, layout="NT", dtype="e4m3",
            kernel="gemm_fp8_decode"),
]


def _load(v: Variant, dims: dict[str, int] | None = None):
    """The variant compiled for this GPU and loaded (a GpuKernel); an `auto` variant with the params
    its `specialize` statements pick for `dims`."""
    import argus
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    k = argus.load(ROOT / v.file, v.kernel, **v.params)
    if v.auto and dims is not None:
        k = k.specialized(dims)
    if not hasattr(k, "lower"):  # a route to a layer: its kernels, as a layer runs them (no codegen options)
        return None
    return GpuKernel(build(k.lower(), arch=detect_arch(0), **v.codegen), 0)


def _entry(v: Variant):
    """The variant as a user calls it: argus.load(file)(...), routes and layers included."""
    import argus

    return argus.load(ROOT / v.file, v.kernel, **v.params)


def operands(layout: str, M: int, N: int, K: int, gen=None, dtype: str = "bf16"):
    """(A, B) for a layout as the kernel's arguments see them ([M, K], [K, N]; a transposed view where the
    layout stores the operand the other way) and the arrays as stored (for the NT baseline, W = B.T)."""
    import torch

    tdt = torch.float8_e4m3fn if dtype == "e4m3" else torch.bfloat16

    def rnd(*shape):
        return torch.randn(shape, device="cuda", generator=gen).to(tdt)

    a = rnd(K, M).t() if layout[0] == "T" else rnd(M, K)
    b = rnd(N, K).t() if layout[1] == "T" else rnd(K, N)
    return a, b


def variant(key: str) -> Variant:
    return pick_variant(VARIANTS, key)


def child_check(key: str) -> int:
    """Correctness of one variant at small irregular shapes (run in a child process)."""
    from argus.runtime.bench import check_on_gpu

    v = variant(key)
    ok = True
    if v.entry:
        import torch

        from argus.dsl.types import DTYPES
        from argus.interp.run import compare

        k = _entry(v)
        fp8 = v.dtype == "e4m3"
        # 8-bit rows need 16-byte pitches (gemm_fp8's assume): K rounded up to 16 there
        for M, N, K in CHECK_SHAPES if not fp8 else [(m, n, -(-k // 16) * 16) for m, n, k in CHECK_SHAPES]:
            g = torch.Generator(device="cuda")
            g.manual_seed(M + N + K)
            a, b = operands(v.layout, M, N, K, g, v.dtype)
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            if fp8:  # gemm_fp8 takes B as stored, [N, K]
                k(a, b.t(), c, scale_a=FP8_SCALES[0], scale_b=FP8_SCALES[1])
            else:
                k(a, b, c)
            torch.cuda.synchronize()
            ref = (a.double() @ b.double()) * (FP8_SCALES[0] * FP8_SCALES[1] if fp8 else 1.0)
            chk = compare("C", c.float().cpu().numpy(), ref.cpu().numpy(), DTYPES["bf16"])
            print(f"[{key}] {M}x{N}x{K}: {'ok' if chk.ok else 'FAIL'} {chk.describe()}", flush=True)
            ok &= chk.ok
        return 0 if ok else 1
    gk = _load(v)
    # 8-bit rows need 16-byte pitches (the kernel's assume): K rounded up to 16 there
    shapes = CHECK_SHAPES if v.dtype == "bf16" else [(m, n, -(-k // 16) * 16) for m, n, k in CHECK_SHAPES]
    for M, N, K in shapes:
        dims = {"M": M, "N": N, "K": K}
        one = _load(v, dims) if v.auto else gk
        if one is None:
            continue  # a route to a layer: the entry variants check it
        checks, _ = check_on_gpu(one, dims, seed=M + N + K)
        for c in checks:
            print(f"[{key}] {M}x{N}x{K}: {'ok' if c.ok else 'FAIL'} {c.describe()}", flush=True)
            ok &= c.ok
    return 0 if ok else 1


SASS_OPS = ("HGMMA", "HMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "USETMAXREG", "BAR", "LDL", "STL")


def sass_summary(variants: list[Variant]) -> dict[str, dict[str, int]]:
    """Instruction counts in each variant's SASS (cuobjdump, where the machine has it)."""
    import re
    import shutil
    import tempfile

    tool = shutil.which("cuobjdump") or ("/usr/local/cuda/bin/cuobjdump"
                                         if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)
    out: dict[str, dict[str, int]] = {}
    if tool is None:
        return out
    for v in variants:
        if v.entry:
            continue  # built per shape (routes); the direct variants show the kernels' SASS
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(_load(v).built.result.binary)
            f.flush()
            sass = subprocess.run([tool, "--dump-sass", f.name], capture_output=True, text=True, timeout=60).stdout
        out[v.key] = {op: len(re.findall(r"\b" + op + r"[.\s]", sass)) for op in SASS_OPS}
        print(f"[{v.key}] SASS {out[v.key]}", flush=True)
    return out


def tflops(M: int, N: int, K: int, ms: float) -> float:
    return 2.0 * M * N * K / ms / 1e9


def run(variants: list[Variant], shapes: list[tuple[int, int, int]], iters: int, partial: str | None = None) -> dict:
    import torch

    from argus.dsl.types import DTYPES
    from argus.interp.run import compare
    from argus.runtime.arrays import ArgumentError
    from argus.runtime.bench import L2_ROTATE_BYTES, gpu_description, time_interleaved

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    env = gpu_description()
    from argus.codegen.nvrtc import nvrtc_version

    env["nvrtc"] = ".".join(map(str, nvrtc_version()))
    print("ENV", json.dumps(env), flush=True)
    kernels = {}
    for v in variants:
        t0 = time.time()
        if v.entry:
            kernels[v.key] = _entry(v)
            print(f"[{v.key}] loaded (built per shape, as argus.load(...)(...) builds)", flush=True)
            continue
        gk = _load(v)
        res = gk.built.resources
        kernels[v.key] = gk
        for r in res.values():
            print(f"[{v.key}] built in {time.time() - t0:.1f}s: {r.summary()}, dynamic smem "
                  f"{gk.generated.smem_bytes} B", flush=True)
    out = {"env": env, "variants": {v.key: {"title": v.title, "file": v.file, "params": {**v.params, **v.codegen},
                                            "dtype": v.dtype,
                                            "resources": [] if v.entry else
                                            [r.summary() for r in kernels[v.key].built.resources.values()]}
                                    for v in variants}, "rows": []}
    bf16 = DTYPES["bf16"]
    sa, sb = FP8_SCALES

    def args_for(v: Variant, x, y, z) -> tuple:
        """A kernel's arguments from the layout's operands (x [M, K] and y [K, N], views where the layout
        stores them transposed): gemm_ws's entry variants take the views; a direct NT kernel (linear) and
        gemm_fp8 take W = y.T."""
        if v.entry and v.dtype == "bf16" or v.layout == "NN":
            return x, y, z
        return x, y.t(), z

    def kwargs_for(v: Variant) -> dict:
        return {"scale_a": sa, "scale_b": sb} if v.dtype == "e4m3" else {}

    def reference(dtype: str, x, y):
        ref = x.double() @ y.double()
        return (ref * (sa * sb) if dtype == "e4m3" else ref).cpu().numpy()

    # the baseline per (dtype, layout): cuBLAS through matmul on the same views (NT: matmul(A, W.T), TN:
    # matmul(X.T, B)); e4m3: torch._scaled_mm (cuBLASLt) as torch calls it by default, and with
    # use_fast_accum=True (no periodic promotion of the accumulator, as the wgmma accumulator here) beside it
    def base_name(g: tuple[str, str]) -> str:
        dt, lo = g
        if dt == "e4m3":
            return "scaled_mm"
        return "cublas" if lo == "NN" else f"cublas-{lo}"

    scale = {n: torch.tensor(f, device="cuda") for n, f in zip("ab", FP8_SCALES)}
    for M, N, K in shapes:
        picked = {}
        for v in variants:
            if v.auto and not v.entry:  # the params argus.load(...)(A, B, C) would pick for this shape
                kernels[v.key] = _load(v, {"M": M, "N": N, "K": K})
        # 8-bit rows: TMA needs 16-byte pitches (gemm_fp8's assume) and torch._scaled_mm dims divisible by 16
        skip = {"e4m3"} if K % 16 or N % 16 or M % 16 else set()
        groups = sorted({(v.dtype, v.layout) for v in variants if v.dtype not in skip})
        gen = torch.Generator(device="cuda")
        gen.manual_seed(M * 31 + N * 7 + K)
        ops = {g: operands(g[1], M, N, K, gen, g[0]) for g in groups}
        checks, refused = {}, {}
        for v in variants:
            if v.dtype in skip:
                refused[v.key] = "8-bit operands need M, N and K divisible by 16 (TMA pitches, torch._scaled_mm)"
                continue
            if kernels[v.key] is None:
                refused[v.key] = "a route to a layer (run by the entry variants)"
                continue
            x, y = ops[(v.dtype, v.layout)]
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                kernels[v.key](*args_for(v, x, y, c), **kwargs_for(v))
            except ArgumentError as e:  # the kernel's assume excludes this shape
                refused[v.key] = str(e).splitlines()[0]
                continue
            torch.cuda.synchronize()
            checks[v.key] = compare("C", c.float().cpu().numpy(), reference(v.dtype, x, y), bf16)
            if v.entry:
                from argus.runtime.arguments import bind_arguments, launch_facts

                k = kernels[v.key]
                target = k.specialized(launch_facts(k._lowered(), bind_arguments(k._lowered(), args_for(v, x, y, c),
                                                                                   kwargs_for(v))))
                picked[v.key] = {"kernel": target.name, **{n: val for n, val in target.params.items()
                                                           if n in ("BM", "BN", "BT", "BK", "CONSUMERS", "STAGES",
                                                                    "KCHUNK")}}
            del c

        def baseline(g: tuple[str, str], x, y, z, fast: bool = False):
            if g[0] == "e4m3":
                return lambda: torch._scaled_mm(x, y, scale_a=scale["a"], scale_b=scale["b"], out_dtype=torch.bfloat16,
                                                use_fast_accum=fast)
            return lambda: torch.matmul(x, y, out=z)

        cub = {}
        for g in groups:
            x, y = ops[g]
            got = (torch._scaled_mm(x, y, scale_a=scale["a"], scale_b=scale["b"], out_dtype=torch.bfloat16)
                   if g[0] == "e4m3" else torch.matmul(x, y))
            cub[g] = compare("C", got.float().cpu().numpy(), reference(g[0], x, y), bf16)
        del ops
        nsets = {}
        sets = {}
        for g in groups:
            set_bytes = (M * K + K * N) * (1 if g[0] == "e4m3" else 2) + M * N * 2
            nsets[g] = max(2, min(8, -(-L2_ROTATE_BYTES // set_bytes)))
            sets[g] = [(*operands(g[1], M, N, K, dtype=g[0]), torch.empty((M, N), device="cuda", dtype=torch.bfloat16))
                       for _ in range(nsets[g])]
        fns = {base_name(g): [baseline(g, x, y, z) for x, y, z in sets[g]] for g in groups}
        for g in groups:
            if g[0] == "e4m3":
                fns["scaled_mm-fast"] = [baseline(g, x, y, z, fast=True) for x, y, z in sets[g]]
        for v in variants:
            if v.key in checks and checks[v.key].ok:
                fns[v.key] = [kernels[v.key].prepare(*args_for(v, x, y, z), **kwargs_for(v))
                              for x, y, z in sets[(v.dtype, v.layout)]]
        times = time_interleaved(fns, iters)
        line = f"{M}x{N}x{K}: " + ", ".join(f"{n} {tflops(M, N, K, times[n].median_ms):6.1f} TF/s"
                                           for n in fns if n in times and not any(n == v.key for v in variants))
        line += " (rel err " + ", ".join(f"{base_name(g)} {c.rel_error:.2e}" for g, c in cub.items()) + ")"
        for v in variants:
            g = (v.dtype, v.layout)
            if g not in sets:
                out["rows"].append({"variant": v.key, "layout": v.layout, "dtype": v.dtype, "M": M, "N": N, "K": K,
                                    "ok": True, "refused": refused[v.key], "cublas_ms": None, "cublas_tflops": None})
                line += f" | {v.key} n/a ({refused[v.key]})"
                continue
            tc = times[base_name(g)].median_ms
            common = {"variant": v.key, "layout": v.layout, "dtype": v.dtype, "M": M, "N": N, "K": K,
                      "baseline": "torch._scaled_mm" if v.dtype == "e4m3" else "torch.matmul (cuBLAS)",
                      "cublas_ms": tc, "cublas_tflops": tflops(M, N, K, tc)}
            if v.dtype == "e4m3":
                tf = times["scaled_mm-fast"].median_ms
                common.update(fast_accum_ms=tf, fast_accum_tflops=tflops(M, N, K, tf))
            if v.key in refused:
                out["rows"].append({**common, "ok": True, "refused": refused[v.key]})
                line += f" | {v.key} n/a ({refused[v.key]})"
                continue
            chk = checks[v.key]
            row = {**common, "ok": chk.ok, "rel_error": chk.rel_error, "wrong": chk.bad, "nonfinite": chk.nonfinite,
                   "cublas_rel_error": cub[g].rel_error}
            if v.key in picked:
                row["picked"] = picked[v.key]
            elif v.auto:  # the tile params the specialization picked for this shape (and the kernel it routed to)
                kir = kernels[v.key].ir
                shown = ("BM", "BN", "BT", "BK", "CONSUMERS", "STAGES")
                row["picked"] = {n: val for n, val in kir.params if n in shown}
                if kir.name != _entry(v).name:  # a route to another kernel of the file
                    row["picked"] = {"kernel": kir.name, **row["picked"]}
            if v.key in times:
                t = times[v.key]
                row.update(ms=t.median_ms, ms_min=t.min_ms, ms_max=t.max_ms, tflops=tflops(M, N, K, t.median_ms),
                           ratio=tc / t.median_ms)
                if "fast_accum_ms" in row:
                    row["ratio_fast_accum"] = row["fast_accum_ms"] / t.median_ms
                line += f" | {v.key} {row['tflops']:6.1f} ({row['ratio']:.3f})"
            else:
                line += f" | {v.key} WRONG: {chk.describe()}"
            out["rows"].append(row)
        print(line, flush=True)
        if partial:  # every finished shape on disk, so a later failure loses nothing measured
            Path(partial).write_text(json.dumps(out, indent=1))
        del sets, fns
        torch.cuda.empty_cache()
    return out


def markdown(res: dict, iters: int) -> str:
    env = res["env"]
    sass = res.get("sass", {})
    lines = [
        "# GEMM: Argus vs cuBLAS",
        "",
        f"Measured {env.get('date')} on {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
        f"NVRTC {env.get('nvrtc')}; bf16 inputs (e4m3 for the fp8 variants), fp32 accumulation, bf16 output.",
        "",
        "Method (benchmarks/bench_gemm.py): per shape, fresh random inputs and NaN-poisoned outputs, each "
        "variant checked against the float64 product with the interpreter's criterion (relative Frobenius "
        "error <= 1e-2 and every element within 2^-6 (|ref| + rms)); then every variant and torch.matmul "
        f"(cuBLAS) timed interleaved in the same process, CUDA events around each launch, median of {iters}, "
        "input sets rotated over >= 256 MB so L2 never serves a repeat. Ratio = cuBLAS time / Argus time. "
        "NT variants (B stored [N, K]) are compared with matmul(A, W.T) on the same W, TN variants (A stored "
        "[K, M]) with matmul(X.T, B); the `ws-auto*` variants are `argus.load(\"examples/gemm_ws.arg\")(A, B, C)` "
        "as a user calls it, with B = W.t() (NT) or A = X.t() (TN) as views, routes and layers included (the "
        "kernel or layer it ran is shown per shape). Argus times include the "
        "padded copies of A and B, and of C when a TMA store writes it, when their rows are not 16-byte aligned "
        "(8205x5921x2949). fp8 variants: e4m3 A [M, K] and B stored [N, K] (NT: 8-bit wgmma reads both operands "
        f"K-major), scale_a = {FP8_SCALES[0]}, scale_b = {FP8_SCALES[1]}, against torch._scaled_mm on the same arrays "
        "as torch calls it (use_fast_accum=False; the ratio); the ratio to use_fast_accum=True is shown beside it.",
        "",
    ]
    for key, v in res["variants"].items():
        counts = ", ".join(f"{op} {n}" for op, n in sass.get(key, {}).items() if n)
        lines += [f"## {v['title']}", "", f"`{v['file']}` {v['params'] or ''}  ",
                  "ptxas: " + ("; ".join(v["resources"]) or "per shape (see bench_gemm's log)")
                  + ("  " if counts else ""), *([f"SASS: {counts}"] if counts else []),
                  "", f"| M x N x K | Argus TFLOP/s | {'_scaled_mm' if v.get('dtype') == 'e4m3' else 'cuBLAS'} TFLOP/s "
                  "| ratio | rel. error | correct |",
                  "|---|---:|---:|---:|---:|:---:|"]
        for r in res["rows"]:
            if r["variant"] != key:
                continue
            shape = f"{r['M']}x{r['N']}x{r['K']}"
            if "picked" in r:
                shape += " (" + " ".join(f"{n}={val}" for n, val in r["picked"].items()) + ")"
            if "refused" in r:
                base = "-" if r["cublas_tflops"] is None else f"{r['cublas_tflops']:.1f}"
                lines.append(f"| {shape} | n/a | {base} | - | - | {r['refused']} |")
            elif "tflops" in r:
                lines.append(f"| {shape} | {r['tflops']:.1f} | {r['cublas_tflops']:.1f} | **{r['ratio']:.3f}** | "
                             f"{r['rel_error']:.2e} | {'yes' if r['ok'] else 'NO'} |")
            else:
                lines.append(f"| {shape} | - | {r['cublas_tflops']:.1f} | - | {r['rel_error']:.2e} | NO |")
        lines.append("")
    best = {}
    for r in res["rows"]:
        if "ratio" in r:
            key = (r.get("dtype", "bf16"), r.get("layout", "NN"), r["M"], r["N"], r["K"])
            if key not in best or r["ratio"] > best[key]["ratio"]:
                best[key] = r
    if best:
        lines += ["## Best Argus variant per shape and layout", "",
                  "| dtype | layout | M x N x K | variant | Argus TFLOP/s | baseline TFLOP/s | ratio |",
                  "|---|---|---|---|---:|---:|---:|"]
        for (dt, lo, m, n, k), r in best.items():
            fast = (f" ({r['ratio_fast_accum']:.3f} of use_fast_accum=True)" if "ratio_fast_accum" in r else "")
            lines.append(f"| {dt} | {lo} | {m}x{n}x{k} | {r['variant']} | {r['tflops']:.1f} | "
                         f"{r['cublas_tflops']:.1f} | {r['ratio']:.3f}{fast} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(v.key for v in VARIANTS),
                    help="comma-separated keys; KEY[P=V;P=V] sets params on top of a variant (probes)")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    output_args(ap, "gemm", iters=30)
    args = ap.parse_args()
    if args.child_check:
        return child_check(args.child_check)
    keys = [k for k in args.variants.split(",") if k]
    variants = [variant(k) for k in keys]
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    if not args.no_child_check:  # all children at once: each is a few small launches
        variants = checked_variants(__file__, variants, timeout=150)
    if not variants:
        return 1
    res = run(variants, shapes, args.iters, partial=args.json)
    res["sass"] = sass_summary(variants)
    Path(args.json).write_text(json.dumps(res, indent=1))
    md = markdown(res, args.iters)
    write_markdown(args.md, "gemm", md)
    return 0 if all(r["ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
