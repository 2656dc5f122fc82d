"""Correctness at the timed shapes, where neither the whole interpreter run nor the whole float64
reference is affordable: sampled blocks, sampled output elements, a sliced reference.

- `big_inputs`: fresh random inputs at any size (8-bit draws scaled to exact 16-bit floats, outputs
  poisoned), many times faster than the interpreter's general `make_arrays`.
- `sample_blocks`: which blocks of the grid the CPU evaluator interprets at a timed shape: the first,
  the last along every grid axis (where partial tiles and skipped work hide) and random ones.
- `SlicedReference`: the reference block's value at chosen output indices, computed by evaluating
  the reference on the inputs restricted to those indices along the output's dimensions (rows of A and
  columns of B for `C = A @ B`). Whether restricting a dimension preserves the reference's values
  (`causal_mask(SQ, SKV)` does not: positions would shift) is tested, not assumed: on fresh inputs at a
  small shape the sliced values must equal the full reference's, else that dimension is kept whole.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from argus.agent.workload import reference_cost, tensor_shape
from argus.dsl.reference import evaluate_reference
from argus.interp.numerics import element_tolerance, poison, random_ints, reference_array, round_to, storage_dtype
from argus.ir import nodes as ir

MAX_SLICED_FLOPS = 4e9  # float64 work of one sampled reference evaluation (a few seconds at most)


GRID_STEP = 1.0 / 64  # big inputs are k / 64, |k| < 128: exact in bf16, f16 and f32, no rounding pass


def big_inputs(kernel: ir.Kernel, dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh random inputs at a timed shape, drawn from the 255 nonzero multiples of 1/64 in (-2, 2)
    (standard deviation about 1.15): an 8-bit draw is exact in every 16- and 32-bit float dtype, so a
    shape of 8192 x 8192 costs a fraction of a second instead of seconds of normal draws and rounding.
    Other float dtypes (fp8) are rounded to the dtype."""
    arrays = {}
    for t in kernel.tensors:
        shape = tensor_shape(t, dims)
        if t.name in kernel.outputs and t.name not in kernel.inputs:
            arrays[t.name] = np.full(shape, poison(t.dtype), storage_dtype(t.dtype))
        elif t.dtype.is_float:
            k = rng.integers(-127, 127, size=shape, dtype=np.int8)
            k[k == 0] = 127  # never a zero: a structural zero can hide a skipped input element
            x = k.astype(np.float32)
            x *= np.float32(GRID_STEP)
            arrays[t.name] = x if t.dtype.name in ("bf16", "f16", "f32") else round_to(x, t.dtype)
        else:
            arrays[t.name] = random_ints(t.dtype, shape, rng)
    return arrays


def sample_blocks(grid: tuple[int, ...], rng: np.random.Generator, n: int) -> list[tuple[int, ...]]:
    """Up to max(n, axes + 1) distinct blocks: the first, the last along each axis, the very last, then random."""
    axes = sum(1 for g in grid if g > 1)
    first = tuple(0 for _ in grid)
    picks = [first, tuple(g - 1 for g in grid)]
    for i, g in enumerate(grid):
        if g > 1:
            picks.append(tuple(g - 1 if j == i else 0 for j in range(len(grid))))
    total = math.prod(grid)
    while len(set(picks)) < min(total, max(n, axes + 1)):
        picks.append(tuple(int(rng.integers(0, g)) for g in grid))
    out: list[tuple[int, ...]] = []
    for b in picks:
        if b not in out:
            out.append(b)
    return out


@dataclass(frozen=True)
class Sample:
    """Index sets per axis of one output (None: the whole axis) and the reference's values on their grid."""

    index: tuple[np.ndarray | None, ...]
    reference: np.ndarray

    def take(self, out: np.ndarray) -> np.ndarray:
        sel = tuple(np.arange(n) if ix is None else ix for ix, n in zip(self.index, out.shape))
        return out[np.ix_(*sel)]


