"""Run a kernel in the interpreter on fresh random inputs and compare with its `reference:` block."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from argus.dsl.diagnostics import error
from argus.dsl.reference import evaluate_reference
from argus.dsl.types import ScalarT, TileT
from argus.interp.budget import check_dims, check_fits, paced_blocks
from argus.interp.machine import execute, grid_size
from argus.interp.numerics import (
    element_tolerance,
    poison,
    random_ints,
    reference_array,
    round_to,
    storage_dtype,
    tolerance,
)
from argus.ir import nodes as ir
from argus.ir.transform import walk


@dataclass(frozen=True)
class OutputCheck:
    name: str
    rel_error: float  # ||out - ref||_F / ||ref||_F in float64
    max_abs_error: float
    nonfinite: int  # NaN/inf elements in the output (poison left unwritten shows up here)
    tolerance: float
    bad: int  # elements off by more than the per-element bound (or non-finite)
    first_bad: tuple[tuple[int, ...], float, float] | None  # (index, output, reference)
    compared: int = -1  # elements where the reference is defined (not NaN); -1: not counted

    @property
    def ok(self) -> bool:
        return self.bad == 0 and self.rel_error <= self.tolerance

    def describe(self) -> str:
        s = f"{self.name}: relative error {self.rel_error:.2e} (tolerance {self.tolerance:.0e})"
        if self.nonfinite:  # the relative error is over the finite elements only: say what it leaves out
            s += f", {self.nonfinite} non-finite (unwritten NaN poison, or an overflow)"
        if self.compared == 0:
            s += "; nothing compared: the reference is NaN at every element (use dims where it is defined)"
        if self.bad:
            idx, got, want = self.first_bad
            s += (f"; {self.bad} wrong element{'s' if self.bad > 1 else ''}, first "
                  f"{self.name}[{', '.join(map(str, idx))}] = {got:.6g} vs reference {want:.6g}")
        return s


@dataclass(frozen=True)
class RunResult:
    checks: tuple[OutputCheck, ...]
    seconds: float
    arrays: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    dims: dict[str, int] | None = None  # the dims it ran at

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def resolve_dims(kernel: ir.Kernel, defines: dict[str, object]) -> dict[str, int]:
    missing = [d for d in kernel.dims if d not in defines]
    if missing:
        raise error("missing-dim", f"no value for dimension{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)}", kernel.span,
                    "give every runtime dimension with -D, e.g. " + " ".join(f"-D {d}=256" for d in missing))
    return {d: int(defines[d]) for d in kernel.dims}


def resolve_scalars(kernel: ir.Kernel, defines: dict[str, object]) -> dict[str, float]:
    out = {}
    for s in kernel.scalars:
        if s.name in defines:
            out[s.name] = defines[s.name]
        elif s.default is not None:
            out[s.name] = s.default
        else:
            raise error("missing-scalar", f"no value for scalar argument '{s.name}'", kernel.span,
                        f"give it with -D {s.name}=VALUE or declare a default: {s.name}: {s.dtype} = VALUE")
    return out


def shape_of(t: ir.TensorDecl, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else dims[d] for d in t.dims)


def make_arrays(kernel: ir.Kernel, dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh random inputs (never zeros) rounded to their dtype; outputs poisoned with NaN (or -1).

    A signed integer tensor the kernel reads only as tiles (values, never an index: only a scalar load
    can index memory or steer control flow) draws negative values too, so a sign error shows (a
    maximum over a zero-filled tail of an i32 row); one read by scalar loads keeps small non-negative
    values (indices, counts, lengths)."""
    indexing = {e.ref.base for e in walk(kernel.body) if isinstance(e, ir.Load) and isinstance(e.type, ScalarT)}
    arrays = {}
    for t in kernel.tensors:
        shape = shape_of(t, dims)
        if t.name in kernel.outputs and t.name not in kernel.inputs:
            arrays[t.name] = np.full(shape, poison(t.dtype), storage_dtype(t.dtype))
        elif t.dtype.is_float:
            arrays[t.name] = round_to(rng.standard_normal(shape), t.dtype)
        elif t.dtype.kind == "int" and t.dtype.bits >= 32 and t.name not in indexing:
            arrays[t.name] = rng.integers(-8, 8, size=shape).astype(storage_dtype(t.dtype))
        else:
            arrays[t.name] = random_ints(t.dtype, shape, rng)
    return arrays


def working_dtype(kernel: ir.Kernel, out: str):
    """The least precise float type a value takes on its way to any output: the output's own, or a tile
    computed in a narrower float (cast(p, bf16) before an mma, x * x of bf16 tiles, a bf16 sum).
    An output is held to this type's tolerance (an fp32 output computed through a bf16 P cannot be more
    exact than bf16). Loads are not roundings: the reference reads the same rounded inputs."""
    best = kernel.tensor(out).dtype
    for e in walk(kernel.body):
        if isinstance(e, (ir.Math, ir.Bin, ir.Reduce)) and isinstance(e.type, TileT) and e.type.dtype.is_float:
            if element_tolerance(e.type.dtype) > element_tolerance(best):
                best = e.type.dtype
    return best


