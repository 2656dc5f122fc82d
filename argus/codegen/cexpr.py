"""C spellings: element types, literals, and the layout algebra rendered as index arithmetic.

Layouts and swizzles are rendered from the same `Layout` / `Swizzle` objects that the interpreter
tabulates and the verifier encodes (argus/ir/layout.py, swizzle.py), so generated address math is
that algebra written in C: for a linear index ``i`` into ``(s0, s1, ...):(d0, d1, ...)`` the offset
is ``sum((i / (s0*...*s_{k-1})) % s_k * d_k)``. Constant sub-expressions fold in Python, so a
fully unrolled slot index costs nothing at run time.
"""

from __future__ import annotations

import math

from argus.dsl.types import DType
from argus.ir.layout import Layout, flatten
from argus.ir.swizzle import Swizzle

# Storage type of each element dtype in registers and memory.
CTYPE: dict[str, str] = {
    "bf16": "__nv_bfloat16", "f16": "__half", "f32": "float", "f64": "double",
    "f8e4m3": "__nv_fp8_e4m3", "f8e5m2": "__nv_fp8_e5m2",
    "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
    "u8": "unsigned char", "u32": "unsigned", "bool": "bool",
}  # fmt: skip

# The type arithmetic on an element is done in (narrow floats compute in float, rounded per op).
COMPUTE: dict[str, str] = {"bf16": "float", "f16": "float", "f8e4m3": "float", "f8e5m2": "float"}

C_KEYWORDS = frozenset("""
auto bool break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while class namespace template typename this new delete operator private public protected
virtual friend using true false nullptr asm catch throw try explicit mutable constexpr decltype
alignas alignof noexcept static_assert thread_local min max dim3 uint4 float2 float4
""".split())


def ctype(dt: DType) -> str:
    return CTYPE[dt.name]


def compute_type(dt: DType) -> str:
    return COMPUTE.get(dt.name, CTYPE[dt.name])


def wrap_narrow(dt: DType, x: str) -> str:
    """Arithmetic on an integer narrower than int is C's int arithmetic; the language's (the interpreter's,
    NumPy's, Triton's) is the element type's: the result wraps to it (i8 100 * 100 is 16)."""
    if dt.kind in ("int", "uint") and dt.bits < 32:
        return f"(({CTYPE[dt.name]})({x}))"
    return x


def is_narrow_float(dt: DType) -> bool:
    return dt.name in COMPUTE


def to_compute(dt: DType, x: str) -> str:
    """A stored element as its compute type."""
    if dt.name == "bf16":
        return f"__bfloat162float({x})"
    if dt.name == "f16":
        return f"__half2float({x})"
    if dt.name in ("f8e4m3", "f8e5m2"):
        return f"float({x})"
    return x


def from_compute(dt: DType, x: str) -> str:
    """A compute-type value stored as `dt` (round to nearest even, as the interpreter does)."""
    if dt.name == "bf16":
        return f"__float2bfloat16_rn({x})"
    if dt.name == "f16":
        return f"__float2half_rn({x})"
    if dt.name in ("f8e4m3", "f8e5m2"):
        return f"{CTYPE[dt.name]}({x})"
    return f"({CTYPE[dt.name]})({x})"


def literal(value: object, dt: DType) -> str:
    if dt.kind == "bool":
        return "true" if value else "false"
    if dt.is_float:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return "__int_as_float(0x7fffffff)"
        if math.isinf(v):
            return "(-__int_as_float(0x7f800000))" if v < 0 else "__int_as_float(0x7f800000)"
        text = repr(v)
        return (text if dt.bits == 64 else text + "f").replace("inf", "INFINITY")
    v = int(value)  # type: ignore[arg-type]
    if dt.bits == 64:
        return f"{v}ll"
    if dt.kind == "uint":
        return f"{v}u"
    return str(v)


# ---- index arithmetic ------------------------------------------------------------------------------


def _paren(x: str) -> str:
    return x if x.replace("_", "").isalnum() or (x.startswith("(") and x.endswith(")") and _balanced(x[1:-1])) \
        else f"({x})"


def _balanced(x: str) -> bool:
    depth = 0
    for ch in x:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def c_add(*terms: str | int) -> str | int:
    """Sum of C terms with constants folded (an int when everything is constant)."""
    const = sum(t for t in terms if isinstance(t, int))
    parts = [t for t in terms if isinstance(t, str) and t != "0"]
    if not parts:
        return const
    if const:
        parts.append(str(const))
    return " + ".join(parts)


def c_mul(x: str | int, k: int) -> str | int:
    if isinstance(x, int):
        return x * k
    if k == 0:
        return 0
    return x if k == 1 else f"{_paren(x)} * {k}"


def c_div(x: str | int, k: int) -> str | int:
    if isinstance(x, int):
        return x // k
    return x if k == 1 else f"{_paren(x)} / {k}"


def c_mod(x: str | int, k: int) -> str | int:
    if isinstance(x, int):
        return x % k
    return 0 if k == 1 else f"{_paren(x)} % {k}"


def render_layout(layout: Layout, index: str | int) -> str | int:
    """``layout(index)`` for a non-negative linear index given as C text (or an int: folded)."""
    shapes, strides = flatten(layout.shape), flatten(layout.stride)
    terms: list[str | int] = []
    prefix = 1
    for k, (s, d) in enumerate(zip(shapes, strides)):
        last = k == len(shapes) - 1
        if s != 1 and d != 0:
            coord = c_div(index, prefix)
            if not last:
                coord = c_mod(coord, s)
            terms.append(c_mul(coord, d))
        prefix *= s
    return c_add(*terms)


def render_coord(layout: Layout, coords: tuple[str | int, ...]) -> str | int:
    """``layout((c0, c1, ...))``: one (possibly nested) mode per coordinate, each a linear index."""
    if layout.rank() != len(coords):
        raise ValueError(f"{len(coords)} coordinates for a rank-{layout.rank()} layout {layout}")
    return c_add(*(render_layout(layout[i], c) for i, c in enumerate(coords)))


def render_swizzle(sw: Swizzle, x: str | int) -> str | int:
    """``sw(x)``: XOR the source bit field into the target field (identity for B = 0)."""
    if sw.bits == 0:
        return x
    if isinstance(x, int):
        return int(sw(x))
    mask = (1 << sw.bits) - 1
    return f"ag_swizzle<{sw.src_lo}, {sw.dst_lo}, {mask}>({x})"
