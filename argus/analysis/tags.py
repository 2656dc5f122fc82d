"""Tags: the symbolic provenance of every element of a value.

An element's tags are its origin coordinates by axis name (data from `A: bf16[M, K]` carries M and
K), user fields added with `tag(x, field=...)`, and two flags: `zero` (a zero fill from outside the
tensor: contributes nothing to an mma) and `uninit` (shared memory no landed copy has filled: NaN in
the interpreter). A tile's tags are a function from (symbolic) element indices to element tags, so
tiles are never enumerated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3

from argus.analysis.symbolic import as_int

MISSING = -(1 << 40)  # value of a field an element does not have (in If-merges)


@dataclass(frozen=True)
class ElemTags:
    fields: dict[str, object] = field(default_factory=dict)  # name -> z3 Int term or int
    zero: object = False  # z3 Bool or bool
    uninit: object = False
    origin: str = ""  # human description of where the data came from, e.g. "A" or "a_s <- A"
    minf: object = False  # the value is -inf (a masked score): exp/exp2 turn it into a zero

    def get(self, name: str):
        return self.fields.get(name, MISSING)


TagFn = Callable[[tuple], ElemTags]


def const_tags() -> TagFn:
    return lambda idx: ElemTags()


def merge_if(cond, then: ElemTags, other: ElemTags) -> ElemTags:
    """Tags of If(cond, then, other), field by field."""
    if cond is True:
        return then
    if cond is False:
        return other
    # a field only one side has is kept as is: the other side is a constant (a -inf fill, the
    # "nothing landed" placeholder), which sits at the same position and has no coordinates of its own
    fields = {}
    for n in set(then.fields) | set(other.fields):
        if n not in other.fields:
            fields[n] = then.fields[n]
        elif n not in then.fields:
            fields[n] = other.fields[n]
        else:
            fields[n] = z3.If(cond, as_int(then.fields[n]), as_int(other.fields[n]))
    # the origin label names the data, not the placeholder for "nothing landed here"
    origin = then.origin if other.origin in ("", "uninitialised", then.origin) else \
        other.origin if then.origin in ("", "uninitialised") else f"{then.origin}|{other.origin}"
    return ElemTags(fields, _if(cond, then.zero, other.zero), _if(cond, then.uninit, other.uninit), origin,
                    _if(cond, then.minf, other.minf))


def _if(c, a, b):
    if isinstance(a, bool) and isinstance(b, bool) and a == b:
        return a
    return z3.If(c, _b(a), _b(b))


def _b(v):
    return z3.BoolVal(v) if isinstance(v, bool) else v


def combine(a: ElemTags, b: ElemTags, op: str = "+") -> ElemTags:
    """Tags of an elementwise result: the union of fields (the left operand wins on shared names),
    with the zero / -inf flags following the operation (a product with a zero is zero, a sum is zero
    only if both are, a difference with -inf is -inf, a max is -inf only if both are)."""
    fields = dict(b.fields)
    fields.update(a.fields)
    if op == "*":
        zero, minf = _or(a.zero, b.zero), _or(a.minf, b.minf)
    elif op == "/":
        zero, minf = a.zero, a.minf
    elif op == "max":
        zero, minf = _and(a.zero, b.zero), _and(a.minf, b.minf)
    elif op in ("cmp", "select"):
        zero, minf = _and(a.zero, b.zero), _and(a.minf, b.minf)
    else:
        zero, minf = _and(a.zero, b.zero), _or(a.minf, b.minf)
    return ElemTags(fields, zero, _or(a.uninit, b.uninit), a.origin or b.origin, minf)


def unary(t: ElemTags, fn: str) -> ElemTags:
    """Flags through a unary function: exp(-inf) is zero; log(0) is -inf; the rest keep them."""
    if fn in ("exp", "exp2"):
        return ElemTags(t.fields, t.minf, t.uninit, t.origin, False)
    if fn in ("log", "log2"):
        return ElemTags(t.fields, False, t.uninit, t.origin, t.zero)
    return t


def _and(a, b):
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    return z3.And(_b(a), _b(b))


def _or(a, b):
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return z3.Or(_b(a), _b(b))


@dataclass(frozen=True)
class Contribution:
    """One mma step summed into an accumulator: the contracted coordinate of its k-th term, per field."""

    coords: dict[str, object]  # field -> function kk -> coordinate (z3 term)
    live: object  # function kk -> z3 Bool: the term is not a zero fill
    extent: int  # number of terms (the tile's K)
    span: object
    step: dict


@dataclass(frozen=True)
class SymTile:
    """A register tile in the verifier: its shape and the tags of each element.

    `history` lists the mma steps accumulated into it (empty for a fresh tile; None when an operation
    mixed tiles so the history is no longer known).
    """

    shape: tuple[int, ...]
    tags: TagFn
    layout: object = None  # FragmentLayout of the mma that produced it, if any
    history: tuple | None = ()
    value: object = None  # for index tiles (arange arithmetic, masks): idx -> z3 value of the element
