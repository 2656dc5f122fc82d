"""Types of the Argus language: element dtypes, scalars, tensors, tiles and the few opaque kinds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    kind: str  # "float" | "int" | "uint" | "bool"

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {d.name: d for d in [
    DType("bf16", 16, "float"), DType("f16", 16, "float"), DType("f32", 32, "float"),
    DType("f64", 64, "float"), DType("f8e4m3", 8, "float"), DType("f8e5m2", 8, "float"),
    DType("i8", 8, "int"), DType("i16", 16, "int"), DType("i32", 32, "int"), DType("i64", 64, "int"),
    DType("u8", 8, "uint"), DType("u32", 32, "uint"), DType("bool", 8, "bool"),
]}
I32 = DTYPES["i32"]
F32 = DTYPES["f32"]
BOOL = DTYPES["bool"]


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary arithmetic op: floats win, then the wider type."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    return a if a.bits >= b.bits else b


class Type:
    pass


@dataclass(frozen=True)
class ScalarT(Type):
    dtype: DType
    const: bool  # known at compile time (a param, a literal, or arithmetic on those)

    def __str__(self) -> str:
        return f"{'const ' if self.const else ''}{self.dtype}"


@dataclass(frozen=True)
class GlobalT(Type):
    """A tensor argument in global memory; dims are symbolic names or ints."""

    name: str
    dtype: DType
    dims: tuple[str | int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class TileT(Type):
    """A tile with a compile-time shape, living in ``space``.

    space: "global" (a view of a tensor argument), "shared" (a buffer or a view of one) or "reg"
    (register values distributed over the threads of the block).
    """

    dtype: DType
    shape: tuple[int, ...]
    space: str

    def __str__(self) -> str:
        where = {"reg": "", "shared": "shared ", "global": "global "}[self.space]
        return f"{where}{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class ElemT(Type):
    """One element of a tile inside a tag lambda: has tag fields (``.K``, ``.expert``)."""

    dtype: DType


@dataclass(frozen=True)
class OpaqueT(Type):
    kind: str  # "str" | "dtype" | "typeexpr" | "mbarrier" | "layout" | "lambda" | "none" | "iter" | "role"

    def __str__(self) -> str:
        return self.kind


STR = OpaqueT("str")
NONE = OpaqueT("none")
MBARRIER = OpaqueT("mbarrier")
MBARRIER_ARRAY = OpaqueT("mbarrier array")
LAYOUT = OpaqueT("layout")
LAMBDA = OpaqueT("lambda")
DTYPE_T = OpaqueT("dtype")
TYPEEXPR = OpaqueT("typeexpr")
ITER = OpaqueT("iter")
ROLE = OpaqueT("role")


def shape_str(shape: tuple) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"
