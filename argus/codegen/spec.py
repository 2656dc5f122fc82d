"""What the code generator hands to the runtime besides the CUDA source: the launch contract."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of the generated `__global__` function, in order.

    kind: "tensor" (device pointer of tensor argument `arg`), "stride" (its stride along `axis`, in
    elements; the last axis has none: it is contiguous), "dim" (runtime dimension `arg`), "scalar"
    (scalar argument `arg`), "tmap" (a CUtensorMap over tensor `arg`: `tensor_maps[tmap]`, by value).
    """

    kind: str
    name: str  # the C parameter name
    ctype: str
    arg: str  # the Argus name it comes from
    axis: int | None = None
    tmap: int | None = None


@dataclass(frozen=True)
class TmaSpec:
    """A tensor map the runtime builds for bulk copies: boxes of box_rows x box_cols, swizzled. The
    columns are the tensor's last axis, the rows axis `row_axis` (-2: the one before it); every other
    axis is indexed (a box of 1), so a [T, H, D] tensor gives [rows, D] tiles of one head."""

    tensor: str
    box_rows: int
    box_cols: int
    swizzle: int
    row_axis: int = -2

    def box(self, rank: int) -> tuple[int, ...]:
        """The box's extent per axis, outermost first."""
        out = [1] * rank
        out[self.row_axis % rank] = self.box_rows
        out[-1] = self.box_cols
        return tuple(out)


@dataclass(frozen=True)
class GeneratedKernel:
    name: str  # entry symbol (extern "C")
    kernel: str  # the Argus kernel's name
    path: str  # the .arg file the #line directives name
    source: str  # CUDA C++
    threads: int
    smem_bytes: int  # dynamic shared memory per block, alignment slack included
    params: tuple[ParamSpec, ...]
    tensor_maps: tuple[TmaSpec, ...]
    aligned_inputs: tuple[str, ...]  # tensors read 16 bytes at a time (cp.async / TMA): 16-byte row pitch
    features: frozenset[str]  # "cp.async", "ldmatrix", "mma.sync", "wgmma", "tma", "mbarrier", "setmaxnreg"
    min_sm: int  # 80, or 90 when sm_90a instructions are used
    cluster: tuple[int, ...] = (1,)
    bulk_outputs: tuple[str, ...] = ()  # tensors written by TMA stores: 16-byte row pitch (padded if not)

    @property
    def needs_sm90a(self) -> bool:
        return self.min_sm >= 90
