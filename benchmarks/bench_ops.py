#!/usr/bin/env python3
"""The issue-15 example kernels against the torch ops they replace, side by side in one process.

    python3 benchmarks/bench_ops.py                          # every op and shape; writes benchmarks/RESULTS.md
    python3 benchmarks/bench_ops.py --ops softmax,rmsnorm --iters 10 --md -

Ops: softmax (whole rows; rows past 8192 columns through softmax_looped), rmsnorm,
layernorm, transpose, rope, gemm_bias_gelu (examples/gemm_epilogue.arg), bmm, linear (x @ W.T), gemm_fp8, moe_route,
decode attention (split-KV decode_split + decode_combine) and split-K GEMM (gemm_ws.arg's layer gemm_ws_splitk);
each against torch eager and, where it applies, torch.compile of the same torch code.

Per op and shape: fresh random inputs and NaN-poisoned outputs, one Argus run checked against a float64
reference computed on the GPU (argus.interp.run.compare, the interpreter's criterion; a wrong result is
reported and not timed); then Argus, torch eager and torch.compile are timed interleaved on the same
rotated input sets (CUDA events around each launch after a sleep kernel, median of --iters;
argus.runtime.bench.time_interleaved). Memory-bound ops report GB/s (the bytes the op must move: inputs
read once, outputs written once) beside the copy bandwidth measured in the same process (a large
device-to-device copy), compute-bound ones TFLOP/s. Ratio = torch time / Argus time (> 1: Argus faster).
Rows go to --json and the markdown section "ops" of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import output_args, write_markdown  # noqa: E402

EX = ROOT / "examples"


@dataclass
class Case:
    """One op at one shape: Argus and torch callables per rotated input set, and a correctness check."""

    shape: str
    argus: list[Callable[[], Any]]
    torch: list[Callable[[], Any]]
    check: Callable[[], Any]  # -> list of OutputCheck (fresh inputs, poisoned outputs)
    nbytes: float = 0.0  # memory-bound: bytes moved at least
    flops: float = 0.0  # compute-bound
    compiled: list[Callable[[], Any]] | None = None
    params: dict = field(default_factory=dict)
    # more torch paths for the same op, timed beside `torch` (decode: each SDPA backend that takes the shape,
    # flash_attn_with_kvcache where installed); the row's best-path ratio takes the fastest of all
    baselines: dict[str, list[Callable[[], Any]]] = field(default_factory=dict)


def kernel(file: str, name: str, dims: dict[str, int] | None = None, **params):
    """An example kernel built for this GPU (cached per file, name and params); with `dims`, the params
    its `specialize` statements pick for them, as `argus.load(...)(...)` would."""
    import argus

    k = argus.load(EX / file, name, **params)
    if dims is not None:
        k = k.specialized(dims)
    key = (file, name, tuple(sorted(k.params.items())))
    if key not in _KERNELS:
        from argus.codegen.compile import build
        from argus.codegen.nvrtc import detect_arch
        from argus.runtime.launch import GpuKernel

        _KERNELS[key] = GpuKernel(build(k.lower(), arch=detect_arch(0)), 0)
    return _KERNELS[key]


_KERNELS: dict = {}


def rotate(make: Callable[[], dict], set_bytes: float) -> list[dict]:
    """Input sets to rotate over so the L2 (50 MB on the H200) never serves a repeat."""
    from argus.runtime.bench import L2_ROTATE_BYTES

    return [make() for _ in range(max(2, min(8, -(-L2_ROTATE_BYTES // max(1, int(set_bytes))))))]


def compare(name: str, out, ref, dtype: str = "bf16"):
    from argus.dsl.types import DTYPES
    from argus.interp.run import compare as cmp

    return cmp(name, out.float().cpu().numpy(), ref.cpu().numpy(), DTYPES[dtype])


def compiled(fn: Callable) -> Callable:
    import torch

    return torch.compile(fn, dynamic=False)


def nan(shape, dtype=None):
    import torch

    return torch.full(shape, float("nan"), device="cuda", dtype=dtype or torch.bfloat16)


def randn(*shape, dtype=None, scale: float = 1.0):
    import torch

    return (torch.randn(*shape, device="cuda") * scale).to(dtype or torch.bfloat16)


# ---- memory-bound ops --------------------------------------------------------------------------------


def _row_params(n: int, which: str) -> dict:
    """Whole rows in one block, BN the row rounded up to a power of two, with every block an SM holds at
    full occupancy promised to ptxas (launch blocks_per_sm=OCC caps the registers): the loads in flight
    per SM are what these kernels are bound by. Softmax takes two 16-byte vectors a thread, RMSNorm and
    LayerNorm (which also hold W, B) one (H200 2026-12-04 10:20-10:32 UTC,
    benchmarks/probes/results/ops_occupancy_2026-12-04.md: softmax 1024 / 2048 / 4096 / 8192 columns 81 / 79 /
    77 / 70% of copy against 75 / 71 / 65 / 53% without OCC; LayerNorm 1024 / 4096 columns 74 / 67% against 71 / 58%;
    RMSNorm 1024 83% either way)."""
    bn = 1 << (n - 1).bit_length()
    per = 16 if which == "softmax" else 8
    threads = max(32, min(1024, bn // per))
    return {"BN": bn, "THREADS": threads, "OCC": max(1, min(32, 2048 // threads))}


LOOPED_FROM = 4096  # RMSNorm rows from here: two passes over column steps (rmsnorm_looped)


def _looped_params(n: int) -> dict:
    """rmsnorm_looped's steps: 1024 columns on 128 threads up to 4096 columns, then 2048 on 256 (H200
    2026-12-03 08:22 UTC, benchmarks/probes/results/ops_looped_variants_2026-12-03.md: 16384x4096 81% of
    copy vs 66% for the whole row in registers, 8192x8192 79% vs 69%)."""
    bn = 1 << (n - 1).bit_length()
    return {"BN": bn, "BC": 1024, "THREADS": 128} if bn <= 4096 else {"BN": bn, "BC": 2048, "THREADS": 256}


LONG_SOFTMAX = 8192  # past this: softmax_looped (two passes over column steps, the second from L2)


def _softmax_looped_params() -> dict:
    """softmax_looped's steps: 4096 columns on 512 threads, 4 blocks per SM promised (H200 2026-12-04 10:29 UTC,
    benchmarks/probes/results/ops_occupancy_2026-12-04.md: 1024x32768 57% of copy against 45% for the whole row
    in one block's registers and 35% for softmax_stats + softmax_normalize; at 8192 columns 69% against 70%
    for the whole row, which stays there)."""
    return {"BC": 4096, "THREADS": 512, "OCC": 4}


# The TMA-ring kernels (rmsnorm_tma, layernorm_tma) for rows of these lengths: H100 2026-12-07 06:28 UTC,
# benchmarks/probes/results/ops_tma_2026-12-07.md: RMSNorm 16384x4096 89% of copy against 74% for
# rmsnorm_looped, 8192x8192 89% (tie); LayerNorm 8192x8192 85% against 75% for layernorm_looped. At 1024
# columns the whole-row kernels stayed ahead (RMSNorm 90% vs 86%, LayerNorm 92% vs 82%, softmax 93% vs 82%:
# softmax keeps its whole-row kernel everywhere), and rows past 8192 were not measured.
TMA_RANGE = {"rmsnorm": (4096, 8192), "layernorm": (8192, 8192)}


def _tma_params(n: int) -> dict:
    """32 elements of a stage per consumer thread on two consumer warpgroups, a ring of about 192 KB: the
    best of ops_variants.py --tma at every measured shape."""
    bn = -(-n // 8) * 8
    br = max(1, 8192 // bn)
    return {"BR": br, "BN": bn, "CONSUMERS": 2, "STAGES": min(192 * 1024 // (br * bn * 2), 32)}


def kernel_choice(op: str, n: int) -> tuple[str, dict]:
    """The kernel of `op`'s example file (softmax, rmsnorm, layernorm) and its params for rows of n columns."""
    if op == "softmax":
        return ("softmax_looped", _softmax_looped_params()) if n > LONG_SOFTMAX else ("softmax", _row_params(n, op))
    if op in TMA_RANGE and TMA_RANGE[op][0] <= n <= TMA_RANGE[op][1] and n % 8 == 0:
        return f"{op}_tma", _tma_params(n)
    if op == "rmsnorm" and n >= LOOPED_FROM:
        return "rmsnorm_looped", _looped_params(n)
    if op == "layernorm" and n > LAYERNORM_LOOPED_FROM:
        return "layernorm_looped", _layernorm_looped_params(n)
    return op, _row_params(n, op)