def compare(name: str, out: np.ndarray, ref, dtype, strict: bool = False) -> OutputCheck:
    """`strict` halves the per-element bound (replay: one missing product term must show)."""
    out64 = np.asarray(out, dtype=np.float64)
    try:
        ref64 = np.broadcast_to(np.asarray(ref, dtype=np.float64), out64.shape)
    except ValueError:
        raise error("reference", f"the reference computes '{name}' with shape {np.shape(ref)}, but the output has "
                    f"shape {out64.shape}", None,
                    f"make the reference block assign '{name}' an array of the output's shape") from None
    finite = np.isfinite(out64)
    nonfinite = int(out64.size - finite.sum()) - int((~np.isfinite(ref64) & ~finite).sum())
    with np.errstate(invalid="ignore"):  # -inf - -inf where both are masked (a causal score): no warning
        return _compare(name, out64, ref64, finite, nonfinite, dtype, strict)


def _compare(name, out64, ref64, finite, nonfinite, dtype, strict) -> OutputCheck:
    diff = np.where(finite & ~np.isnan(ref64), out64 - ref64, 0.0)
    fin = ref64[np.isfinite(ref64)]
    denom = float(np.linalg.norm(fin)) or 1.0
    rel = float(np.linalg.norm(diff)) / denom
    mx = float(np.max(np.abs(diff))) if diff.size else 0.0
    # Per element: rounding to the output dtype plus fp32 accumulation, relative to the element and to
    # the tensor's RMS (so near-zero elements are not held to an impossible relative bound).
    rms = float(np.sqrt(np.mean(fin ** 2))) if fin.size else 0.0
    bound = element_tolerance(dtype) * (0.5 if strict else 1.0) * (np.abs(ref64) + rms)
    # where the reference itself is undefined (NaN: e.g. a query row that sees no key), so may the kernel be
    wrong = ~(np.abs(out64 - ref64) <= bound) & ~(np.isinf(ref64) & (out64 == ref64)) & ~np.isnan(ref64)
    bad = int(wrong.sum())
    first = None
    if bad:
        idx = tuple(int(i) for i in np.argwhere(wrong)[0])
        first = (idx, float(out64[idx]), float(ref64[idx]))
    return OutputCheck(name, rel, mx, max(0, nonfinite), tolerance(dtype), bad, first, int((~np.isnan(ref64)).sum()))


def reference_env(kernel: ir.Kernel, arrays: dict[str, np.ndarray], dims: dict[str, int],
                  scalars: dict[str, object]) -> dict[str, object]:
    """What the `reference:` block sees: copies of the arrays (float64 / int64), dims, params, scalars."""
    env: dict[str, object] = {n: reference_array(a) for n, a in arrays.items()}
    env.update(dims)
    env.update(kernel.param_dict)
    env.update(scalars)
    return env


def contract_inputs(kernel: ir.Kernel, dims: dict[str, int], defines: dict, arrays: dict[str, np.ndarray],
                    rng: np.random.Generator) -> dict[str, int]:
    """Integer tensors the kernel's assumes constrain (cumulative offsets, a schedule) replaced in `arrays`
    by contents solved from its contract, as `argus check`'s numeric tier builds them (random i32 in
    0..7 break such assumes); returns the integer scalars the contract chose for the grid."""
    from argus.analysis.contract_inputs import contract_arrays

    got = contract_arrays(kernel, dims, defines, int(rng.integers(1 << 30)))
    if got is None:
        return {}
    solved, scalars = got
    arrays.update(solved)
    return {n: v for n, v in scalars.items() if n not in defines}


def run_interp(kernel: ir.Kernel, defines: dict[str, object], seed: int | None = None,
               arrays: dict[str, np.ndarray] | None = None) -> RunResult:
    if kernel.reference is None:
        raise error("no-reference", f"kernel '{kernel.name}' has no reference: block to compare with", kernel.span,
                    "add `reference:` after the kernel body with NumPy code computing its outputs")
    scalars = resolve_scalars(kernel, defines)
    rng = np.random.default_rng(seed)
    from argus.metadata import builder_for

    check_dims(kernel, defines)
    builder = builder_for(kernel)
    if arrays is None and builder is not None:
        dims, arrays = builder.build(kernel, defines, seed)  # the host builder the kernel names (argus.metadata)
    else:
        dims = resolve_dims(kernel, defines)
        check_fits(kernel, dims)  # refused up front when it cannot fit the memory budget
        if arrays is None:
            arrays = make_arrays(kernel, dims, rng)
            scalars = {**scalars, **contract_inputs(kernel, dims, defines, arrays, rng)}
    env = reference_env(kernel, arrays, dims, scalars)  # the inputs before the kernel writes outputs
    t0 = time.perf_counter()
    grid = grid_size(kernel, dims, scalars)
    execute(kernel, arrays, dims, scalars, blocks=paced_blocks(kernel, grid, dims))
    seconds = time.perf_counter() - t0
    ref_env = evaluate_reference(kernel.reference, env)
    checks = tuple(compare(o, arrays[o], ref_env[o], working_dtype(kernel, o)) for o in kernel.outputs)
    return RunResult(checks, seconds, arrays, {o: np.asarray(ref_env[o]) for o in kernel.outputs}, dims)
