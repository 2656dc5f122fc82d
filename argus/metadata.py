"""Host builders of a kernel's integer metadata inputs, which the kernel names itself.

A kernel whose integer inputs are metadata its `assume`s constrain (a routing, a tile schedule) runs, in
`argus run`, the bench and `argus tune`, on inputs its contract admits. By default they are solved from the
assumes with Z3 (argus.analysis.contract_inputs): general, and slow at large sizes. A kernel may instead
name a host builder in its launch statement,

    launch grid=(NT, cdiv(F, BN)), warpgroups=3, metadata="moe_routing"

and then its dims and integer inputs come from that builder (a real top-k routing for examples/moe.arg).
Nothing in the interpreter, the runtime or the tuner picks a kernel out by its argument names: the
declaration is the only thing that selects a builder, and `argus check` refuses an unknown name or a
kernel with dims the builder cannot size, at the launch line. `argus check` itself never runs a builder
(the verifier and its replay solve the contract). The builders are library code, as a framework ships its
MoE routing utilities; a kernel that declares none is treated like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Builder:
    name: str
    doc: str
    sizes: tuple[str, ...]  # the -D names that size it; they need not be dims of the kernel (moe_up has no T)
    dims: frozenset[str]  # the kernel dims it derives; a kernel with another dim cannot use it
    # (kernel, defines, seed) -> (dims, every input array with the metadata filled in, outputs poisoned)
    build: Callable[..., tuple[dict[str, int], dict[str, np.ndarray]]]
    # the integer tensor names it fills; the kernel's integer inputs must be among them
    tensors: frozenset[str]


def _moe_routing(kernel, defines: dict, seed: int | None):
    from argus import moe

    return moe.routed_inputs(kernel, defines, seed)


def _builders() -> dict[str, Builder]:
    from argus import moe

    return {"moe_routing": Builder(
        "moe_routing", "a top-k routing of T tokens over E experts (argus.moe): rows sorted by expert, BM-row "
        "tiles", moe.ROUTING_SIZES, frozenset(moe.ROUTED_DIMS), _moe_routing, frozenset(moe.METADATA_NAMES))}


def names() -> tuple[str, ...]:
    return tuple(_builders())


def lookup(name: str) -> Builder | None:
    return _builders().get(name)


def builder_for(kernel) -> Builder | None:
    """The builder the kernel's launch statement names, or None (contract-solved inputs)."""
    name = getattr(kernel, "metadata", None)
    return None if name is None else lookup(name)


def build_for_run(path, defines: dict, kernel_name: str | None):
    """The kernel `argus run` runs. A kernel with a metadata builder may be given that builder's sizes
    (-D T= KTOP= for a routing) that are not dims of its own (moe_up has no T): they size the builder. Any
    other kernel is built with every -D, so an unknown name is still an error there."""
    from argus.dsl.diagnostics import ArgusError
    from argus.sources import build_file  # .arg or .py

    sizes = {s for b in _builders().values() for s in b.sizes}
    rest = {d: v for d, v in defines.items() if d not in sizes}
    if len(rest) < len(defines):
        try:
            k = build_file(path, rest, kernel_name)
        except ArgusError:  # reported by the build with every -D below
            k = None
        b = builder_for(k) if k is not None else None
        if b is not None and all(d in b.sizes or d in rest for d in defines):
            return k
    return build_file(path, defines, kernel_name)


def problem(name: str, dims: list[str], int_inputs: list[str]) -> str | None:
    """Why a kernel with these dims and integer inputs cannot use builder `name` (None: it can)."""
    b = lookup(name)
    if b is None:
        return f"unknown metadata builder '{name}'"
    extra = [d for d in dims if d not in b.dims]
    if extra:
        return (f"metadata=\"{name}\" sizes the dims {', '.join(sorted(b.dims))}; this kernel also has "
                f"{', '.join(extra)}")
    other = [t for t in int_inputs if t not in b.tensors]
    if other:
        return (f"metadata=\"{name}\" fills the integer tensors {', '.join(sorted(b.tensors))}; this kernel also "
                f"reads {', '.join(other)}")
    return None
