"""The lowered program: the one form read by the interpreter, the verifier and the code generator.

Compile-time parameters are bound (they appear only as constants), names are resolved, every
expression carries its type, and `pipeline` loops are expanded into an explicit schedule of async
copies, commit groups, waits and barriers (argus/ir/passes/pipeline.py). Every node keeps the source
span it came from, so all three consumers report against the `.arg` line.

Data-dependent values (MoE routing metadata):
- `Load(type=ScalarT(dt), ref=Ref("global", T, starts=(i, j, ...), extents=(None, None, ...)))` is a
  scalar read of T[i, j, ...] (`load(T[i, j])` in the language); the indices may themselves be such
  loads (`W[load(tile_expert[t]), ...]` is a Ref whose start is a Load).
- `Store.mask` (`store(dst, v, where=m)`): a bool scalar or register tile broadcastable to dst.shape;
  only elements whose mask is true are written.
- `Assume.cond` may mention scalar loads: the interpreter checks it where it executes, the verifier
  assumes it for the block (integer tensors are uninterpreted functions there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from argus.dsl import ast as dsl_ast
from argus.dsl.diagnostics import Span
from argus.dsl.types import DType, ScalarT, TileT, Type


# ---- expressions ----
@dataclass(frozen=True)
class Expr:
    type: Type
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool | None = None


@dataclass(frozen=True)
class Var(Expr):
    """A local, a loop variable, a runtime dimension or a scalar argument."""

    name: str = ""


@dataclass(frozen=True)
class Special(Expr):
    """Hardware indices: block_id(axis), num_blocks(axis), thread_id, warp_id, lane_id, warpgroup_id."""

    kind: str = ""
    axis: int = 0


@dataclass(frozen=True)
class Bin(Expr):
    op: str = ""
    a: Expr | None = None
    b: Expr | None = None


@dataclass(frozen=True)
class Un(Expr):
    op: str = ""  # "-", "~", "not"
    a: Expr | None = None


@dataclass(frozen=True)
class Cmp(Expr):
    op: str = ""  # == != < <= > >= and or
    a: Expr | None = None
    b: Expr | None = None


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr | None = None
    a: Expr | None = None
    b: Expr | None = None


@dataclass(frozen=True)
class Math(Expr):
    """Elementwise or scalar function: exp exp2 log log2 sqrt rsqrt abs min max cdiv cast."""

    fn: str = ""
    args: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Reduce(Expr):
    op: str = ""  # sum | max | min | argmax (an i32 index along the axis: the first of equal maxima)
    x: Expr | None = None
    axis: int = 0


@dataclass(frozen=True)
class Full(Expr):
    """A register tile filled with a value (zeros/full); shape and dtype are in `type`."""

    value: Expr | None = None


@dataclass(frozen=True)
class Arange(Expr):
    pass


@dataclass(frozen=True)
class Ref:
    """A view of a global tensor or a shared buffer.

    Per axis of the base: `starts[i]` is the first index and `extents[i]` the tile length, or None
    when the axis is indexed by `starts[i]` and dropped. `transposed` swaps the two kept axes (a 2-D
    view read as its transpose, e.g. K-tile.T in attention).
    """

    space: str  # "global" | "shared"
    base: str
    starts: tuple[Expr, ...]
    extents: tuple[int | None, ...]
    dtype: DType
    transposed: bool = False
    span: Span | None = field(default=None, compare=False, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        s = tuple(e for e in self.extents if e is not None)
        return s[::-1] if self.transposed else s


@dataclass(frozen=True)
class Load(Expr):
    """A read of a view into registers.

    Scalar load (`load(T[i, j])`): `ref` is a global Ref whose `extents` are all None (every axis
    indexed by `starts`) and `type` is ScalarT(ref.dtype, const=False): one element, the same for
    every thread (a plain global load; an index outside T is a fault, whatever `masked` says). Its
    value may index other tensors, enter assume/tag lambdas and control flow.
    """

    ref: Ref | None = None
    masked: bool = True

    @property
    def is_scalar(self) -> bool:
        return isinstance(self.type, ScalarT)


@dataclass(frozen=True)
class Mma(Expr):
    """acc + a @ b with a chosen instruction; a and b are shared views (Ref) or register tiles."""

    a: Ref | Expr | None = None
    b: Ref | Expr | None = None
    acc: Expr | None = None
    instr: str = "mma.sync"
    layout: FragmentLayout | None = None  # set by the layout-assignment pass


@dataclass(frozen=True)
class FragmentLayout:
    """How an MMA's accumulator is spread over the block: instruction and warp (group) grid."""

    instr: str
    tile: tuple[int, int]  # (M, N) of the accumulator
    warps_m: int  # warps (mma.sync) or warpgroups (wgmma) along M
    warps_n: int
    inst_shape: tuple[int, int, int]  # (m, n, k) of one instruction


