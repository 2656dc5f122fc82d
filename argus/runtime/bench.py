"""Checking and timing kernels on the GPU, against the library baseline in the same process.

Correctness: fresh random inputs (argus.interp.run.make_arrays: normal values rounded to their dtype,
outputs poisoned with NaN), one launch, the `reference:` block in float64, the interpreter's
comparison (argus.interp.run.compare). Timing: CUDA events around each launch after warm-up, the
stream backed up with a sleep kernel so host launch overhead stays out, input sets rotated so that
the L2 cache never serves a repeat, kernel and baseline samples interleaved; medians reported.
torch is imported only here (and only when a GPU run is asked for).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.dsl import ast
from argus.dsl.reference import evaluate_reference
from argus.interp.run import (
    OutputCheck,
    compare,
    contract_inputs,
    make_arrays,
    reference_env,
    resolve_dims,
    resolve_scalars,
)
from argus.ir import nodes as ir

L2_ROTATE_BYTES = 256 << 20  # input sets rotate over at least this much memory (the H200's L2 is 50 MB)
SLEEP_CYCLES = 400_000  # ~0.2 ms of GPU sleep before each sample: the host queues the launch meanwhile

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8",
                 "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
                 "u64": "uint64", "bool": "bool",
                 "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def torch_dtype(name: str):
    import torch

    return getattr(torch, _TORCH_DTYPES[name])


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int


def time_interleaved(fns: dict[str, Sequence[Callable[[], Any]]], iters: int = 30, warmup: int = 3
                     ) -> dict[str, Timing]:
    """Median time of each entry's launches; entry lists rotate (one element per sample)."""
    import torch

    for lst in fns.values():
        for i in range(max(warmup, len(lst))):
            lst[i % len(lst)]()
    torch.cuda.synchronize()
    events: dict[str, list[tuple[Any, Any]]] = {n: [] for n in fns}
    for it in range(iters):
        for name, lst in fns.items():
            torch.cuda._sleep(SLEEP_CYCLES)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            lst[it % len(lst)]()
            e1.record()
            events[name].append((e0, e1))
    torch.cuda.synchronize()
    out = {}
    for name, evs in events.items():
        ts = [a.elapsed_time(b) for a, b in evs]
        out[name] = Timing(statistics.median(ts), min(ts), max(ts), len(ts))
    return out


def matmul_operands(kernel: ir.Kernel) -> tuple[str, str, str] | None:
    """(out, a, b) when the reference block is exactly `out = a @ b` (a GEMM: cuBLAS is the baseline)."""
    ref = kernel.reference or ()
    if len(ref) != 1 or not isinstance(ref[0], ast.Assign) or len(ref[0].targets) != 1:
        return None
    v = ref[0].value
    if isinstance(v, ast.BinOp) and v.op == "@" and isinstance(v.left, ast.Name) and isinstance(v.right, ast.Name):
        return ref[0].targets[0].id, v.left.id, v.right.id
    return None


@dataclass(frozen=True)
class GpuResult:
    checks: tuple[OutputCheck, ...]
    timing: Timing | None = None
    baseline: Timing | None = None
    baseline_name: str | None = None
    flops: float | None = None  # per launch, when known (GEMM)
    nbytes: float = 0.0  # bytes the kernel must move at least (inputs read once, outputs written once)
    dims: dict[str, int] | None = None  # the dims it ran at

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def rate(self, t: Timing | None) -> str:
        if t is None:
            return "-"
        if self.flops:
            return f"{self.flops / t.median_ms / 1e9:.1f} TFLOP/s"
        return f"{self.nbytes / t.median_ms / 1e6:.1f} GB/s"

    @property
    def ratio(self) -> float | None:
        """baseline time / kernel time (> 1: faster than the library)."""
        if self.timing is None or self.baseline is None:
            return None
        return self.baseline.median_ms / self.timing.median_ms


def to_host(t) -> np.ndarray:
    """A device tensor as a host array for the float64 comparison: f64 kept, other floats widened to f32 (bf16
    and fp8 have no NumPy dtype; f32 holds them exactly), integers as they are."""
    import torch

    if t.dtype == torch.float64 or not t.dtype.is_floating_point:
        return t.cpu().numpy()
    return t.float().cpu().numpy()