def softmax_case(m: int, n: int) -> Case:
    import torch

    name, params = kernel_choice("softmax", n)
    k = kernel("softmax.arg", name, **params)

    def run(s):
        return k.prepare(X=s["X"], Y=s["Y"])

    def make():
        return {"X": randn(m, n), "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    def check():
        s = make()
        s["Y"].fill_(float("nan"))
        run(s)()
        torch.cuda.synchronize()
        return [compare("Y", s["Y"], torch.softmax(s["X"].double(), dim=1))]

    sets = rotate(make, 4 * m * n)
    fn = compiled(lambda x: torch.softmax(x, dim=-1))
    return Case(f"{m}x{n}", [run(s) for s in sets], [lambda s=s: torch.softmax(s["X"], dim=-1) for s in sets],
                check, nbytes=4.0 * m * n, compiled=[lambda s=s: fn(s["X"]) for s in sets], params=params)


LAYERNORM_LOOPED_FROM = 4096  # LayerNorm rows longer than this: layernorm_looped


def _layernorm_looped_params(n: int) -> dict:
    """layernorm_looped with 8 blocks of 256 threads promised per SM (registers capped at 32): H200 2026-12-03
    12:24 UTC, benchmarks/probes/results/ops_layernorm_occ_2026-12-03.md: 8192x8192 60% of copy against 50% at
    the code generator's occupancy (63 registers) and 52% for torch eager. At 4096 columns the looped kernel
    was no better than the whole row (48% against 59% at 11:47), so it stays whole-row there."""
    return {"BN": 1 << (n - 1).bit_length(), "BC": 1024, "THREADS": 256, "OCC": 8}


def norm_case(which: str, m: int, n: int) -> Case:
    import torch
    import torch.nn.functional as F

    name, params = kernel_choice(which, n)
    k = kernel(f"{which}.arg", name, **params)
    eps = 1e-6 if which == "rmsnorm" else 1e-5

    def make():
        s = {"X": randn(m, n), "W": randn(n), "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}
        if which == "layernorm":
            s["B"] = randn(n)
        return s

    def run(s):
        return k.prepare(**s)

    def torch_fn(x, w, b=None):
        if which == "rmsnorm":
            return F.rms_norm(x, (n,), w, eps)
        return F.layer_norm(x, (n,), w, b, eps)

    def check():
        s = make()
        s["Y"].fill_(float("nan"))
        run(s)()
        torch.cuda.synchronize()
        x = s["X"].double()
        if which == "rmsnorm":
            ref = x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + eps) * s["W"].double()
        else:
            mu = x.mean(dim=1, keepdim=True)
            ref = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(dim=1, keepdim=True) + eps) * s["W"].double() \
                + s["B"].double()
        return [compare("Y", s["Y"], ref)]

    sets = rotate(make, 4 * m * n)
    fn = compiled(torch_fn)
    args = (lambda s: (s["X"], s["W"], s["B"])) if which == "layernorm" else (lambda s: (s["X"], s["W"]))
    return Case(f"{m}x{n}", [run(s) for s in sets], [lambda s=s: torch_fn(*args(s)) for s in sets], check,
                nbytes=4.0 * m * n, compiled=[lambda s=s: fn(*args(s)) for s in sets], params=params)