@dataclass(frozen=True)
class RegLayout:
    """How a register tile is spread over the threads of its scope (the block, or one role).

    Set by layout assignment (argus/ir/passes/layouts.py, which also turns it into a Fragment map).
    kind "mma": the accumulator fragment of the `mma` whose FragmentLayout is `mma`; kind "blocked":
    threads in row-major order over runs of `vec` consecutive elements of the last axis (loads,
    arithmetic and stores with no mma involved); "slice": the 1-D tile of axis `keep` of `parent`
    (reduction results, broadcast vectors); "transposed": `parent` read with its axes exchanged.
    """

    kind: str  # "mma" | "blocked" | "rows" | "slice" | "transposed" | "index" (argus/ir/reg_layout.py)
    shape: tuple[int, ...]
    threads: int
    mma: FragmentLayout | None = None
    vec: int = 1
    parent: RegLayout | None = None  # "slice": the layout whose axis `keep` this 1-D tile is; "transposed"
    keep: int = 0
    row_threads: int = 0  # "blocked": at most this many threads along a row (0: as many as the row takes)


@dataclass(frozen=True)
class Shfl(Expr):
    x: Expr | None = None
    mask: int = 0


@dataclass(frozen=True)
class Reshape(Expr):
    """Insert unit axes (x[:, None]); the new shape is in `type`."""

    x: Expr | None = None


@dataclass(frozen=True)
class Transpose(Expr):
    x: Expr | None = None


@dataclass(frozen=True)
class Lambda(Expr):
    params: tuple[str, ...] = ()
    body: Expr | None = None


@dataclass(frozen=True)
class Tag(Expr):
    """x with extra tag fields; a field is a scalar expression or a lambda over element indices."""

    x: Expr | None = None
    fields: tuple[tuple[str, Expr], ...] = ()


@dataclass(frozen=True)
class ElemTag(Expr):
    """Inside a tag lambda: the tag field `field` of element `indices` of a view or register tile."""

    source: Ref | Expr | None = None
    indices: tuple[Expr, ...] = ()
    field: str = ""


# ---- statements ----
@dataclass(frozen=True)
class Stmt:
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Let(Stmt):
    name: str = ""
    value: Expr | None = None
    layout: RegLayout | None = None  # register tiles: set by layout assignment


@dataclass(frozen=True)
class AllocShared(Stmt):
    name: str = ""
    dtype: DType | None = None
    shape: tuple[int, ...] = ()
    swizzle: int = 0
    layout: tuple | None = None  # explicit placement (argus.ir.smem_layout), instead of a swizzle mode


@dataclass(frozen=True)
class AllocBarrier(Stmt):
    """`n` mbarriers (n=None: a single one), each completing a phase after `count` arrivals."""

    name: str = ""
    count: int = 1
    n: int | None = None


@dataclass(frozen=True)
class BarrierRef:
    name: str
    index: Expr | None = None  # None for a single mbarrier


@dataclass(frozen=True)
class Copy(Stmt):
    """dst <- src. mode: "sync" (registers through), "async" (cp.async), "bulk" (TMA)."""

    dst: Ref | None = None
    src: Ref | Expr | None = None
    mode: str = "sync"
    masked: bool = True  # out-of-bounds source elements read as zero instead of faulting
    barrier: BarrierRef | None = None  # mbarrier completed by a bulk copy
    layout: RegLayout | None = None  # a register-tile source: set by layout assignment


@dataclass(frozen=True)
class Commit(Stmt):
    pass


@dataclass(frozen=True)
class WaitGroup(Stmt):
    """cp.async.wait_group n: all but the newest n committed groups of this thread have landed."""

    n: int = 0


@dataclass(frozen=True)
class Barrier(Stmt):
    pass


@dataclass(frozen=True)
class Turn(Stmt):
    """One edge of a `with turn():` block, which lowering flattens to Turn("begin"), the body, Turn("end")
    in the enclosing statement list (so every pass sees the body's statements where they were written).

    The role's warpgroups run the block one at a time, round robin in warpgroup order (ping-pong: one
    warpgroup's tensor-core work is issued while the others run their softmax or epilogue). It orders
    execution only: no data moves, so the interpreter and the verifier run the body as plain statements.
    Why that is sound (deadlock freedom; argus/dsl/turns.py refuses what the argument does not cover):
    control flow around a turn is uniform over the role's warpgroups, so each runs the same sequence of
    turns; inside a turn no wait follows an arrive and no barrier spans the role, so a warpgroup holding
    the turn needs nothing that the role's later-turn warpgroups do only in their own turn -- what it waits
    for, the lockstep program the verifier checks has already done."""

    edge: str = "begin"  # "begin" | "end"


@dataclass(frozen=True)
class Arrive(Stmt):
    barrier: BarrierRef | None = None


@dataclass(frozen=True)
class WaitBarrier(Stmt):
    """Wait until the phase of parity `phase` of the barrier has completed."""

    barrier: BarrierRef | None = None
    phase: Expr | None = None


