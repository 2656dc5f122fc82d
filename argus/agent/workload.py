"""Useful work of a kernel at given dims: FLOPs from its reference block, minimum bytes, roofline floor.

Useful FLOPs (what TFLOP/s figures divide) come from the `reference:` block's matrix products
(argus.agent.refwork), so padding waste in partial tiles and masked-out causal blocks are not counted
as work. The speed-of-light floor uses datasheet peaks
only: a measured time below it is physically impossible and the referee rejects it.
"""

from __future__ import annotations

import math

from argus.agent.hardware import H200, Machine
from argus.agent.refwork import reference_work
from argus.ir import nodes as ir


def tensor_shape(t: ir.TensorDecl, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else int(dims[d]) for d in t.dims)


def useful_flops(kernel: ir.Kernel, dims: dict[str, int]) -> float:
    """The reference block's matrix products (argus.agent.refwork: einsum, causal masks, routed rows);
    0 when it has none."""
    return reference_cost(kernel, dims)[0]


def reference_cost(kernel: ir.Kernel, dims: dict[str, int]) -> tuple[float, int]:
    """(useful FLOPs, elements of the largest array the reference block materialises) at dims."""
    if not kernel.reference:
        return 0.0, 0
    shapes = {t.name: tuple((d, None) if isinstance(d, int) else (int(dims[d]), d) for d in t.dims)
              for t in kernel.tensors}
    scalars = {**{n: v for n, v in kernel.params}, **{d: int(v) for d, v in dims.items()}}
    return reference_work(kernel.reference, shapes, scalars)


def min_bytes(kernel: ir.Kernel, dims: dict[str, int]) -> float:
    """Every input read once and every output written once."""
    return float(sum(math.prod(tensor_shape(t, dims)) * t.dtype.bytes for t in kernel.tensors
                     if t.name in kernel.inputs or t.name in kernel.outputs))


def floor_seconds(flops: float, nbytes: float, m: Machine = H200) -> float:
    """Speed-of-light time: FLOPs at the datasheet peak or bytes at the datasheet bandwidth."""
    return max(flops / m.peak_bf16_flops.value, nbytes / m.hbm_bytes_per_s.value)


def shape_label(dims: dict[str, int]) -> str:
    return "x".join(str(v) for v in dims.values())