def to_device(a: np.ndarray, dtype_name: str, device: int = 0):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(f"cuda:{device}").to(torch_dtype(dtype_name))


def host_inputs(k: ir.Kernel, defines: dict[str, object], seed: int | None) -> tuple[dict, dict[str, np.ndarray]]:
    """Dims and fresh host inputs (outputs poisoned): random values, or a real routing for the MoE
    kernels, whose integer inputs are metadata the kernel's assumes constrain (argus.moe)."""
    from argus.metadata import builder_for

    b = builder_for(k)
    if b is not None:  # the kernel names the host builder of its metadata
        return b.build(k, defines, seed)
    dims = resolve_dims(k, defines)
    rng = np.random.default_rng(seed)
    arrays = make_arrays(k, dims, rng)
    contract_inputs(k, dims, defines, arrays, rng)  # integer tensors the assumes constrain
    return dims, arrays


def check_on_gpu(gk, defines: dict[str, object], seed: int | None = None,
                 arrays: dict[str, np.ndarray] | None = None) -> tuple[tuple[OutputCheck, ...], dict]:
    """Fresh random inputs (or the given host `arrays`, e.g. MoE routing metadata with random
    activations), poisoned outputs, one launch, float64 reference, interpreter comparison."""
    import torch

    k = gk.ir
    scalars = resolve_scalars(k, defines)
    if arrays is not None:
        dims, host = resolve_dims(k, defines), arrays
    else:
        dims, host = host_inputs(k, defines, seed)
        from argus.analysis.contract_inputs import contract_scalars

        scalars = {**scalars, **contract_scalars(k, dims, defines)}  # a grid's max_len the -D left open
    dev = {t.name: to_device(host[t.name], t.dtype.name, gk.device) for t in k.tensors}
    gk(**dev, **scalars)
    torch.cuda.synchronize(gk.device)
    ref = evaluate_reference(k.reference, reference_env(k, host, dims, scalars))
    checks = []
    for o in k.outputs:
        checks.append(compare(o, to_host(dev[o]), ref[o], k.tensor(o).dtype))
    return tuple(checks), dims


