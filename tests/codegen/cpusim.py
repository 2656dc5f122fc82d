"""Run generated CUDA on the CPU: g++ compiles the kernel's own source against tests/codegen/cpusim.h.

Kernels whose generated code uses inline PTX (cp.async, mma, wgmma, TMA, mbarriers) cannot run here
(`emulatable` says so); everything else -- loads and stores, register layouts, reductions with their
shuffles and shared-memory partials, layout conversions, atomics -- runs as written, one OS thread per
CUDA thread, so a wrong slot map, shuffle mask or barrier shows as a wrong result (or a hang, bounded
by the test's timeout). No GPU needed: what the GPU tests check later, on real hardware.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from argus.codegen.emit import generate
from argus.codegen.prelude import ACTIVATIONS, ARGREDUCE, BASE
from argus.codegen.spec import GeneratedKernel
from argus.interp.machine import grid_size
from argus.ir import nodes as ir

HERE = Path(__file__).resolve().parent
PLAIN = {"activations": ACTIVATIONS, "argreduce": ARGREDUCE}  # prelude groups that are plain C++
SHIMMED = {"ex2", "atomics", "cp.async", "mma.sync", "mma.sync.fp8", "pack"}  # provided by cpusim.h
CACHE = Path(tempfile.gettempdir()) / "argus-cpusim"


def available() -> bool:
    return shutil.which("g++") is not None


def emulatable(gk: GeneratedKernel) -> bool:
    return set(gk.features) <= set(PLAIN) | SHIMMED and not gk.tensor_maps


def cpu_source(gk: GeneratedKernel) -> str:
    base = re.sub(r"__device__ __forceinline__ void ag_bar_sync.*?\n}\n", "", BASE, flags=re.S)
    kernel = gk.source[gk.source.index('extern "C" __global__'):]
    kernel = kernel.replace('extern "C" __global__', "static", 1)
    params = ", ".join(f"{p.ctype} {p.name}" for p in gk.params)
    names = ", ".join(p.name for p in gk.params)
    groups = "".join(text for key, text in PLAIN.items() if key in gk.features)
    return (f'#include "{HERE / "cpusim.h"}"\n{base}{groups}\n{kernel}\n'
            f'extern "C" void ag_run(int ag_gx, int ag_gy, int ag_gz, {params}) {{\n'
            f"  ag_cpu_launch(ag_gx, ag_gy, ag_gz, {gk.threads}, [&] {{ {gk.name}({names}); }});\n}}\n")


def compile_source(src: str) -> ctypes.CDLL:
    key = hashlib.sha256(src.encode() + (HERE / "cpusim.h").read_bytes()).hexdigest()[:20]
    CACHE.mkdir(exist_ok=True)
    lib = CACHE / f"{key}.so"
    if not lib.exists():
        cpp = CACHE / f"{key}.cpp"
        cpp.write_text(src)
        tmp = CACHE / f"{key}.tmp.so"
        r = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-shared", "-fPIC", "-w", str(cpp), "-o",
                            str(tmp)], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"g++ failed on {cpp}:\n{r.stderr[-3000:]}")
        tmp.rename(lib)
    return ctypes.CDLL(str(lib))


def _device_array(a: np.ndarray, dtype) -> np.ndarray:
    """The bytes a kernel reads for tensor `a` (the interpreter keeps bf16 / f16 as float32)."""
    if dtype.name == "bf16":
        return np.ascontiguousarray((np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16))
    if dtype.name == "f16":
        return np.ascontiguousarray(np.asarray(a, np.float16))
    if dtype.name in ("f8e4m3", "f8e5m2"):  # the bytes: NumPy has no fp8, torch does
        import torch

        t = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[dtype.name]
        return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(t).view(torch.uint8).numpy()
    return np.ascontiguousarray(a)


def _host_array(d: np.ndarray, dtype) -> np.ndarray:
    if dtype.name == "bf16":
        return (d.astype(np.uint32) << 16).view(np.float32)
    if dtype.name == "f16":
        return d.astype(np.float32)
    return d


_CTYPE = {"float": ctypes.c_float, "double": ctypes.c_double, "int": ctypes.c_int, "long long": ctypes.c_longlong,
          "bool": ctypes.c_bool, "unsigned": ctypes.c_uint}


def run(kernel: ir.Kernel, arrays: dict[str, np.ndarray], dims: dict[str, int],
        scalars: dict[str, float] | None = None, **generate_options) -> GeneratedKernel:
    """Generate `kernel`'s CUDA, run it over `arrays` (interpreter storage: updated in place)."""
    scalars = scalars or {}
    gk = generate(kernel, **generate_options)
    if not emulatable(gk):
        raise ValueError(f"kernel {kernel.name} uses {sorted(gk.features)}: not runnable on the CPU")
    lib = compile_source(cpu_source(gk))
    dev = {t.name: _device_array(arrays[t.name], t.dtype) for t in kernel.tensors}
    args: list = list(grid_size(kernel, dims, scalars))
    for p in gk.params:
        if p.kind == "tensor":
            args.append(ctypes.c_void_p(dev[p.arg].ctypes.data))
        elif p.kind == "stride":
            a = dev[p.arg]
            args.append(ctypes.c_longlong(a.strides[p.axis] // a.itemsize))
        elif p.kind == "dim":
            args.append(ctypes.c_int(int(dims[p.arg])))
        elif p.kind == "scalar":
            args.append(_CTYPE[p.ctype](scalars[p.arg]))
        else:
            raise ValueError(f"parameter kind {p.kind}")
    lib.ag_run.restype = None
    lib.ag_run(*[ctypes.c_int(int(a)) if isinstance(a, int) else a for a in args])
    for t in kernel.tensors:
        if t.name in kernel.outputs:
            arrays[t.name][...] = _host_array(dev[t.name], t.dtype)
    return gk


def check(kernel: ir.Kernel, defines: dict[str, object], seed: int = 0, criteria: dict | None = None,
          **generate_options) -> list:
    """Run on fresh random inputs (outputs poisoned) and compare every output with the reference in
    float64; returns the OutputChecks (argus.interp.run.compare). `criteria`: output -> the dtype whose
    tolerance applies (an fp32 output computed through a bf16 operand is held to bf16's)."""
    from argus.dsl.reference import evaluate_reference
    from argus.interp.run import compare, make_arrays, reference_env, resolve_dims, resolve_scalars

    dims = resolve_dims(kernel, defines)
    scalars = resolve_scalars(kernel, defines)
    arrays = make_arrays(kernel, dims, np.random.default_rng(seed))
    env = reference_env(kernel, arrays, dims, scalars)
    run(kernel, arrays, dims, scalars, **generate_options)
    ref = evaluate_reference(kernel.reference, env)
    criteria = criteria or {}
    return [compare(o, arrays[o], ref[o], criteria.get(o, kernel.tensor(o).dtype)) for o in kernel.outputs]
