"""Physical placement of a shared buffer declared with `layout=`: logical coordinates -> element offset.

The descriptor comes from the language: ("layout", shape, stride) is a CuTe shape:stride layout over
the buffer's coordinates, ("swizzle", B, M, S) an XOR swizzle of offsets, ("compose", outer, inner)
their composition outer(inner(x)). Read by the interpreter (it stores such buffers physically, so a
non-injective layout corrupts data exactly as on the GPU) and by the verifier's swizzle check.
"""

from __future__ import annotations

import numpy as np

from argus.ir.layout import Layout
from argus.ir.swizzle import Swizzle


def offsets(desc: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """The physical offset of every logical element of a buffer of `shape` (an int array of `shape`)."""
    coords = np.indices(shape)
    if len(shape) > 2:  # a leading stage axis keeps whole copies of the layout side by side
        inner = offsets(desc, shape[-2:])
        size = int(inner.max()) + 1 if inner.size else 0
        lead = np.ravel_multi_index(tuple(coords[:-2]), shape[:-2]) if shape[:-2] else 0
        return lead * size + inner[tuple(coords[-2:])]
    return _apply(desc, tuple(coords))


def _apply(desc: tuple, coords: tuple) -> np.ndarray:
    kind = desc[0]
    if kind == "layout":
        _, shape, stride = desc
        lay = Layout(_tup(shape), _tup(stride))
        if len(coords) == 1:
            return np.asarray(lay(coords[0]))
        return np.asarray(lay(tuple(coords)))
    if kind == "swizzle":
        _, b, m, s = desc
        raise ValueError("a swizzle applies to offsets: write compose(swizzle(B, M, S), layout(shape, stride))")
    if kind == "compose":
        _, outer, inner = desc
        x = _apply(inner, coords)
        if outer[0] == "swizzle":
            _, b, m, s = outer
            return np.asarray(Swizzle(b, m, s)(x))
        return _apply(outer, (x,))
    raise ValueError(f"unknown layout descriptor {desc!r}")


def _tup(x):
    return tuple(x) if isinstance(x, (tuple, list)) else x