def transpose_case(m: int, n: int) -> Case:
    import torch

    k = kernel("transpose.arg", "transpose")

    def make():
        return {"X": randn(m, n), "Y": torch.empty(n, m, device="cuda", dtype=torch.bfloat16)}

    def check():
        s = make()
        s["Y"].fill_(float("nan"))
        k(**s)
        torch.cuda.synchronize()
        return [compare("Y", s["Y"], s["X"].double().t())]

    sets = rotate(make, 4 * m * n)
    fn = compiled(lambda x: x.t().contiguous())
    return Case(f"{m}x{n}", [k.prepare(**s) for s in sets], [lambda s=s: s["X"].t().contiguous() for s in sets],
                check, nbytes=4.0 * m * n, compiled=[lambda s=s: fn(s["X"]) for s in sets])


def rope_case(b: int, s_: int, h: int, d: int) -> Case:
    import torch

    k = kernel("rope.arg", "rope", HD=d)
    d2 = d // 2

    def make():
        theta = torch.arange(s_, device="cuda", dtype=torch.float32)[:, None] * \
            (10000.0 ** (-torch.arange(d2, device="cuda", dtype=torch.float32) / d2))[None, :]
        return {"X": randn(b, s_, h, d), "COS": torch.cos(theta), "SIN": torch.sin(theta),
                "Y": torch.empty(b, s_, h, d, device="cuda", dtype=torch.bfloat16)}

    def torch_rope(x, c, sn):
        x1, x2 = x[..., :d2].float(), x[..., d2:].float()
        c, sn = c[None, :, None, :], sn[None, :, None, :]
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1).to(torch.bfloat16)

    def check():
        st = make()
        st["Y"].fill_(float("nan"))
        k(**st)
        torch.cuda.synchronize()
        x = st["X"].double()
        c, sn = st["COS"].double()[None, :, None, :], st["SIN"].double()[None, :, None, :]
        ref = torch.cat((x[..., :d2] * c - x[..., d2:] * sn, x[..., d2:] * c + x[..., :d2] * sn), dim=-1)
        return [compare("Y", st["Y"], ref)]

    sets = rotate(make, 4 * b * s_ * h * d)
    fn = compiled(torch_rope)
    return Case(f"B{b} S{s_} H{h} D{d}", [k.prepare(**st) for st in sets],
                [lambda st=st: torch_rope(st["X"], st["COS"], st["SIN"]) for st in sets], check,
                nbytes=4.0 * b * s_ * h * d + 8.0 * s_ * d2,
                compiled=[lambda st=st: fn(st["X"], st["COS"], st["SIN"]) for st in sets])


# ---- compute-bound ops -------------------------------------------------------------------------------


