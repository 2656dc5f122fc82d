"""AST of the Argus language. Every node carries the source span it came from.

Nodes compare by identity (``eq=False``) so that later passes can key side tables by node.
"""

from __future__ import annotations

from dataclasses import dataclass

from argus.dsl.diagnostics import Span


@dataclass(frozen=True, eq=False)
class Node:
    span: Span


# ---- expressions ----
class Expr(Node):
    pass


@dataclass(frozen=True, eq=False)
class Name(Expr):
    id: str


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: int | float | bool | str | None


@dataclass(frozen=True, eq=False)
class TupleExpr(Expr):
    elts: tuple[Expr, ...]
    is_list: bool = False


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str  # + - * / // % @ << >> & | ^ **
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False)
class UnaryOp(Expr):
    op: str  # - ~ not
    operand: Expr


@dataclass(frozen=True, eq=False)
class Compare(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False)
class BoolOp(Expr):
    op: str  # and | or
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False)
class IfExp(Expr):
    cond: Expr
    then: Expr
    orelse: Expr


@dataclass(frozen=True, eq=False)
class Keyword(Node):
    name: str
    value: Expr


@dataclass(frozen=True, eq=False)
class Call(Expr):
    func: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...]

    def kw(self, name: str) -> Keyword | None:
        return next((k for k in self.kwargs if k.name == name), None)

    @property
    def func_name(self) -> str | None:
        return self.func.id if isinstance(self.func, Name) else None


@dataclass(frozen=True, eq=False)
class Slice(Expr):
    """``start:stop`` (either may be None) or ``start:+length`` (``length`` set, ``stop`` None)."""

    start: Expr | None
    stop: Expr | None
    length: Expr | None = None


@dataclass(frozen=True, eq=False)
class Subscript(Expr):
    value: Expr
    items: tuple[Expr, ...]  # Expr or Slice; Const(None) is a new axis


@dataclass(frozen=True, eq=False)
class Attribute(Expr):
    value: Expr
    attr: str


@dataclass(frozen=True, eq=False)
class Lambda(Expr):
    params: tuple[str, ...]
    body: Expr


# ---- statements ----
class Stmt(Node):
    pass


@dataclass(frozen=True, eq=False)
class Param(Stmt):
    name: str
    annotation: str | None
    default: Expr


@dataclass(frozen=True, eq=False)
class Specialize(Stmt):
    """`specialize COND: P=v, ...`: when the launch's dims satisfy COND (the first such statement wins),
    the kernel is built with those params (argus/specialize.py); each set is verified on its own."""

    cond: Expr
    params: tuple[Keyword, ...]


@dataclass(frozen=True, eq=False)
class Launch(Stmt):
    kwargs: tuple[Keyword, ...]


@dataclass(frozen=True, eq=False)
class Assign(Stmt):
    targets: tuple[Name, ...]
    value: Expr


@dataclass(frozen=True, eq=False)
class AugAssign(Stmt):
    target: Name
    op: str  # the binary operator: + - * / // %
    value: Expr


@dataclass(frozen=True, eq=False)
class ExprStmt(Stmt):
    expr: Expr


@dataclass(frozen=True, eq=False)
class Pass(Stmt):
    pass


@dataclass(frozen=True, eq=False)
class For(Stmt):
    var: str
    var_span: Span
    iter: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class If(Stmt):
    cond: Expr
    body: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class With(Stmt):
    context: Expr
    body: tuple[Stmt, ...]


# ---- top level ----
@dataclass(frozen=True, eq=False)
class Arg(Node):
    name: str
    dtype: str
    dims: tuple[str | int, ...] | None  # None: a scalar argument
    default: Expr | None
    dtype_span: Span


@dataclass(frozen=True, eq=False)
class Kernel(Node):
    name: str
    args: tuple[Arg, ...]
    body: tuple[Stmt, ...]
    reference: tuple[Stmt, ...] | None
    name_span: Span


@dataclass(frozen=True, eq=False)
class Layer(Node):
    """A composition of the file's kernels, declared for its float64 reference: the kernels run in sequence
    from host code (e.g. argus.moe.layer), and `reference` is the ground truth of the whole."""

    name: str
    args: tuple[Arg, ...]
    body: tuple[Stmt, ...]  # `param` declarations only
    reference: tuple[Stmt, ...]
    name_span: Span


@dataclass(frozen=True, eq=False)
class Module(Node):
    path: str
    kernels: tuple[Kernel, ...]
    layers: tuple[Layer, ...] = ()

    def layer(self, name: str) -> Layer:
        for g in self.layers:
            if g.name == name:
                return g
        raise KeyError(name)

    def kernel(self, name: str | None = None) -> Kernel:
        if name is None:
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


def walk(node: object):
    """Yield every AST node under ``node`` (pre-order)."""
    if isinstance(node, (list, tuple)):
        for x in node:
            yield from walk(x)
        return
    if not isinstance(node, Node):
        return
    yield node
    for f in node.__dataclass_fields__:
        if f == "span":
            continue
        v = getattr(node, f)
        if isinstance(v, (Node, list, tuple)):
            yield from walk(v)