class SlicedReference:
    """The starting kernel's reference evaluated on slices of the inputs (see the module docstring)."""

    def __init__(self, kernel: ir.Kernel, scalars: dict[str, object],
                 probe_arrays: dict[str, np.ndarray] | None = None):
        self.k = kernel
        self.scalars = scalars
        self.probe_arrays = probe_arrays  # inputs at the probe shape from the run's provider (valid routing)
        self._sliceable: dict[str, tuple[str, ...]] = {}

    def _dim_names(self, output: str) -> tuple[str, ...]:
        return tuple(d for d in dict.fromkeys(self.k.tensor(output).dims) if isinstance(d, str))

    def evaluate(self, arrays: dict[str, np.ndarray], dims: dict[str, int],
                 select: dict[str, np.ndarray]) -> dict[str, object]:
        """The reference on inputs restricted to `select[dim]` (sorted indices) along each selected dim."""
        env: dict[str, object] = {}
        for t in self.k.tensors:
            a = arrays[t.name]
            for axis, d in enumerate(t.dims):
                if isinstance(d, str) and d in select:
                    a = np.take(a, select[d], axis=axis)
            env[t.name] = reference_array(a)
        env.update(dims)
        env.update({d: len(ix) for d, ix in select.items()})
        env.update(self.k.param_dict)
        env.update(self.scalars)
        return evaluate_reference(self.k.reference, env)

    def sliceable(self, output: str, probe: dict[str, int], rng: np.random.Generator) -> tuple[str, ...]:
        """The output dims along which slicing the inputs leaves the reference's values unchanged,
        found on fresh inputs at the small shape `probe` (largest such set first; cached)."""
        if output in self._sliceable:
            return self._sliceable[output]
        from argus.interp.run import make_arrays

        # A dim of size 1 at the probe has no proper subset to slice it to, so nothing shows whether slicing it
        # changes the reference (decode attention's NS: one_hot(arange(SKV) // CHUNK, NS) over a sliced NS is
        # another split): such a dim is not sliceable.
        names = tuple(d for d in self._dim_names(output) if probe.get(d, 0) >= 2)
        # Random integers would make a routing-dependent reference look sliceable (expert_of_rows over
        # garbage offsets maps every row alike): probe with the provider's inputs when there are some.
        arrays = self.probe_arrays if self.probe_arrays is not None else make_arrays(self.k, probe, rng)
        full = np.asarray(self.evaluate(arrays, probe, {})[output], dtype=np.float64)
        pick = {}
        for d in names:  # a proper subset of the axis, so a dim tied to another one shows (H to HKV)
            ix = np.unique(np.concatenate([[0, probe[d] - 1], rng.integers(0, probe[d], 3)]))
            pick[d] = ix[1:] if len(ix) == probe[d] > 1 else ix
        found: tuple[str, ...] = ()
        for size in range(len(names), 0, -1):
            for subset in itertools.combinations(names, size):
                try:
                    got = np.asarray(self.evaluate(arrays, probe, {d: pick[d] for d in subset})[output],
                                     dtype=np.float64)
                    want = Sample(self._index(output, {d: pick[d] for d in subset}), got).take(full)
                    same = got.shape == want.shape and np.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
                except Exception:  # a reference that cannot run on slices (shape arithmetic): not sliceable
                    same = False
                if same:
                    found = subset
                    break
            if found:
                break
        self._sliceable[output] = found
        return found

    def _index(self, output: str, select: dict[str, np.ndarray]) -> tuple[np.ndarray | None, ...]:
        return tuple(select.get(d) if isinstance(d, str) else None for d in self.k.tensor(output).dims)

    def sample(self, arrays: dict[str, np.ndarray], dims: dict[str, int], output: str,
               select: dict[str, np.ndarray]) -> Sample:
        """The reference at the grid of `select` (sliceable dims only; others whole)."""
        ref = np.asarray(self.evaluate(arrays, dims, select)[output], dtype=np.float64)
        shape = tuple(len(select[d]) if isinstance(d, str) and d in select else (d if isinstance(d, int) else dims[d])
                      for d in self.k.tensor(output).dims)
        return Sample(self._index(output, select), np.broadcast_to(ref, shape))

    def affordable(self, dims: dict[str, int], select: dict[str, np.ndarray]) -> bool:
        sliced = {**dims, **{d: len(ix) for d, ix in select.items()}}
        elements = sum(math.prod(tensor_shape(t, sliced)) for t in self.k.tensors)
        flops, peak = reference_cost(self.k, sliced)  # peak: a gathered Wg[We] of the routed rows, say
        return flops <= MAX_SLICED_FLOPS and max(elements, peak) <= MAX_SLICED_FLOPS / 16


def choose_indices(candidates: dict[str, np.ndarray], dims: dict[str, int], refs: SlicedReference,
                   rng: np.random.Generator, per_dim: int = 24) -> dict[str, np.ndarray] | None:
    """Up to `per_dim` indices per sliceable dim from `candidates` (always the first and last), fewer
    until the sliced reference is affordable; None when even one index per dim is not."""
    n = per_dim
    while n >= 1:
        select = {}
        for d, cand in candidates.items():
            cand = np.unique(cand)
            if len(cand) > n:
                inner = rng.choice(cand[1:-1], size=max(0, n - 2), replace=False) if n > 2 else cand[:0]
                cand = np.unique(np.concatenate([cand[:1], cand[-1:], inner]))[:n]
            select[d] = cand
        if refs.affordable(dims, select):
            return select
        n //= 2
    return None


def compare_sample(out: np.ndarray, sample: Sample, dtype, written: np.ndarray | None = None) -> dict:
    """Per-element comparison (the interpreter's bound, with the RMS over the sample) on the sampled
    elements, restricted to `written` ones when given. Returns a JSON-able summary."""
    got = sample.take(np.asarray(out)).astype(np.float64)
    ref = np.asarray(sample.reference, dtype=np.float64)
    mask = np.ones(got.shape, bool) if written is None else sample.take(written)
    mask &= ~np.isnan(ref)  # where the reference is undefined, so may the kernel be
    finite = ref[np.isfinite(ref) & mask]
    rms = float(np.sqrt(np.mean(finite ** 2))) if finite.size else 0.0
    bound = element_tolerance(dtype) * (np.abs(ref) + rms)
    wrong = mask & ~(np.abs(got - ref) <= bound) & ~(np.isinf(ref) & (got == ref))
    res = {"compared": int(mask.sum()), "wrong": int(wrong.sum()), "first_wrong": None}
    if res["wrong"]:
        pos = tuple(int(i) for i in np.argwhere(wrong)[0])
        idx = [int(sample.index[a][p]) if sample.index[a] is not None else p for a, p in enumerate(pos)]
        res["first_wrong"] = [idx, float(got[pos]), float(ref[pos])]
    return res