def bench_on_gpu(gk, defines: dict[str, object], iters: int = 30) -> tuple[Timing, Timing | None, str | None,
                                                                            float | None, float]:
    """Time the kernel (and cuBLAS for a GEMM reference) on rotated fresh inputs."""
    import torch

    from argus.metadata import builder_for

    k = gk.ir
    scalars = resolve_scalars(k, defines)
    if builder_for(k) is not None:  # one built input set (random metadata would break the assumes)
        dims, host = host_inputs(k, defines, 0)
        dev = {t.name: to_device(host[t.name], t.dtype.name, gk.device) for t in k.tensors}
        t = time_interleaved({"argus": [gk.prepare(**dev, **scalars)]}, iters)
        nbytes = float(sum(host[x.name].size * x.dtype.bytes for x in k.tensors))
        return t["argus"], None, None, None, nbytes
    dims = resolve_dims(k, defines)
    shapes = {t.name: tuple(d if isinstance(d, int) else dims[d] for d in t.dims) for t in k.tensors}
    set_bytes = sum(int(np.prod(s)) * t.dtype.bytes for t, s in zip(k.tensors, shapes.values()))
    nsets = max(2, min(8, -(-L2_ROTATE_BYTES // max(1, set_bytes))))
    sets = []
    for _ in range(nsets):
        arrays = {}
        for t in k.tensors:
            dt = torch_dtype(t.dtype.name)
            if t.dtype.is_float:
                arrays[t.name] = torch.randn(shapes[t.name], device=f"cuda:{gk.device}").to(dt)
            else:
                arrays[t.name] = torch.randint(0, 8, shapes[t.name], device=f"cuda:{gk.device}").to(dt)
        sets.append(arrays)
    fns: dict[str, list[Callable[[], Any]]] = {"argus": [gk.prepare(**s, **scalars) for s in sets]}
    mm = matmul_operands(k)
    flops = None
    if mm is not None:
        o, a, b = mm
        fns["cublas"] = [lambda s=s: torch.matmul(s[a], s[b], out=s[o]) for s in sets]
        flops = 2.0 * shapes[a][0] * shapes[a][1] * shapes[b][1]
    t = time_interleaved(fns, iters)
    return t["argus"], t.get("cublas"), ("cuBLAS (torch.matmul)" if mm else None), flops, float(set_bytes)


def run_on_gpu(gk, defines: dict[str, object], *, seed: int | None = None, bench: bool = False,
               iters: int = 30) -> GpuResult:
    checks, dims = check_on_gpu(gk, defines, seed)
    if not bench or not all(c.ok for c in checks):
        return GpuResult(checks, dims=dims)
    timing, base, base_name, flops, nbytes = bench_on_gpu(gk, defines, iters)
    return GpuResult(checks, timing, base, base_name, flops, nbytes, dims)


def gpu_description(device: int = 0) -> dict[str, str]:
    """GPU name, driver and date for result tables."""
    import torch

    info = {"gpu": torch.cuda.get_device_name(device), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "torch": torch.__version__}
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        info["cuda_driver_api"] = f"{v // 1000}.{v % 1000 // 10}"
    except Exception:
        pass
    try:
        import subprocess

        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except Exception:
        info.setdefault("driver", "unknown")
    return info


def _specialized(file: str, defines: dict[str, object], kernel: str | None) -> tuple[str | None, dict[str, object]]:
    """The kernel and -D that the kernel's `specialize` the -D dims select makes: its params on top, or
    a route's kernel with its params (argus/specialize.py)."""
    from argus.dsl.diagnostics import ArgusError
    from argus.sources import load_source
    from argus.specialize import with_specialization

    try:
        sf = load_source(file)
        src = sf.select(kernel)
    except (ArgusError, StopIteration):  # a layer, or a bad name: the build reports it
        return kernel, defines
    node, out = with_specialization(src.node, src.defines(defines), [k.node for k in sf.kernels])
    return (kernel if node is src.node else node.name), out


def run_command(file: str, defines: dict[str, object], kernel: str | None, *, bench: bool = False,
                seed: int | None = None, iters: int = 30, arch: str | None = None, fmt: str = "text") -> int:
    """`argus run FILE [--bench]` on the GPU: check against the reference, then (with --bench) time."""
    import json

    from argus import metadata
    from argus.codegen.compile import build
    from argus.codegen.nvrtc import detect_arch
    from argus.runtime.launch import GpuKernel

    gpu_arch = detect_arch(0)
    if gpu_arch is None:
        from argus.dsl.diagnostics import error

        raise error("no-gpu", "no CUDA GPU on this machine", None, "run in the interpreter with --interp")
    kernel, chosen = _specialized(file, defines, kernel)
    k = metadata.build_for_run(file, chosen, kernel)  # -D T= may size a metadata builder
    built = build(k, arch=arch or gpu_arch)
    gk = GpuKernel(built, 0)
    res = run_on_gpu(gk, defines, seed=seed, bench=bench, iters=iters)
    dims = " ".join(f"{d}={defines[d]}" for d in k.dims if d in defines)
    if fmt == "json":
        from argus.records import run_record

        timing = None
        if res.timing is not None:
            timing = {"time_ms": res.timing.median_ms, "min_ms": res.timing.min_ms, "max_ms": res.timing.max_ms,
                      "samples": res.timing.samples, "baseline": res.baseline_name,
                      "baseline_ms": res.baseline.median_ms if res.baseline else None, "ratio": res.ratio,
                      "tflops": res.flops / res.timing.median_ms / 1e9 if res.flops else None}
        print(json.dumps(run_record(file, k.name, "gpu", res.ok, res.dims or {}, None, res.checks, built.arch, timing),
                         indent=2))
    else:
        print(f"{file}: kernel '{k.name}' {dims} (GPU {built.arch})")
        for c in res.checks:
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.describe()}")
        if res.timing is not None:
            t = res.timing
            print(f"  argus   {t.median_ms:8.4f} ms  {res.rate(t)}  (median of {t.samples}, "
                  f"min {t.min_ms:.4f}, max {t.max_ms:.4f})")
            if res.baseline is not None:
                print(f"  {res.baseline_name}: {res.baseline.median_ms:8.4f} ms  {res.rate(res.baseline)}")
                print(f"  ratio (baseline time / argus time): {res.ratio:.3f}")
    return 0 if res.ok else 1
