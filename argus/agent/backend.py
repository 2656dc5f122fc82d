"""Backends: how the referee compiles, runs and times a candidate. Called only inside the referee's
child process.

A backend is the plug point for execution: `InterpBackend` (CPU: the NumPy interpreter for results,
the analytic cost model for time, every time an estimate) and `RuntimeBackend` (GPU: NVRTC + the
CUDA runtime through `argus.runtime.bench`, when that module provides the functions named below).
The referee — not the backend — makes the inputs, poisons the outputs, computes the reference and
judges the result, so a backend cannot grade itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


def shape_key(dims: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, int(v)) for k, v in dims.items()))


class Unchecked(RuntimeError):
    """A request to time a shape whose correctness the referee has not checked."""


class CompileFailed(Exception):
    """The candidate does not compile (or cannot launch); `report` has the details."""

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = report or {}


@dataclass
class Compiled:
    source: str
    defines: dict[str, object]
    kernel: str | None
    report: dict[str, Any] = field(default_factory=dict)  # registers, smem, spills ... (JSON-able)
    handle: Any = None  # backend-private: IR, a loaded module, ...
    checked: set = field(default_factory=set)  # shape_key()s the referee has checked (and may time)
    arrays: dict = field(default_factory=dict)  # shape_key() -> the checked host inputs (data-dependent kernels)


@dataclass(frozen=True)
class Timing:
    samples_s: tuple[float, ...]  # one per timed call, seconds
    energy_j: float | None = None  # per call (NVML), None when not measured
    estimate: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)


class Backend(Protocol):
    name: str
    estimate: bool  # True when times are model estimates
    start_method: str  # multiprocessing start method for the referee's child ("fork" | "spawn")
    partial: bool  # True when execute() can run a subset of the grid's blocks (the interpreter)

    def compile(self, source: str, defines: dict[str, object], kernel: str | None) -> Compiled:
        """Compile; raise CompileFailed (or ArgusError) when it cannot."""
        ...

    def execute(self, compiled: Compiled, arrays: dict[str, np.ndarray], dims: dict[str, int],
                scalars: dict[str, float], blocks: list[tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
        """Run once on these host arrays (outputs arrive poisoned with NaN); return every output (host).
        `blocks` (partial backends only): run just these blocks of the grid."""
        ...

    def time(self, compiled: Compiled, dims: dict[str, int], *, seed: int, reps: int,
             input_sets: int) -> Timing:
        """Seconds per call at `dims`: device events after a synchronize, inputs rotated over
        `input_sets` fresh random copies (or L2 flushed) so no call reads warm data, `reps` calls."""
        ...


class InterpBackend:
    """CPU mode: interpreter results, cost-model times (estimates)."""

    name = "interp+model"
    estimate = True
    start_method = "fork"
    partial = True

    def compile(self, source: str, defines: dict[str, object], kernel: str | None) -> Compiled:
        from argus.agent.costmodel import resources
        from argus.agent.features import extract
        from argus.agent.gate import build_cached

        k = build_cached(source, tuple(sorted(defines.items())), kernel)
        probe = {d: 4096 for d in k.dims}
        res = resources(extract(k, probe))
        report = {**res.to_json(), "threads": k.threads, "estimate": True}
        if not res.feasible:
            raise CompileFailed(f"launch would fail: {res.reason} (estimate)", report)
        return Compiled(source, dict(defines), kernel, report, k)

    def execute(self, compiled: Compiled, arrays: dict[str, np.ndarray], dims: dict[str, int],
                scalars: dict[str, float], blocks: list[tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
        from argus.interp.machine import execute

        k = compiled.handle
        execute(k, arrays, dims, scalars, blocks=blocks)
        return {o: arrays[o] for o in k.outputs}

    def time(self, compiled: Compiled, dims: dict[str, int], *, seed: int, reps: int, input_sets: int) -> Timing:
        from argus.agent.costmodel import model
        from argus.agent.workload import useful_flops

        if shape_key(dims) not in compiled.checked:
            raise Unchecked(f"the cost model times only checked shapes, and {dims} was not checked")
        k = compiled.handle
        est = model(k, dims, useful_flops(k, dims))
        if not np.isfinite(est.seconds):
            raise CompileFailed(f"does not fit: {'; '.join(est.notes)} (estimate)", compiled.report)
        return Timing((est.seconds,), None, True, est.to_json())


class RuntimeBackend:
    """GPU mode through the code generator and runtime (argus.codegen.compile.build, argus.runtime.launch.GpuKernel,
    argus.runtime.bench): NVRTC compile with the resource report, launches on torch tensors, and timing with CUDA
    events after a synchronize over rotated input sets, interleaved with the library baseline (cuBLAS for a GEMM
    reference) in the same process. Energy per call from NVML when pynvml is importable.
    """

    name = "cuda"
    estimate = False
    start_method = "spawn"  # never fork a process that may hold a CUDA context
    partial = False

    @staticmethod
    def available() -> str | None:
        """None when usable, else the reason it is not."""
        try:
            from argus.codegen.compile import build  # noqa: F401
            from argus.codegen.nvrtc import detect_arch
            from argus.runtime.bench import bench_on_gpu, to_device  # noqa: F401
            from argus.runtime.launch import GpuKernel  # noqa: F401
        except Exception as e:  # missing, or mid-change and failing to import: either way not usable
            return f"the GPU runtime is not available ({type(e).__name__}: {e})"
        try:
            import torch  # noqa: F401
        except ImportError:
            return "torch is not installed (the GPU runtime times with torch.cuda events)"
        try:
            if detect_arch(0) is None:
                return "no CUDA GPU"
        except Exception as e:
            return f"no CUDA GPU ({type(e).__name__}: {e})"
        return None

    def compile(self, source: str, defines: dict[str, object], kernel: str | None) -> Compiled:
        from argus.codegen.compile import build
        from argus.codegen.nvrtc import detect_arch
        from argus.ir.build import build_source
        from argus.runtime.launch import GpuKernel

        k = build_source(source, defines, kernel, path="<candidate>")
        try:
            built = build(k, arch=detect_arch(0))
            gk = GpuKernel(built, 0)
        except Exception as e:  # ArgusError (NVRTC diagnostics) or a driver error loading the module
            msg = "; ".join(d.message for d in getattr(e, "diagnostics", [])) or f"{type(e).__name__}: {e}"
            raise CompileFailed(msg) from None
        report: dict[str, Any] = {"arch": built.arch,
                                  "dynamic_smem_bytes": getattr(built.generated, "smem_bytes", None)}
        for res in built.resources.values():
            report.update(registers=res.registers, static_smem_bytes=res.static_smem_bytes,
                          stack_frame_bytes=res.stack_frame_bytes, spill_store_bytes=res.spill_store_bytes,
                          spill_load_bytes=res.spill_load_bytes)
            break
        return Compiled(source, dict(defines), kernel, report, gk)

    def execute(self, compiled: Compiled, arrays: dict[str, np.ndarray], dims: dict[str, int],
                scalars: dict[str, float], blocks: list[tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
        import torch

        from argus.runtime.bench import to_device, to_host

        if blocks is not None:
            raise ValueError("the GPU runs the whole grid")
        gk = compiled.handle
        k = gk.ir
        dev = {t.name: to_device(arrays[t.name], t.dtype.name, gk.device) for t in k.tensors}
        gk(**dev, **scalars)
        torch.cuda.synchronize(gk.device)
        return {o: to_host(dev[o]) for o in k.outputs}

    def time(self, compiled: Compiled, dims: dict[str, int], *, seed: int, reps: int, input_sets: int) -> Timing:
        import torch

        from argus.runtime.bench import bench_on_gpu

        gk = compiled.handle
        torch.manual_seed(seed)
        with gpu_lock():
            e0 = nvml_energy_j()
            host = compiled.arrays.get(shape_key(dims))
            if host is not None:  # data-dependent inputs (routing metadata): time on the ones the referee checked
                t, base, base_name = self._time_on(gk, host, dims, reps), None, None
            else:
                t, base, base_name, _flops, _nbytes = bench_on_gpu(gk, dict(dims), iters=reps)
            e1 = nvml_energy_j()
        calls = reps * (2 if base is not None else 1) + 3
        energy = (e1 - e0) / calls if e0 is not None and e1 is not None else None
        details = {"min_s": t.min_ms / 1e3, "max_s": t.max_ms / 1e3, "samples": t.samples,
                   "energy_note": "NVML energy over the kernel's and the baseline's interleaved calls, per call"}
        if base is not None:
            details.update(baseline=base_name, baseline_s=base.median_ms / 1e3)
        return Timing((t.median_ms / 1e3,), energy, False, details)


    @staticmethod
    def _time_on(gk, host: dict[str, np.ndarray], dims: dict[str, int], reps: int):
        from argus.interp.run import resolve_scalars
        from argus.runtime.bench import time_interleaved, to_device

        k = gk.ir
        dev = {t.name: to_device(host[t.name], t.dtype.name, gk.device) for t in k.tensors}
        return time_interleaved({"argus": [gk.prepare(**dev, **resolve_scalars(k, dims))]}, reps)["argus"]


@contextlib.contextmanager
def gpu_lock():
    """Timing has the GPU to itself: with $ARGUS_GPU_LOCK set (runs tuning in parallel on one GPU), an
    exclusive lock on that file is held while a candidate is timed."""
    path = os.environ.get("ARGUS_GPU_LOCK")
    if not path:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def nvml_energy_j() -> float | None:
    """Total energy counter of GPU 0 in joules (NVML), or None where NVML is not available."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
    except Exception:
        return None


def release_gpu_cache() -> None:
    """After a job in a long-lived GPU child: hand torch's cached blocks (a job's big inputs) back, so
    parallel runs on one GPU do not hold each other's memory."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