def gemm_bias_gelu_case(m: int, n: int, k_: int) -> Case:
    import torch
    import torch.nn.functional as F

    k = kernel("gemm_epilogue.arg", "gemm_bias_act")

    def make():
        return {"A": randn(m, k_, scale=0.05), "B": randn(k_, n, scale=0.05), "Bias": randn(n),
                "C": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    def torch_fn(a, b, bias):
        return F.gelu(torch.addmm(bias, a, b))

    def check():
        s = make()
        s["C"].fill_(float("nan"))
        k(**s)
        torch.cuda.synchronize()
        ref = F.gelu(s["A"].double() @ s["B"].double() + s["Bias"].double())
        return [compare("C", s["C"], ref)]

    sets = rotate(make, 2.0 * (m * k_ + k_ * n + m * n))
    fn = compiled(torch_fn)
    return Case(f"{m}x{n}x{k_}", [k.prepare(**s) for s in sets],
                [lambda s=s: torch_fn(s["A"], s["B"], s["Bias"]) for s in sets], check, flops=2.0 * m * n * k_,
                compiled=[lambda s=s: fn(s["A"], s["B"], s["Bias"]) for s in sets])


def linear_epilogue_case(which: str, m: int, n: int, k_: int) -> Case:
    """gemm_epilogue.arg's linear epilogues (W stored [N, K]) against torch's F.linear and the op after it:
    gelu(F.linear(x, W, b)); F.linear(x, W, b) + r; F.linear in fp32 out (torch: the bf16 result cast)."""
    import torch
    import torch.nn.functional as F

    name, params = {"gelu": ("linear_bias_act", {"ACT": "gelu"}), "residual": ("linear_bias_residual", {}),
                    "f32": ("linear_bias_f32", {})}[which]
    k = kernel("gemm_epilogue.arg", name, {"M": m, "N": n, "K": k_}, **params)
    out_dtype = torch.float32 if which == "f32" else torch.bfloat16

    def make():
        s = {"X": randn(m, k_, scale=0.05), "W": randn(n, k_, scale=0.05), "Bias": randn(n),
             "Y": torch.empty(m, n, device="cuda", dtype=out_dtype)}
        if which == "residual":
            s["R"] = randn(m, n)
        return s

    def torch_fn(s):
        y = F.linear(s["X"], s["W"], s["Bias"])
        if which == "gelu":
            return F.gelu(y)
        if which == "residual":
            return y + s["R"]
        return y.float()

    def check():
        s = make()
        s["Y"].fill_(float("nan"))
        k(**s)
        torch.cuda.synchronize()
        ref = s["X"].double() @ s["W"].double().t() + s["Bias"].double()
        ref = F.gelu(ref) if which == "gelu" else (ref + s["R"].double() if which == "residual" else ref)
        return [compare("Y", s["Y"], ref, "f32" if which == "f32" else "bf16")]

    sets = rotate(make, 2.0 * (m * k_ + k_ * n + 2 * m * n))
    return Case(f"{m}x{n}x{k_}", [k.prepare(**s) for s in sets], [lambda s=s: torch_fn(s) for s in sets], check,
                flops=2.0 * m * n * k_, params={"kernel": name, **params})


def bmm_case(batch: int, m: int, n: int, k_: int) -> Case:
    import torch

    k = kernel("bmm.arg", "bmm")

    def make():
        return {"A": randn(batch, m, k_), "B": randn(batch, k_, n),
                "C": torch.empty(batch, m, n, device="cuda", dtype=torch.bfloat16)}

    def check():
        s = make()
        s["C"].fill_(float("nan"))
        k(**s)
        torch.cuda.synchronize()
        return [compare("C", s["C"], torch.bmm(s["A"].double(), s["B"].double()))]

    sets = rotate(make, 2.0 * batch * (m * k_ + k_ * n + m * n))
    return Case(f"{batch}x{m}x{n}x{k_}", [k.prepare(**s) for s in sets],
                [lambda s=s: torch.bmm(s["A"], s["B"], out=s["C"]) for s in sets], check,
                flops=2.0 * batch * m * n * k_)


def linear_case(m: int, n: int, k_: int) -> Case:
    import torch
    import torch.nn.functional as F

    k = kernel("gemm_ws.arg", "linear", {"M": m, "N": n, "K": k_})

    def make():
        return {"X": randn(m, k_), "W": randn(n, k_), "Y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    def check():
        s = make()
        s["Y"].fill_(float("nan"))
        k(**s)
        torch.cuda.synchronize()
        return [compare("Y", s["Y"], s["X"].double() @ s["W"].double().t())]

    sets = rotate(make, 2.0 * (m * k_ + k_ * n + m * n))
    return Case(f"{m}x{n}x{k_}", [k.prepare(**s) for s in sets], [lambda s=s: F.linear(s["X"], s["W"]) for s in sets],
                check, flops=2.0 * m * n * k_)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def fp8_gemm_case(m: int, n: int, k_: int) -> Case:
    """e4m3 A [M, K] and B [N, K] with per-tensor scales, bf16 out, vs torch._scaled_mm (cuBLASLt)."""
    import torch

    k = kernel("gemm_fp8.arg", "gemm_fp8")
    sa, sb = 0.5, 0.25

    def make():
        return {"A": randn(m, k_, dtype=torch.float8_e4m3fn), "B": randn(n, k_, dtype=torch.float8_e4m3fn),
                "C": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    one = {"a": torch.tensor(sa, device="cuda"), "b": torch.tensor(sb, device="cuda")}

    def scaled_mm(s):
        return torch._scaled_mm(s["A"], s["B"].t(), scale_a=one["a"], scale_b=one["b"], out_dtype=torch.bfloat16)

    def check():
        s = make()
        s["C"].fill_(float("nan"))
        k(**s, scale_a=sa, scale_b=sb)
        torch.cuda.synchronize()
        return [compare("C", s["C"], (s["A"].double() @ s["B"].double().t()) * (sa * sb))]

    sets = rotate(make, m * k_ + k_ * n + 2.0 * m * n)
    return Case(f"{m}x{n}x{k_}", [k.prepare(**s, scale_a=sa, scale_b=sb) for s in sets],
                [lambda s=s: scaled_mm(s) for s in sets], check, flops=2.0 * m * n * k_)


def moe_route_case(t: int, e: int, k_: int) -> Case:
    """Top-k experts and their softmax weights per token, vs torch.topk + softmax."""
    import torch

    kern = kernel("moe_route.arg", "moe_route", K=k_, BE=max(32, 1 << (e - 1).bit_length()))

    def make():
        return {"logits": torch.randn(t, e, device="cuda"),
                "topk_ids": torch.empty(t, k_, device="cuda", dtype=torch.int32),
                "topk_w": torch.empty(t, k_, device="cuda")}

    def torch_route(x):
        v, i = torch.topk(x, k_, dim=1)
        return i, torch.softmax(v, dim=1)

    def check():
        from argus.dsl.types import DTYPES
        from argus.interp.run import compare as cmp

        s = make()
        s["topk_ids"].fill_(-1)
        s["topk_w"].fill_(float("nan"))
        kern(**s)
        torch.cuda.synchronize()
        v, _ = torch.topk(s["logits"].double(), k_, dim=1)
        ids = s["topk_ids"].long()
        # equal logits make several id orders right (torch.topk's among ties is unspecified): the ids must
        # be distinct, in range, and select exactly the top-k values in order
        distinct = bool(((ids >= 0) & (ids < e)).all()) and bool((ids.sort(dim=1).values.diff(dim=1) > 0).all())
        picked = torch.gather(s["logits"].double(), 1, ids.clamp(0, e - 1)) if distinct else v * float("nan")
        # i32's per-element bound is 0: the selected logits must equal the top-k exactly
        return [cmp("logits[topk_ids]", picked.cpu().numpy(), v.cpu().numpy(), DTYPES["i32"]),
                compare("topk_w", s["topk_w"], torch.softmax(v, dim=1), "f32")]

    sets = rotate(make, 4.0 * t * e)
    fn = compiled(torch_route)
    return Case(f"T{t} E{e} k{k_}", [kern.prepare(**s) for s in sets],
                [lambda s=s: torch_route(s["logits"]) for s in sets], check, nbytes=4.0 * t * e + 8.0 * t * k_,
                compiled=[lambda s=s: fn(s["logits"]) for s in sets])


def sdpa_paths(sets: list[dict], call: Callable[[dict], Any]) -> dict[str, list[Callable[[], Any]]]:
    """`call` (an SDPA call on one input set) pinned to each backend that takes it (tried once on the first
    set: a backend that refuses the shape, mask or GQA raises), for timing beside torch's own choice."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        def pinned(s, be=be):
            with sdpa_kernel(be):
                return call(s)
        try:
            pinned(sets[0])
            torch.cuda.synchronize()
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        out[name] = [lambda s=s, f=pinned: f(s) for s in sets]
    return out


def kvcache_path(sets: list[dict], nq: int) -> dict[str, list[Callable[[], Any]]]:
    """flash_attn_with_kvcache (the flash-attn package) on [B, NQ, H, D] queries over [B, S, HKV, D] caches,
    causal (lower right) among the NQ new queries, where the package is installed; else nothing. The caches
    are copied to its layout once per set, outside the timing."""
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return {}
    fns = []
    for s in sets:
        q = s["q"] if "q" in s else s["Q"][:, :, None, :]
        qb, kc, vc = q.transpose(1, 2).contiguous(), s["K"].transpose(1, 2).contiguous(), \
            s["V"].transpose(1, 2).contiguous()
        fns.append(lambda qb=qb, kc=kc, vc=vc: flash_attn_with_kvcache(qb, kc, vc, causal=nq > 1))
    return {"flash_attn_with_kvcache": fns}


def decode_case(b: int, h: int, hkv: int, skv: int, d: int = 128, blocks: int = 0, sdpa_backend=None,
                split_kernel: str = "decode_split_ws", **params) -> Case:
    """Split-KV decode (one query per head) vs torch SDPA; the splits give about `blocks` blocks (264: two
    per SM; 0: at most one per SM). `params` go to the split kernel (STAGES, BKV); `sdpa_backend` pins torch's
    (None: its choice)."""
    import torch
    import torch.nn.functional as F

    group = h // hkv
    if split_kernel == "decode_split_ws" and not params:
        # measured on the H200 2026-12-06 (benchmarks/probes/results/decode_sweep_2026-12-06.log): 128-key blocks
        # in a 3-stage ring, at most one block per SM, were the best or within 2% of it at the three shapes
        params = {"BKV": 128, "STAGES": 3}
    bkv = int(params.get("BKV", 64))
    if blocks <= 0:  # one wave: the most splits that keep the grid within the multiprocessors
        blocks = max(b * hkv, torch.cuda.get_device_properties(0).multi_processor_count // (b * hkv) * b * hkv)
    ns = max(1, -(-blocks // (b * hkv)))
    chunk = max(bkv, _ceil(_ceil(skv, ns), bkv) * bkv)
    ns = -(-skv // chunk)
    split = kernel("decode_attention.arg", split_kernel, GROUP=group, CHUNK=chunk, HD=d, **params)
    comb = kernel("decode_attention.arg", "decode_combine", HD=d, BS=max(32, 1 << (ns - 1).bit_length()))

    def make():
        return {"Q": randn(b, h, d), "K": randn(b, hkv, skv, d), "V": randn(b, hkv, skv, d),
                "OP": torch.empty(b, h, ns, d, device="cuda"), "LP": torch.empty(b, h, ns, device="cuda"),
                "O": torch.empty(b, h, d, device="cuda", dtype=torch.bfloat16)}

    def run(s):
        a = split.prepare(Q=s["Q"], K=s["K"], V=s["V"], OP=s["OP"], LP=s["LP"])
        c = comb.prepare(OP=s["OP"], LP=s["LP"], O=s["O"])
        return lambda: (a(), c())

    def sdpa(s):
        if sdpa_backend is None:
            return F.scaled_dot_product_attention(s["Q"][:, :, None, :], s["K"], s["V"], enable_gqa=True)
        with torch.nn.attention.sdpa_kernel(sdpa_backend):
            return F.scaled_dot_product_attention(s["Q"][:, :, None, :], s["K"], s["V"], enable_gqa=True)

    def check():
        s = make()
        s["O"].fill_(float("nan"))
        run(s)()
        torch.cuda.synchronize()
        kr = s["K"].double().repeat_interleave(group, dim=1)
        vr = s["V"].double().repeat_interleave(group, dim=1)
        p = torch.softmax(torch.einsum("bhd,bhkd->bhk", s["Q"].double(), kr) / d ** 0.5, dim=-1)
        return [compare("O", s["O"], torch.einsum("bhk,bhkd->bhd", p, vr))]

    sets = rotate(make, 4.0 * b * hkv * skv * d)

    def call(s):
        return F.scaled_dot_product_attention(s["Q"][:, :, None, :], s["K"], s["V"], enable_gqa=True)
    return Case(f"B{b} H{h} HKV{hkv} S{skv}", [run(s) for s in sets], [lambda s=s: sdpa(s) for s in sets], check,
                nbytes=4.0 * b * hkv * skv * d + 4.0 * b * h * d,
                params={"kernel": split_kernel, "CHUNK": chunk, "NS": ns, **params},
                baselines={**sdpa_paths(sets, call), **kvcache_path(sets, 1)} if sdpa_backend is None else {})


def spec_case(b: int, h: int, hkv: int, skv: int, nq: int = 16, d: int = 128) -> Case:
    """Speculative decode: NQ new queries per sequence at the cache's last NQ positions, causal among them
    (decode_spec_ws + decode_combine) vs SDPA on q[B, H, NQ, D] with a lower-right causal mask (torch's
    causal_lower_right bias; an explicit boolean mask where a backend refuses it). Q enters as head-major rows
    [B, H * NQ, D]: the transpose from torch's [B, NQ, H, D] is not timed (a caller keeps that layout)."""
    import torch
    import torch.nn.functional as F

    group = h // hkv
    params = {"BKV": 128, "STAGES": 3}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ns = max(1, sms // (b * hkv))
    chunk = max(128, _ceil(_ceil(skv, ns), 128) * 128)
    ns = -(-skv // chunk)
    split = kernel("decode_attention.arg", "decode_spec_ws", GROUP=group, NQ=nq, CHUNK=chunk, HD=d, **params)
    comb = kernel("decode_attention.arg", "decode_combine", HD=d, BS=max(32, 1 << (ns - 1).bit_length()))
    qpos = skv - nq + torch.arange(nq, device="cuda")
    keep = torch.arange(skv, device="cuda")[None, :] <= qpos[:, None]  # [NQ, SKV]
    try:
        from torch.nn.attention.bias import causal_lower_right
        bias = causal_lower_right(nq, skv)
    except ImportError:
        bias = None

    def make():
        q = randn(b, h, nq, d)
        return {"q": q, "Q": q.reshape(b, h * nq, d), "K": randn(b, hkv, skv, d), "V": randn(b, hkv, skv, d),
                "OP": torch.empty(b, h * nq, ns, d, device="cuda"), "LP": torch.empty(b, h * nq, ns, device="cuda"),
                "O": torch.empty(b, h * nq, d, device="cuda", dtype=torch.bfloat16)}

    def run(s):
        a = split.prepare(Q=s["Q"], K=s["K"], V=s["V"], OP=s["OP"], LP=s["LP"])
        c = comb.prepare(OP=s["OP"], LP=s["LP"], O=s["O"])
        return lambda: (a(), c())

    def sdpa_with(mask):
        return lambda s: F.scaled_dot_product_attention(s["q"], s["K"], s["V"], attn_mask=mask, enable_gqa=True)

    probe = make()
    sdpa = sdpa_with(keep)
    if bias is not None:
        try:
            sdpa_with(bias)(probe)
            sdpa = sdpa_with(bias)
        except (RuntimeError, TypeError, NotImplementedError):
            pass

    def check():
        s = make()
        s["O"].fill_(float("nan"))
        run(s)()
        torch.cuda.synchronize()
        kr = s["K"].double().repeat_interleave(group, dim=1)
        vr = s["V"].double().repeat_interleave(group, dim=1)
        sc = torch.einsum("bhqd,bhkd->bhqk", s["q"].double(), kr) / d ** 0.5
        p = torch.softmax(sc.masked_fill(~keep, float("-inf")), dim=-1)
        ref = torch.einsum("bhqk,bhkd->bhqd", p, vr).reshape(b, h * nq, d)
        return [compare("O", s["O"], ref)]

    sets = rotate(make, 4.0 * b * hkv * skv * d)
    return Case(f"B{b} H{h} HKV{hkv} S{skv} NQ{nq}", [run(s) for s in sets], [lambda s=s: sdpa(s) for s in sets],
                check, nbytes=4.0 * b * hkv * skv * d + 4.0 * b * h * nq * d,
                params={"kernel": "decode_spec_ws", "CHUNK": chunk, "NS": ns, "NQ": nq, **params},
                baselines={**sdpa_paths(sets, sdpa), **kvcache_path(sets, nq)})


def splitk_case(m: int, n: int, k_: int) -> Case:
    import torch

    tiles = -(-m // 128) * -(-n // 128)
    splits = max(1, 264 // tiles)
    chunk = _ceil(_ceil(k_, splits), 64) * 64
    splits = -(-k_ // chunk)
    import argus

    layer = argus.load(EX / "gemm_ws.arg", "gemm_ws_splitk", KCHUNK=chunk)  # gemm_splitk + splitk_reduce

    def make():
        return {"A": randn(m, k_, scale=0.05), "B": randn(k_, n, scale=0.05),
                "C": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}

    def run(s):
        return layer.prepare(s["A"], s["B"], s["C"])  # its fp32 workspace allocated once here

    def check():
        s = make()
        s["C"].fill_(float("nan"))
        run(s)()
        torch.cuda.synchronize()
        return [compare("C", s["C"], s["A"].double() @ s["B"].double())]

    sets = rotate(make, 2.0 * (m * k_ + k_ * n))
    return Case(f"{m}x{n}x{k_}", [run(s) for s in sets], [lambda s=s: torch.matmul(s["A"], s["B"]) for s in sets],
                check, flops=2.0 * m * n * k_, params={"KCHUNK": chunk, "SPLITS": splits})


OPS: dict[str, tuple[str, Callable[..., Case], list[tuple]]] = {
    "softmax": ("softmax (examples/softmax.arg) vs torch.softmax", softmax_case,
                [(32768, 1024), (16384, 2048), (8192, 4096), (4096, 8192), (1024, 32768)]),
    "rmsnorm": ("RMSNorm (examples/rmsnorm.arg) vs F.rms_norm", lambda m, n: norm_case("rmsnorm", m, n),
                [(32768, 1024), (16384, 4096), (8192, 8192)]),
    "layernorm": ("LayerNorm (examples/layernorm.arg) vs F.layer_norm", lambda m, n: norm_case("layernorm", m, n),
                  [(32768, 1024), (16384, 4096), (8192, 8192)]),
    "transpose": ("transpose (examples/transpose.arg) vs x.t().contiguous()", transpose_case,
                  [(8192, 8192), (4096, 16384), (16384, 1024)]),
    "rope": ("RoPE (examples/rope.arg) vs torch rotate-half", rope_case,
             [(8, 4096, 32, 128), (1, 32768, 32, 128), (16, 2048, 8, 64)]),
    "gemm_bias_gelu": ("GEMM + bias + GELU (examples/gemm_epilogue.arg) vs gelu(addmm)", gemm_bias_gelu_case,
                       [(4096, 4096, 4096), (8192, 8192, 4096), (2048, 14336, 4096)]),
    "linear_gelu": ("gelu(x @ W.T + b) (linear_bias_act of examples/gemm_epilogue.arg) vs gelu(F.linear)",
                    lambda m, n, k: linear_epilogue_case("gelu", m, n, k),
                    [(8192, 14336, 4096), (4096, 4096, 4096), (128, 4096, 4096)]),
    "linear_residual": ("x @ W.T + b + r (linear_bias_residual of examples/gemm_epilogue.arg) vs F.linear + r",
                        lambda m, n, k: linear_epilogue_case("residual", m, n, k),
                        [(8192, 4096, 14336), (4096, 4096, 4096), (128, 4096, 4096)]),
    "linear_f32": ("x @ W.T + b in fp32 (linear_bias_f32 of examples/gemm_epilogue.arg) vs F.linear(...).float()",
                   lambda m, n, k: linear_epilogue_case("f32", m, n, k),
                   [(8192, 4096, 4096), (4096, 32000, 4096)]),
    "bmm": ("batched GEMM (examples/bmm.arg) vs torch.bmm", bmm_case,
            [(16, 2048, 2048, 2048), (64, 1024, 1024, 1024), (8, 4096, 4096, 1024)]),
    "linear": ("x @ W.T (linear of examples/gemm_ws.arg) vs F.linear", linear_case,
               [(4096, 4096, 4096), (8192, 14336, 4096), (16, 8192, 8192)]),
    "gemm_fp8": ("FP8 GEMM (examples/gemm_fp8.arg) vs torch._scaled_mm", fp8_gemm_case,
                 [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096)]),
    "moe_route": ("MoE routing top-k + softmax (examples/moe_route.arg) vs torch.topk + softmax", moe_route_case,
                  [(4096, 8, 2), (4096, 256, 8), (16384, 128, 8)]),
    "decode": ("split-KV decode attention (examples/decode_attention.arg) vs SDPA", decode_case,
               [(8, 32, 8, 8192), (1, 64, 8, 32768), (32, 32, 8, 2048)]),
    "decode_spec": ("speculative decode, 16 new queries per sequence (decode_spec_ws of examples/decode_attention.arg) "
                    "vs SDPA with a lower-right causal mask", spec_case,
                    [(8, 32, 8, 8192), (1, 64, 8, 32768), (32, 32, 8, 2048)]),
    "splitk": ("split-K GEMM (layer gemm_ws_splitk of examples/gemm_ws.arg) vs torch.matmul", splitk_case,
               [(256, 256, 524288), (512, 512, 131072), (1024, 1024, 65536)]),
}


def copy_bandwidth(iters: int) -> float:
    """GB/s of a 1 GiB device-to-device copy (read + write), timed like the ops."""
    import torch

    from argus.runtime.bench import time_interleaved

    src = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    t = time_interleaved({"copy": [lambda: dst.copy_(src)]}, iters)["copy"]
    return 2.0 * src.numel() * 2 / t.median_ms / 1e6


def run(ops: list[str], iters: int, use_compile: bool, table: dict | None = None) -> dict:
    """Every shape of each op of `table` (default OPS) checked, then timed beside its torch paths."""
    import torch

    from argus.codegen.nvrtc import nvrtc_version
    from argus.runtime.bench import gpu_description, time_interleaved

    env = gpu_description()
    env["nvrtc"] = ".".join(map(str, nvrtc_version()))
    print("ENV", json.dumps(env), flush=True)
    copy = copy_bandwidth(iters)
    print(f"copy bandwidth {copy:.0f} GB/s", flush=True)
    out = {"env": env, "copy_gbs": copy, "rows": []}
    for op in ops:
        title, make, shapes = (table or OPS)[op]
        for shape in shapes:
            t0 = time.time()
            try:
                case = make(*shape)
                checks = case.check()
            except Exception as e:  # a build or launch failure is a row, not the end of the run
                print(f"[{op}] {shape}: FAILED {type(e).__name__}: {e}", flush=True)
                out["rows"].append({"op": op, "shape": "x".join(map(str, shape)), "ok": False, "error": str(e)})
                continue
            ok = all(c.ok for c in checks)
            row = {"op": op, "title": title, "shape": case.shape, "ok": ok, "params": case.params,
                   "checks": [c.describe() for c in checks]}
            if ok:
                fns = {"argus": case.argus, "eager": case.torch}
                if use_compile and case.compiled is not None:
                    fns["compile"] = case.compiled
                fns.update(case.baselines)
                times = time_interleaved(fns, iters)
                for name, t in times.items():
                    row[f"{name}_ms"] = t.median_ms
                    if case.nbytes:
                        row[f"{name}_gbs"] = case.nbytes / t.median_ms / 1e6
                    if case.flops:
                        row[f"{name}_tflops"] = case.flops / t.median_ms / 1e9
                row["ratio_eager"] = times["eager"].median_ms / times["argus"].median_ms
                if case.baselines:  # the fastest torch path: torch's own choice or a pinned one
                    best = min(["eager", *case.baselines], key=lambda n: times[n].median_ms)
                    row["best_torch"] = best
                    row["ratio_best"] = times[best].median_ms / times["argus"].median_ms
                if "compile" in times:
                    row["ratio_compile"] = times["compile"].median_ms / times["argus"].median_ms
                if case.nbytes:
                    row["of_copy"] = row["argus_gbs"] / copy
            out["rows"].append(row)
            rate = (f"{row.get('argus_gbs', 0):.0f} GB/s ({row.get('of_copy', 0):.0%} of copy)" if case.nbytes
                    else f"{row.get('argus_tflops', 0):.0f} TFLOP/s")
            print(f"[{op}] {case.shape}: {'ok' if ok else 'WRONG ' + '; '.join(row['checks'])}"
                  + (f" | argus {rate} | vs eager {row['ratio_eager']:.3f}"
                     + (f" | vs best ({row['best_torch']}) {row['ratio_best']:.3f}" if "ratio_best" in row else "")
                     + (f" | vs compile {row['ratio_compile']:.3f}" if "ratio_compile" in row else "") if ok else "")
                  + f" ({time.time() - t0:.0f}s)", flush=True)
            del case
            torch.cuda.empty_cache()
    return out


def markdown(res: dict, iters: int) -> str:
    env = res["env"]
    lines = [
        "# Ops: Argus examples vs torch",
        "",
        f"Measured {env.get('date')} on {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
        f"NVRTC {env.get('nvrtc')}. Copy bandwidth in the same process: {res['copy_gbs']:.0f} GB/s.",
        "",
        "Method (benchmarks/bench_ops.py): per op and shape, fresh random inputs and NaN-poisoned outputs, the "
        "Argus result checked against float64 (the interpreter's criterion); then Argus, torch eager and "
        f"torch.compile timed interleaved in one process, CUDA events, median of {iters}, input sets rotated "
        "past the L2. Ratio = torch time / Argus time (> 1: Argus faster). GB/s counts the bytes the op must "
        "move (inputs once, outputs once).",
        "",
        "Where a row times several torch paths (decode: torch's own SDPA choice, each SDPA backend pinned, "
        "flash_attn_with_kvcache where installed), 'vs best' divides the fastest of them by Argus.",
        "",
        "| op | shape | Argus | torch eager | torch.compile | ratio vs eager | ratio vs compile | vs best torch path "
        "| % of copy | correct |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in res["rows"]:
        if not r.get("ok"):
            lines.append(f"| {r['op']} | {r['shape']} | - | - | - | - | - | - | - | NO |")
            continue
        unit = "gbs" if "argus_gbs" in r else "tflops"
        fmt = (lambda v: f"{v:.0f} GB/s") if unit == "gbs" else (lambda v: f"{v:.0f} TFLOP/s")
        comp = fmt(r[f"compile_{unit}"]) if f"compile_{unit}" in r else "-"
        rc = f"{r['ratio_compile']:.2f}" if "ratio_compile" in r else "-"
        of_copy = f"{r['of_copy']:.0%}" if "of_copy" in r else "-"
        best = f"**{r['ratio_best']:.3f}** ({r['best_torch']})" if "ratio_best" in r else "-"
        lines.append(f"| {r['op']} | {r['shape']} | {fmt(r[f'argus_{unit}'])} | {fmt(r[f'eager_{unit}'])} | {comp} | "
                     f"**{r['ratio_eager']:.2f}** | {rc} | {best} | {of_copy} | yes |")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    output_args(ap, "ops", iters=30, child_check=False)
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; choose from {', '.join(OPS)}")
    res = run(ops, args.iters, not args.no_compile)
    Path(args.json).write_text(json.dumps(res, indent=1))
    write_markdown(args.md, "ops", markdown(res, args.iters))
    return 0 if all(r.get("ok") for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
