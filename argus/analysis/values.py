"""Values in the verifier: register tiles and the tags of their elements.

An element's tags are
- `fields`: its origin coordinates, keyed by position `(tensor, axis)` (so a tensor with a repeated axis
  name, or two tensors sharing a batch axis, never collide), and user fields added with `tag(x, f=...)`,
  keyed by name. `x[i, j].K` in an assert_tag looks up a user field K, else the first origin coordinate
  whose axis is named K (`lookup`);
- `term`: what the element is computed from (argus.analysis.terms), which also gives the zero / -inf /
  uninitialised flags.

A tile's tags are a function from (symbolic) element indices to element tags, so tiles are never
enumerated. `chain` identifies the accumulator a tile belongs to: `zeros()` starts one, an mma or an
`acc + x` continues it, and the sum reductions of one chain are the steps the coverage checks count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import z3

from argus.analysis import terms as T
from argus.analysis.symbolic import as_int

MISSING = -(1 << 40)  # value of a field an element does not have (in If-merges and assertions)


@dataclass(frozen=True)
class ElemTags:
    fields: dict = field(default_factory=dict)  # (tensor, axis) | name -> z3 Int term or int
    term: T.Term = T.VALUE
    origin: str = ""  # human description of where the data came from, e.g. "A" or "a_s <- A"

    @property
    def zero(self):
        return self.term.zero

    @property
    def uninit(self):
        return self.term.uninit

    @property
    def minf(self):
        return self.term.minf


TagFn = Callable[[tuple], ElemTags]
UNWRITTEN = ElemTags({}, T.UNINIT, "uninitialised")


def lookup(fields: dict, name: str, dims_of: Callable[[str], tuple]) -> object:
    """A field by name: a user field, else the first origin coordinate on an axis called `name`."""
    if name in fields:
        return fields[name]
    for key, v in fields.items():
        if isinstance(key, tuple):
            tensor, axis = key
            dims = dims_of(tensor)
            if axis < len(dims) and dims[axis] == name:
                return v
    return MISSING


def ambiguous(fields: dict, name: str, dims_of: Callable[[str], tuple]) -> list[str]:
    """The tensors whose axis `name` an element comes from at different coordinates (Q [B, H, S, D] and
    K [B, H, S, D] give a score both a query and a key S): `x[i, j].S` would silently pick the first.
    Empty when `name` is a user field or every such coordinate is the same term (a shared batch axis)."""
    if name in fields:
        return []
    seen: list[tuple[str, object]] = []
    for key, v in fields.items():
        if isinstance(key, tuple):
            tensor, axis = key
            dims = dims_of(tensor)
            if axis < len(dims) and dims[axis] == name:
                seen.append((tensor, z3.simplify(as_int(v))))
    if len(seen) < 2 or all(v.eq(seen[0][1]) for _t, v in seen[1:]):
        return []
    return [t for t, _v in seen]


def origin_keys(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if isinstance(k, tuple)}


def merge_fields(a: dict, b: dict) -> dict:
    """The union of two elements' fields, the left operand's first (and winning on a shared key)."""
    out = dict(a)
    for k, v in b.items():
        out.setdefault(k, v)
    return out


def merge_if(cond, then: ElemTags, other: ElemTags) -> ElemTags:
    """Tags of If(cond, then, other), field by field."""
    if cond is True:
        return then
    if cond is False:
        return other
    # a field only one side has is kept as is: the other side is a constant (a -inf fill, the
    # "nothing landed" placeholder), which sits at the same position and has no coordinates of its own
    fields = {}
    for n in list(then.fields) + [k for k in other.fields if k not in then.fields]:
        if n not in other.fields:
            fields[n] = then.fields[n]
        elif n not in then.fields:
            fields[n] = other.fields[n]
        else:
            fields[n] = z3.If(cond, as_int(then.fields[n]), as_int(other.fields[n]))
    # the origin label names the data, not the placeholder for "nothing landed here"
    origin = then.origin if other.origin in ("", "uninitialised", then.origin) else \
        other.origin if then.origin in ("", "uninitialised") else f"{then.origin}|{other.origin}"
    return ElemTags(fields, T.sel(cond, then.term, other.term), origin)


def combine(a: ElemTags, b: ElemTags, fn: str) -> ElemTags:
    return ElemTags(merge_fields(a.fields, b.fields), T.op(fn, a.term, b.term), a.origin or b.origin)


def unary(t: ElemTags, fn: str) -> ElemTags:
    return ElemTags(t.fields, T.op(fn, t.term), t.origin)


def invariant_fields(fields: dict, var) -> dict:
    """The fields that do not depend on `var` (a reduced or contracted index)."""
    name = var.decl().name()
    return {k: v for k, v in fields.items() if not T.mentions(as_int(v), {name})}


@dataclass(frozen=True)
class SymTile:
    """A register tile in the verifier: its shape and the tags of each element.

    `value` is set for index tiles (arange arithmetic, masks): idx -> z3 value of the element.
    """

    shape: tuple[int, ...]
    tags: TagFn
    layout: object = None  # FragmentLayout of the mma that produced it, if any
    chain: int | None = None  # the accumulator chain this tile continues (see module doc)
    value: object = None


def key(x):
    return ("z3", x.get_id()) if isinstance(x, z3.ExprRef) else x


def element_key(idx: tuple) -> tuple:
    """Identity of a (symbolic) element index: the accumulator chain of one element is keyed by it."""
    return tuple(key(i) for i in idx)


def memo(fn):
    """Memoise a tags function on the identity of its (symbolic) indices: the same element is asked
    for many times (operands, accumulator rows, coverage), and rebuilding z3 terms dominates."""
    cache: dict = {}

    def wrapped(idx):
        k = tuple(key(i) for i in idx)
        if k not in cache:
            cache[k] = (fn(idx), idx)  # keep idx alive so its ids stay unique
        return cache[k][0]
    return wrapped


def broadcast_index(t: SymTile, idx: tuple, n: int) -> tuple:
    """The index into `t` of element `idx` of an n-axis result (trailing axes aligned, size-1 axes
    broadcast)."""
    off = n - len(t.shape)
    return tuple(0 if d == 1 else idx[off + k] for k, d in enumerate(t.shape))