@dataclass(frozen=True)
class ExpectTx(Stmt):
    """Arrive on the barrier and announce `nbytes` of bulk copies that complete the phase."""

    barrier: BarrierRef | None = None
    nbytes: Expr | None = None


@dataclass(frozen=True)
class Store(Stmt):
    """dst <- value. `mask` (store(..., where=m)): None, or a bool expression (a ScalarT, or a register
    TileT broadcastable to dst.shape, aligned at the trailing axes); an element whose mask is false is
    not written (on top of `masked`, which skips elements outside the tensor)."""

    dst: Ref | None = None
    value: Expr | None = None
    masked: bool = True  # out-of-bounds elements are skipped instead of faulting
    layout: RegLayout | None = None  # a register-tile value: set by layout assignment
    mask: Expr | None = None  # store(..., where=mask): elements with a false mask are not written


@dataclass(frozen=True)
class AtomicAdd(Stmt):
    """dst[i] += value[i] for every element, atomically (`atomic_add(dst, value, where=m)`): dst is a tile
    of a global f32 / bf16 tensor that the kernel both reads and writes (it accumulates into what is
    there); elements outside the tensor (masked) or where `mask` is false are not touched. Several blocks
    (or threads) may add to one element; the sum does not depend on their order beyond rounding."""

    dst: Ref | None = None
    value: Expr | None = None
    masked: bool = True
    layout: RegLayout | None = None  # a register-tile value: set by layout assignment
    mask: Expr | None = None


@dataclass(frozen=True)
class For(Stmt):
    var: str = ""
    start: Expr | None = None
    stop: Expr | None = None
    step: Expr | None = None
    body: tuple[Stmt, ...] = ()
    kind: str = "serial"  # "serial" | "unroll" | "persistent"


@dataclass(frozen=True)
class PipelineFor(Stmt):
    """Before the pipeline pass: `for var in pipeline(count, stages=S)`; body = producer + consumer."""

    var: str = ""
    count: Expr | None = None
    stages: int = 1
    producer: tuple[Stmt, ...] = ()
    consumer: tuple[Stmt, ...] = ()
    wait_span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr | None = None
    then: tuple[Stmt, ...] = ()
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Assume(Stmt):
    """A precondition on runtime values (e.g. K % 8 == 0): checked by the interpreter where it executes,
    assumed by the verifier. It may mention scalar loads (a metadata contract).

    Quantified form (`assume(lambda i: cond, over=N)`): `cond` is a Lambda of one parameter and `over`
    an index expression; the condition holds for every i in 0..N-1. A host-side contract: the
    interpreter checks every i, the verifier instantiates it where it needs it (output coverage); a GPU
    kernel need not evaluate it."""

    cond: Expr | None = None
    over: Expr | None = None


@dataclass(frozen=True)
class AssertTag(Stmt):
    predicate: Lambda | None = None
    name: str | None = None


@dataclass(frozen=True)
class Role(Stmt):
    kind: str = ""  # "producer" | "consumer"
    warpgroups: int = 1
    registers: int | None = None
    body: tuple[Stmt, ...] = ()
    # a consumer's ring stages: "deferred" = released after the next step's wgmmas are issued (timing
    # only, argus/codegen/release_lag.py), "immediate" = after the stage's own wgmmas complete
    release: str = "deferred"


# ---- kernel ----
@dataclass(frozen=True)
class TensorDecl:
    name: str
    dtype: DType
    dims: tuple[str | int, ...]
    span: Span | None = field(default=None, compare=False, repr=False)  # the declaration, for argument errors


@dataclass(frozen=True)
class ScalarDecl:
    name: str
    dtype: DType
    default: float | int | None
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Kernel:
    name: str
    path: str
    tensors: tuple[TensorDecl, ...]
    scalars: tuple[ScalarDecl, ...]
    dims: tuple[str, ...]
    params: tuple[tuple[str, object], ...]
    grid: tuple[Expr, ...]
    threads: int
    cluster: tuple[int, ...]
    body: tuple[Stmt, ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    reference: tuple[dsl_ast.Stmt, ...] | None = field(default=None, compare=False, repr=False)
    span: Span | None = field(default=None, compare=False, repr=False)
    blocks_per_sm: int | None = None  # `launch ..., blocks_per_sm=N`: __launch_bounds__(threads, N)
    metadata: str | None = None  # `launch ..., metadata="name"`: host builder of its integer inputs (argus.metadata)

    def tensor(self, name: str) -> TensorDecl:
        return next(t for t in self.tensors if t.name == name)

    @property
    def param_dict(self) -> dict[str, object]:
        return dict(self.params)


def is_tile(t: Type) -> bool:
    return isinstance(t, TileT)


def is_scalar(t: Type) -> bool:
    return isinstance(t, ScalarT)
