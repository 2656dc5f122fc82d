"""Semantic checks: names, types, ranks, tile shapes, compile-time-ness, launch geometry.

``check_kernel`` binds compile-time parameters (defaults, overridden by ``-D``), then types every
expression of the kernel body. It records, per AST node, the type and (when known at compile time) the
value, plus what each name refers to. ``argus.ir.lower`` translates the checked AST into the IR using
these tables and never re-derives a type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from argus.dsl import ast, turns
from argus.dsl.bounds import fold_binary
from argus.dsl.diagnostics import ArgusError, Diagnostic, Span, error
from argus.dsl.reference import REFERENCE_NAMES
from argus.dsl.types import (
    BOOL,
    DTYPE_T,
    DTYPES,
    F32,
    I32,
    ITER,
    LAMBDA,
    LAYOUT,
    MBARRIER,
    MBARRIER_ARRAY,
    NONE,
    ROLE,
    STR,
    TYPEEXPR,
    DType,
    ElemT,
    GlobalT,
    OpaqueT,
    ScalarT,
    TileT,
    Type,
    promote,
    shape_str,
)

MMA_INSTRS = ("mma.sync", "wgmma")
SWIZZLES = (0, 32, 64, 128)
MAX_THREADS = 1024
NAMED_CONSTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi}
# Builtins that are statements (their value is None); anything else used as a statement is an error.
STATEMENT_BUILTINS = {"copy", "copy_async", "copy_bulk", "commit", "wait_async", "barrier", "store",
                      "arrive", "wait", "expect_tx", "assert_tag", "assume", "atomic_add"}
ITERATORS = {"range", "pipeline", "unroll", "persistent"}


RELEASE_MODES = ("deferred", "immediate")  # role(..., release=): when ring stages are handed back


@dataclass(frozen=True)
class LaunchInfo:
    grid: tuple[ast.Expr, ...]  # up to 3 index expressions over runtime dims and params
    threads: int
    cluster: tuple[int, ...]
    span: Span
    blocks_per_sm: int | None = None  # `blocks_per_sm=`: the occupancy promised to ptxas (caps registers)
    metadata: str | None = None  # `metadata="name"`: the host builder of its integer inputs (argus.metadata)
    metadata_node: ast.Expr | None = field(default=None, compare=False)


@dataclass
class Checked:
    """The result of semantic analysis of one kernel, consumed by argus.ir.lower."""

    kernel: ast.Kernel
    params: dict[str, object]
    dims: list[str]  # runtime dims, in order of first appearance
    tensors: dict[str, GlobalT]
    scalars: dict[str, ScalarT]
    launch: LaunchInfo
    outputs: list[str]  # tensor args written by `store`
    inputs: list[str]  # tensor args read
    types: dict[int, Type] = field(default_factory=dict)  # id(ast node) -> type
    consts: dict[int, object] = field(default_factory=dict)  # id(ast node) -> compile-time value
    symbols: dict[int, str] = field(default_factory=dict)  # id(Name) -> kind of the name
    tag_fields: set[str] = field(default_factory=set)

    def type_of(self, node: ast.Expr) -> Type:
        return self.types[id(node)]

    def const(self, node: ast.Expr, default=None):
        return self.consts.get(id(node), default)

    def is_const(self, node: ast.Expr) -> bool:
        return id(node) in self.consts


@dataclass
class CheckedLayer:
    """A checked `layer`: what argus.dsl.reference needs to evaluate its ground truth."""

    layer: ast.Layer
    params: dict[str, object]
    dims: list[str]
    tensors: dict[str, GlobalT]
    scalars: dict[str, ScalarT]
    outputs: list[str]  # tensor arguments the reference assigns


def _fmt(t: Type) -> str:
    return str(t)


class _Scope:
    def __init__(self) -> None:
        self.vars: dict[str, tuple[str, Type]] = {}


class _Checker:
    def __init__(self, kernel: ast.Kernel | ast.Layer, defines: dict[str, object]):
        self.k = kernel
        self.defines = dict(defines)
        self.params: dict[str, object] = {}
        self.dims: list[str] = []
        self.tensors: dict[str, GlobalT] = {}
        self.scalars: dict[str, ScalarT] = {}
        self.types: dict[int, Type] = {}
        self.consts: dict[int, object] = {}
        self.symbols: dict[int, str] = {}
        self.names: dict[str, tuple[str, Type]] = {}
        self.outputs: list[str] = []
        self.inputs: list[str] = []
        self.launch: LaunchInfo | None = None
        self.tag_fields: set[str] = set()
        self.scalar_loads: dict[str, ast.Expr] = {}  # tensor -> its first scalar load
        self.role_depth = 0
        self.turn_depth = 0
        self.enclosing: list[ast.Expr] = []  # `if` conditions and loop iterables inside the current role
        self.varying: set[str] | None = None  # names that may differ between threads (argus/dsl/turns.py)
        self.pipeline_depth = 0
        self.lambda_vars: list[set[str]] = []

    # ---- helpers ----
    def err(self, code: str, msg: str, node: ast.Node | Span, *notes: str) -> ArgusError:
        span = node if isinstance(node, Span) else node.span
        return error(code, msg, span, *notes)

    def set(self, node: ast.Expr, t: Type, value=None, has_value: bool = False) -> Type:
        self.types[id(node)] = t
        if has_value:
            self.consts[id(node)] = value
        return t

    def need_const_int(self, node: ast.Expr, what: str) -> int:
        t = self.expr(node)
        if id(node) not in self.consts:
            raise self.err("not-compile-time", f"{what} must be known at compile time", node,
                           "use a literal or a `param`; runtime dims and block/thread ids are not allowed here")
        v = self.consts[id(node)]
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.err("type", f"{what} must be an integer, got {_fmt(t)} {v!r}", node)
        return v

    def need_index(self, node: ast.Expr, what: str) -> ScalarT:
        t = self.expr(node)
        if not (isinstance(t, ScalarT) and t.dtype.kind in ("int", "uint", "bool")):
            raise self.err("type", f"{what} must be an integer index expression, got {_fmt(t)}", node)
        return t

    # ---- kernel ----
    def run(self) -> Checked:
        k = self.k
        self.signature()
        self.block(k.body, top=True)
        for name, node in self.scalar_loads.items():
            if name in self.outputs:
                # the verifier models a scalar-loaded tensor as fixed contents (an uninterpreted function)
                raise self.err("type", f"load({name}[...]) reads a scalar from '{name}', which this kernel also "
                               "stores to", node, "scalar loads read inputs only (routing metadata, schedules)")
        if self.launch is None:
            raise self.err("missing-launch", f"kernel '{k.name}' has no launch geometry", k.name_span,
                           "add e.g. `launch grid=(cdiv(M, BM), cdiv(N, BN)), threads=256`")
        if self.launch.metadata is not None:
            from argus import metadata as builders

            ints = [n for n in self.inputs if n in self.tensors and not self.tensors[n].dtype.is_float]
            why = builders.problem(self.launch.metadata, self.dims, ints)
            if why is not None:
                raise self.err("launch", why, self.launch.metadata_node,
                               "drop metadata= (inputs are then solved from the kernel's assumes) or rename")
        if k.reference is not None:
            self.check_reference(k.reference)
        return Checked(k, self.params, self.dims, self.tensors, self.scalars, self.launch,
                       self.outputs, self.inputs, self.types, self.consts, self.symbols, self.tag_fields)

    def run_layer(self) -> CheckedLayer:
        """A layer: its signature, `param`s and reference block; its outputs are the arguments the reference
        assigns."""
        g = self.k
        self.signature()
        for s in g.body:
            if isinstance(s, (ast.Assign, ast.ExprStmt)):
                continue  # bindings, workspaces and kernel calls: argus.layers.plan_layer checks them
            if not isinstance(s, (ast.Param, ast.Pass)):
                raise self.err("layer", "a layer holds `param`s, integer bindings, `empty(...)` workspaces and "
                               "calls of this file's kernels", s, "put loops and branches in a kernel")
            self.stmt(s, top=True)
        assigned = {t.id for s in g.reference if isinstance(s, ast.Assign) for t in s.targets}
        self.outputs = [a.name for a in g.args if a.name in assigned and a.name in self.tensors]
        if not self.outputs:
            raise self.err("reference", f"the reference block of layer '{g.name}' assigns none of its tensor arguments",
                           g.reference[0].span if g.reference else g.name_span,
                           "assign the layer's output, e.g. `Out = ...`")
        self.check_reference(g.reference)
        return CheckedLayer(g, self.params, self.dims, self.tensors, self.scalars, self.outputs)

    def signature(self) -> None:
        """Arguments (tensors, scalars, their dims) and the -D names they and the params accept."""
        k = self.k
        what = "layer" if isinstance(k, ast.Layer) else "kernel"
        seen: set[str] = set()
        for a in k.args:
            if a.name in seen:
                raise self.err("duplicate-name", f"argument '{a.name}' is declared twice", a)
            seen.add(a.name)
            if a.dtype not in DTYPES:
                raise self.err("unknown-type", f"unknown element type '{a.dtype}'", a.dtype_span,
                               "element types: " + ", ".join(DTYPES))
            dt = DTYPES[a.dtype]
            if a.dims is None:
                st = ScalarT(dt, False)
                self.scalars[a.name] = st
                self.names[a.name] = ("scalar", st)
                continue
            if not a.dims:
                raise self.err("type", f"tensor '{a.name}' needs at least one dimension", a.dtype_span)
            for d in a.dims:
                if isinstance(d, str):
                    if d in DTYPES or d in seen and d not in self.dims:
                        raise self.err("duplicate-name", f"dimension name '{d}' clashes with an argument",
                                       a.dtype_span)
                    if d not in self.dims:
                        self.dims.append(d)
                        self.names[d] = ("dim", ScalarT(I32, False))
            gt = GlobalT(a.name, dt, tuple(a.dims))
            self.tensors[a.name] = gt
            self.names[a.name] = ("tensor", gt)
        unknown = [n for n in self.defines if n not in self.dims and n not in self.scalars
                   and not any(isinstance(s, ast.Param) and s.name == n for s in k.body)]
        if unknown:
            raise self.err("unknown-define", f"-D {unknown[0]}: {what} '{k.name}' has no parameter or dimension "
                           f"named '{unknown[0]}'", k.name_span,
                           "parameters: " + ", ".join([s.name for s in k.body if isinstance(s, ast.Param)]
                                                      + self.dims) or "none")
        for d in self.dims:
            if d in self.defines:
                v = self.defines[d]
                if not isinstance(v, int) or v < 1:
                    raise self.err("bad-define", f"-D {d}={v!r}: a dimension must be a positive integer",
                                   k.name_span)

    # ---- statements ----
    def block(self, stmts: tuple[ast.Stmt, ...], top: bool = False) -> None:
        for s in stmts:
            self.stmt(s, top)

    def stmt(self, s: ast.Stmt, top: bool = False) -> None:
        if isinstance(s, ast.Param):
            return self.param(s, top)
        if isinstance(s, ast.Launch):
            return self.launch_stmt(s, top)
        if isinstance(s, ast.Specialize):
            return self.specialize(s, top)
        if isinstance(s, ast.Pass):
            return None
        if isinstance(s, ast.Assign):
            return self.assign(s)
        if isinstance(s, ast.AugAssign):
            return self.aug_assign(s)
        if isinstance(s, ast.ExprStmt):
            e = s.expr
            if isinstance(e, ast.Call) and e.func_name in STATEMENT_BUILTINS:
                self.expr(e)
                return None
            if isinstance(e, ast.Call) and e.func_name == "tag":
                raise self.err("unused-value", "the result of tag(...) is discarded", e,
                               "assign it: `x = tag(x, field=value)`")
            raise self.err("unused-value", "this expression is computed and then discarded", e,
                           "assign it to a name, or call a statement builtin such as store(...)")
        if isinstance(s, ast.For):
            return self.for_stmt(s)
        if isinstance(s, ast.If):
            t = self.expr(s.cond)
            if not (isinstance(t, ScalarT)):
                raise self.err("type", f"an `if` condition must be a scalar, got {_fmt(t)}", s.cond,
                               "for per-element choices use select(cond, a, b)")
            self.enclosing.append(s.cond)
            self.block(s.body)
            self.block(s.orelse)
            self.enclosing.pop()
            return None
        if isinstance(s, ast.With):
            return self.with_stmt(s)
        raise self.err("unsupported", f"unsupported statement {type(s).__name__}", s)

    def param(self, s: ast.Param, top: bool) -> None:
        if not top:
            raise self.err("param-placement", "`param` declarations belong at the top of the kernel body", s)
        if s.name in self.names:
            raise self.err("duplicate-name", f"'{s.name}' is already defined", s)
        if s.name in self.defines:
            value = self.defines[s.name]
            span = s.span
        else:
            self.expr(s.default)
            if id(s.default) not in self.consts:
                raise self.err("not-compile-time", f"the default of param '{s.name}' must be known at compile time",
                               s.default, "params may use literals and earlier params only")
            value = self.consts[id(s.default)]
            span = s.default.span
        if s.annotation is not None:
            want = {"int": int, "float": float, "str": str, "bool": bool}.get(s.annotation)
            if want is None:
                raise self.err("unknown-type", f"unknown param type '{s.annotation}'", s, "use int, float, str or bool")
            if want is float and isinstance(value, int):
                value = float(value)
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise self.err("type", f"param '{s.name}' is declared {s.annotation} but its value is {value!r}",
                               span)
        self.params[s.name] = value
        t = STR if isinstance(value, str) else ScalarT(_dtype_of_py(value), True)
        self.names[s.name] = ("param", t)

    def specialize(self, s: ast.Specialize, top: bool) -> None:
        """`specialize COND: P=v, ...`: COND reads dims, params and literals only (the runtime evaluates it
        from the arrays' shapes); every P is a param declared above, every v a compile-time value. With
        `kernel="name"` the Ps are that kernel's params (argus/specialize.route checks them and the route)."""
        if not top:
            raise self.err("specialize-placement", "`specialize` belongs at the top level of the kernel body", s,
                           "put it after the params it sets")
        routed = any(kw.name == "kernel" for kw in s.params)  # the other params are the routed kernel's
        layouts = [n for n in ast.walk(s.cond) if isinstance(n, ast.Call) and n.func_name == "transposed"]
        for n in layouts:  # transposed(B): B arrives as a transposed view (B.T is C-contiguous)
            a = n.args[0] if len(n.args) == 1 and not n.kwargs else None
            if not (isinstance(a, ast.Name) and a.id in self.tensors and len(self.tensors[a.id].dims) >= 2):
                raise self.err("specialize", "transposed(...) takes one tensor argument of rank 2 or more", n,
                               "e.g. `specialize transposed(B): kernel=\"gemm_bt\"`")
            if not routed:
                raise self.err("specialize", "transposed(...) selects a route: this kernel itself reads its arrays "
                               "C-contiguous", n, "add kernel=\"...\" naming a kernel or layer that reads the "
                               "array transposed")
        skip = {id(x) for n in layouts for x in ast.walk(n)}
        funcs = {id(n.func) for n in ast.walk(s.cond) if isinstance(n, ast.Call)}
        for n in ast.walk(s.cond):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Name) and id(n) not in funcs and n.id not in self.dims and n.id not in self.params:
                raise self.err("specialize", f"a specialize condition reads dims and params only; '{n.id}' is "
                               "neither", n, "dims: " + (", ".join(self.dims) or "none"))
            if not isinstance(n, (ast.Name, ast.Const, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Call)):
                raise self.err("specialize", f"a specialize condition is integer arithmetic and comparisons of dims "
                               f"and params; {type(n).__name__} is not", n)
            if isinstance(n, ast.Call) and (n.func_name not in ("min", "max", "cdiv") or n.kwargs):
                raise self.err("specialize", f"a specialize condition may call min, max and cdiv only, not "
                               f"{n.func_name}", n)
        t = self.expr(_without_layouts(s.cond))
        if not isinstance(t, ScalarT):
            raise self.err("type", f"a specialize condition must be a scalar, got {_fmt(t)}", s.cond)
        if not s.params:
            raise self.err("specialize", "specialize needs at least one param to set", s, "e.g. `specialize M <= 128: "
                           "BM=64`")
        for kw in s.params:
            if kw.name == "kernel":
                if not (isinstance(kw.value, ast.Const) and isinstance(kw.value.value, str)):
                    raise self.err("specialize", "kernel= names another kernel of this file, as a string", kw.value,
                                   'e.g. kernel="gemm_decode"')
                continue
            if kw.name not in self.params and not routed:
                raise self.err("specialize", f"specialize sets '{kw.name}', which is not a param declared above", kw,
                               "params: " + (", ".join(self.params) or "none"))
            self.expr(kw.value)
            if id(kw.value) not in self.consts:
                raise self.err("not-compile-time", f"specialize's value of '{kw.name}' must be known at compile time",
                               kw.value, "use literals and params")

    def launch_stmt(self, s: ast.Launch, top: bool) -> None:
        if not top:
            raise self.err("launch-placement", "`launch` belongs at the top level of the kernel body", s)
        if self.launch is not None:
            raise self.err("duplicate-launch", "the kernel already has a launch statement", s)
        kw = {k.name: k for k in s.kwargs}
        for k in s.kwargs:
            if k.name not in ("grid", "threads", "warpgroups", "cluster", "blocks_per_sm", "metadata"):
                raise self.err("unknown-keyword", f"unknown launch option '{k.name}'", k,
                               "launch takes grid=, threads= (or warpgroups=) and optionally cluster=, "
                               "blocks_per_sm= and metadata=")
        if "grid" not in kw:
            raise self.err("missing-launch", "launch needs grid=(...)", s)
        g = kw["grid"].value
        grid = g.elts if isinstance(g, ast.TupleExpr) else (g,)
        if not 1 <= len(grid) <= 3:
            raise self.err("launch", "grid must have 1 to 3 dimensions", g)
        for e in grid:
            self.need_index(e, "a grid dimension")
        if ("threads" in kw) == ("warpgroups" in kw):
            raise self.err("missing-launch", "launch needs exactly one of threads= or warpgroups=", s)
        if "threads" in kw:
            threads = self.need_const_int(kw["threads"].value, "threads")
            node = kw["threads"].value
        else:
            threads = 128 * self.need_const_int(kw["warpgroups"].value, "warpgroups")
            node = kw["warpgroups"].value
        if not (1 <= threads <= MAX_THREADS) or threads % 32:
            raise self.err("launch", f"threads={threads}: a block has 32..{MAX_THREADS} threads, a multiple of 32",
                           node)
        cluster: tuple[int, ...] = (1,)
        if "cluster" in kw:
            c = kw["cluster"].value
            elts = c.elts if isinstance(c, ast.TupleExpr) else (c,)
            cluster = tuple(self.need_const_int(e, "a cluster dimension") for e in elts)
            if math.prod(cluster) > 16 or any(x < 1 for x in cluster):
                raise self.err("launch", "a cluster has 1..16 blocks", c)
        occupancy = None
        if "blocks_per_sm" in kw:
            # a promise to ptxas that this many blocks share a multiprocessor: it caps registers per thread
            # at 65536 / (blocks x threads), so more blocks' loads are in flight (memory-bound kernels);
            # 0 leaves it to the code generator (two blocks where their shared memory fits)
            node = kw["blocks_per_sm"].value
            occupancy = self.need_const_int(node, "blocks_per_sm") or None
        if occupancy is not None:
            if not 1 <= occupancy * threads <= 2048 or occupancy > 32:
                raise self.err("launch", f"blocks_per_sm={occupancy} with {threads} threads: a multiprocessor holds "
                               "at most 2048 threads and 32 blocks", node)
            elif 65536 // (occupancy * threads) < 24:
                raise self.err("launch", f"blocks_per_sm={occupancy} with {threads} threads leaves "
                               f"{65536 // (occupancy * threads)} registers per thread (at least 24 are needed)", node)
        metadata = None
        if "metadata" in kw:
            node = kw["metadata"].value
            self.expr(node)
            metadata = self.consts.get(id(node))
            from argus import metadata as builders

            if not isinstance(metadata, str) or builders.lookup(metadata) is None:
                known = ", ".join(f'"{n}"' for n in builders.names())
                raise self.err("launch", f"metadata= names the host builder of the kernel's integer inputs, got "
                               f"{metadata!r}", node, "known builders: " + known)
        self.launch = LaunchInfo(tuple(grid), threads, cluster, s.span, occupancy, metadata,
                                 kw["metadata"].value if "metadata" in kw else None)

    def bind(self, name: ast.Name, t: Type, node: ast.Node) -> None:
        prev = self.names.get(name.id)
        if prev is not None and prev[0] not in ("local",):
            raise self.err("reassign", f"cannot assign to {prev[0]} '{name.id}'", name,
                           "choose another name")
        if prev is not None and prev[0] == "local" and prev[1] != t:
            old = prev[1]
            same_kind = type(old) is type(t) and (not isinstance(t, TileT) or
                                                   (old.shape == t.shape and old.space == t.space))
            if isinstance(old, ScalarT) and isinstance(t, ScalarT):
                same_kind = True
            if not same_kind:
                raise self.err("type", f"'{name.id}' was {_fmt(old)} and is now assigned {_fmt(t)}", node,
                               "a name keeps its shape; use a new name for a different tile")
        if isinstance(t, ScalarT) and t.const:
            t = ScalarT(t.dtype, False)  # locals are runtime values; compile-time names are `param`s
        self.names[name.id] = ("local", t)
        self.symbols[id(name)] = "local"
        self.types[id(name)] = t

    def assign(self, s: ast.Assign) -> None:
        if len(s.targets) > 1:
            if not (isinstance(s.value, ast.TupleExpr) and len(s.value.elts) == len(s.targets)):
                raise self.err("type", f"cannot unpack into {len(s.targets)} names", s.value,
                               "write `a, b = x, y` with as many values as names")
            for tgt, v in zip(s.targets, s.value.elts):
                t = self.expr(v)
                self._check_assignable(t, v)
                self.bind(tgt, t, v)
            return
        t = self.expr(s.value)
        self._check_assignable(t, s.value)
        if isinstance(t, TileT) and t.space == "shared" and isinstance(s.value, ast.Call) \
                and s.value.func_name == "shared" and self.names.get(s.targets[0].id):
            raise self.err("reassign", f"shared buffer '{s.targets[0].id}' is allocated twice", s)
        self.bind(s.targets[0], t, s.value)

    def _check_assignable(self, t: Type, node: ast.Expr) -> None:
        if t is NONE:
            raise self.err("type", "this call returns nothing; there is no value to assign", node)
        if isinstance(t, OpaqueT) and t.kind in ("iter", "role", "typeexpr", "dtype"):
            raise self.err("type", f"a {t.kind} cannot be stored in a variable", node)

    def aug_assign(self, s: ast.AugAssign) -> None:
        fake = ast.BinOp(s.span, s.op, s.target, s.value)
        t = self.expr(fake)
        prev = self.names.get(s.target.id)
        if prev is None or prev[0] != "local":
            raise self.err("reassign", f"'{s.target.id}' is not a local variable", s.target)
        self.bind(s.target, t, s)
        self.types[id(s)] = t

    def for_stmt(self, s: ast.For) -> None:
        it = s.iter
        if not (isinstance(it, ast.Call) and it.func_name in ITERATORS):
            raise self.err("type", "a for loop iterates over range(...), pipeline(...), unroll(...) "
                           "or persistent(...)", it)
        name = it.func_name
        if name == "range" or name == "unroll":
            if not 1 <= len(it.args) <= 3 or it.kwargs:
                raise self.err("arity", f"{name} takes 1 to 3 positional arguments", it)
            for a in it.args:
                self.need_index(a, f"a {name} bound")
            if len(it.args) == 3:
                step = self.need_const_int(it.args[2], "the step of range")
                if step == 0:
                    raise self.err("range", "range step cannot be zero", it.args[2])
            if name == "unroll":
                for a in it.args:
                    self.need_const_int(a, "an unroll bound")
        elif name == "pipeline":
            if len(it.args) != 1:
                raise self.err("arity", "pipeline takes the trip count and stages=: pipeline(n, stages=S)", it)
            self.need_index(it.args[0], "the pipeline trip count")
            st = it.kw("stages")
            if st is None:
                raise self.err("arity", "pipeline needs stages=S", it)
            stages = self.need_const_int(st.value, "stages")
            if stages < 1:
                raise self.err("range", "stages must be at least 1", st.value)
            for kw in it.kwargs:
                if kw.name != "stages":
                    raise self.err("unknown-keyword", f"unknown pipeline option '{kw.name}'", kw)
            waits = [c for c in s.body if isinstance(c, ast.ExprStmt) and isinstance(c.expr, ast.Call)
                     and c.expr.func_name == "wait_async"]
            if len(waits) != 1:
                raise self.err("pipeline", "a pipeline loop body needs exactly one wait_async(buffers...) at its "
                               "top level", it,
                               "write the copies for step k, then wait_async(bufs), then the compute")
        else:  # persistent
            if len(it.args) != 1 or it.kwargs:
                raise self.err("arity", "persistent takes the number of tiles: persistent(n)", it)
            self.need_index(it.args[0], "the number of tiles")
        self.types[id(it)] = ITER
        prev = self.names.get(s.var)
        if prev is not None and prev[0] not in ("local", "loop"):
            raise self.err("reassign", f"loop variable '{s.var}' shadows {prev[0]} '{s.var}'", s.var_span)
        self.names[s.var] = ("loop", ScalarT(I32, False))
        if name == "pipeline":
            self.pipeline_depth += 1
        self.enclosing.append(it)
        self.block(s.body)
        self.enclosing.pop()
        if name == "pipeline":
            self.pipeline_depth -= 1

    def with_stmt(self, s: ast.With) -> None:
        c = s.context
        if isinstance(c, ast.Call) and c.func_name == "turn":
            return self.turn_stmt(s)
        if not (isinstance(c, ast.Call) and c.func_name == "role"):
            raise self.err("type", "`with` takes role(\"producer\"|\"consumer\", warpgroups=N) or turn()", c)
        if self.role_depth:
            raise self.err("role", "roles cannot be nested", c)
        if len(c.args) != 1 or not isinstance(c.args[0], ast.Const) or c.args[0].value not in ("producer", "consumer"):
            raise self.err("role", "role's first argument is \"producer\" or \"consumer\"", c)
        for kw in c.kwargs:
            if kw.name == "release":  # when a consumer hands ring stages back (argus/codegen/release_lag.py)
                if c.args[0].value != "consumer":
                    raise self.err("role", "release= belongs to a consumer role (it says when the consumer hands "
                                   "ring stages back to the producer)", kw)
                self.expr(kw.value)
                if self.consts.get(id(kw.value), None) not in RELEASE_MODES:
                    raise self.err("role", "role's release= is \"deferred\" or \"immediate\" (a literal or a param)",
                                   kw.value, "\"deferred\" (the default) releases a ring stage after the next step's "
                                   "wgmmas are issued; \"immediate\" after the stage's own wgmmas complete")
                continue
            if kw.name not in ("warpgroups", "registers"):
                raise self.err("unknown-keyword", f"unknown role option '{kw.name}'", kw,
                               "role options: warpgroups=, registers=, release=")
            self.need_const_int(kw.value, kw.name)
        if c.kw("warpgroups") is None:
            raise self.err("role", "role needs warpgroups=N", c)
        self.types[id(c)] = ROLE
        self.role_depth += 1
        outer, self.enclosing = self.enclosing, []
        self.block(s.body)
        self.enclosing = outer
        self.role_depth -= 1

    def turn_stmt(self, s: ast.With) -> None:
        """`with turn():` -- the role's warpgroups run the block one at a time (argus/dsl/turns.py);
        `with turn(on):` with a compile-time bool, only when it is true (a tuning switch)."""
        c = s.context
        if len(c.args) > 1 or c.kwargs:
            raise self.err("arity", "turn takes at most one argument: turn() or turn(on), on a compile-time bool", c)
        if c.args:
            self.expr(c.args[0])
            if not isinstance(self.consts.get(id(c.args[0])), bool):
                raise self.err("not-compile-time", "turn(on) needs a compile-time bool (a literal or a param)",
                               c.args[0])
        if not self.role_depth:
            raise self.err("turn", "a turn orders the warpgroups of a role: put it inside `with role(...)`", c)
        if self.turn_depth:
            raise self.err("turn", "turns cannot be nested", c)
        if self.varying is None:
            self.varying = turns.varying_names(self.k.body)
        turns.check_turn(s, self.enclosing, self.varying, self.err)
        self.types[id(c)] = NONE
        self.turn_depth += 1
        self.block(s.body)
        self.turn_depth -= 1

    # ---- expressions ----
    def expr(self, e: ast.Expr) -> Type:
        t = self._expr(e)
        self.types[id(e)] = t
        return t

    def _expr(self, e: ast.Expr) -> Type:
        if isinstance(e, ast.Const):
            v = e.value
            if v is None:
                return self.set(e, NONE, None, True)
            if isinstance(v, str):
                return self.set(e, STR, v, True)
            return self.set(e, ScalarT(_dtype_of_py(v), True), v, True)
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.BinOp):
            return self.binop(e)
        if isinstance(e, ast.UnaryOp):
            t = self.expr(e.operand)
            if e.op == "not":
                if not isinstance(t, ScalarT):
                    raise self.err("type", "`not` applies to scalar conditions", e)
                if id(e.operand) in self.consts:
                    return self.set(e, ScalarT(BOOL, True), not self.consts[id(e.operand)], True)
                return ScalarT(BOOL, False)
            if not isinstance(t, (ScalarT, TileT)) or (isinstance(t, TileT) and t.space != "reg"):
                raise self.err("type", f"cannot apply '{e.op}' to {_fmt(t)}", e,
                               "load a tile into registers before arithmetic")
            if id(e.operand) in self.consts:
                v = self.consts[id(e.operand)]
                return self.set(e, t, -v if e.op == "-" else ~v, True)
            return t
        if isinstance(e, (ast.Compare, ast.BoolOp)):
            return self.compare(e)
        if isinstance(e, ast.IfExp):
            ct = self.expr(e.cond)
            if not isinstance(ct, ScalarT):
                raise self.err("type", "the condition of `a if c else b` must be a scalar", e.cond,
                               "for tiles use select(cond, a, b)")
            a, b = self.expr(e.then), self.expr(e.orelse)
            if isinstance(a, ScalarT) and isinstance(b, ScalarT):
                t = ScalarT(promote(a.dtype, b.dtype), a.const and b.const and id(e.cond) in self.consts)
                if t.const:
                    v = self.consts[id(e.then)] if self.consts[id(e.cond)] else self.consts[id(e.orelse)]
                    return self.set(e, t, v, True)
                return t
            if a != b:
                raise self.err("type", f"both branches must have the same type ({_fmt(a)} vs {_fmt(b)})", e)
            return a
        if isinstance(e, ast.TupleExpr):
            for x in e.elts:
                self.expr(x)
            if all(id(x) in self.consts for x in e.elts):
                return self.set(e, OpaqueT("tuple"), tuple(self.consts[id(x)] for x in e.elts), True)
            return OpaqueT("tuple")
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.Subscript):
            return self.subscript(e)
        if isinstance(e, ast.Attribute):
            return self.attribute(e)
        if isinstance(e, ast.Lambda):
            raise self.err("type", "a lambda is only allowed as the argument of tag(...) or assert_tag(...)", e)
        if isinstance(e, ast.Slice):
            raise self.err("type", "a slice is only allowed inside [...]", e)
        raise self.err("unsupported", f"unsupported expression {type(e).__name__}", e)

    def name(self, e: ast.Name) -> Type:
        for scope in reversed(self.lambda_vars):
            if e.id in scope:
                self.symbols[id(e)] = "lambda"
                return ScalarT(I32, False)
        if e.id in self.names:
            kind, t = self.names[e.id]
            self.symbols[id(e)] = kind
            if kind == "param":
                return self.set(e, t, self.params[e.id], True)
            return t
        if e.id in DTYPES:
            self.symbols[id(e)] = "dtype"
            return self.set(e, DTYPE_T, DTYPES[e.id], True)
        if e.id in NAMED_CONSTS:
            self.symbols[id(e)] = "const"
            return self.set(e, ScalarT(F32, True), NAMED_CONSTS[e.id], True)
        if e.id in BUILTINS or e.id in ITERATORS or e.id in ("role", "tag"):
            raise self.err("type", f"'{e.id}' is a builtin function; call it: {e.id}(...)", e)
        near = _closest(e.id, list(self.names) + list(BUILTINS))
        raise self.err("undefined-name", f"undefined name '{e.id}'", e,
                       *([f"did you mean '{near}'?"] if near else []))

    def binop(self, e: ast.BinOp) -> Type:
        a, b = self.expr(e.left), self.expr(e.right)
        if e.op == "@":
            raise self.err("type", "'@' is only for the reference block; inside a kernel use mma(a, b, acc)", e)
        if isinstance(a, ScalarT) and isinstance(b, ScalarT):
            if e.op in ("<<", ">>", "&", "|", "^", "%", "//") and (a.dtype.is_float or b.dtype.is_float):
                raise self.err("type", f"'{e.op}' needs integer operands", e)
            dt = promote(a.dtype, b.dtype)
            if e.op == "/" and not dt.is_float:
                raise self.err("type", "'/' on integers is ambiguous; use '//' for index arithmetic", e,
                               "or cast to a float type")
            const = id(e.left) in self.consts and id(e.right) in self.consts
            if const:
                va, vb = self.consts[id(e.left)], self.consts[id(e.right)]
                if e.op in ("//", "%") and vb == 0:
                    raise self.err("division-by-zero", "division by zero in a compile-time expression", e)
                try:
                    value = fold_binary(e.op, va, vb)
                except (OverflowError, ValueError, ZeroDivisionError) as exc:
                    raise self.err("out-of-range", f"compile-time arithmetic out of range: {exc}", e) from None
                return self.set(e, ScalarT(dt, True), value, True)
            if e.op in ("//", "%") and id(e.right) in self.consts and self.consts[id(e.right)] == 0:
                raise self.err("division-by-zero", "division by zero", e.right)
            return ScalarT(dt, False)
        for t, n in ((a, e.left), (b, e.right)):
            if isinstance(t, TileT) and t.space != "reg":
                raise self.err("type", f"arithmetic on a {t.space} tile ({_fmt(t)})", n,
                               "load it into registers first: x = load(tile)")
            if not isinstance(t, (ScalarT, TileT)):
                raise self.err("type", f"cannot use {_fmt(t)} in arithmetic", n)
        shape = self.broadcast(a, b, e)
        dt = promote(_dt(a), _dt(b))
        if e.op in ("<<", ">>", "&", "|", "^", "%", "//") and dt.is_float:
            raise self.err("type", f"'{e.op}' needs integer tiles", e)
        if e.op == "/" and not dt.is_float:  # Python's / is true division; C's truncates: say which
            raise self.err("type", "'/' on integer tiles is ambiguous; use '//' for integer division", e,
                           "or cast an operand to a float type: cast(x, f32) / 2")
        return TileT(dt, shape, "reg")

    def broadcast(self, a: Type, b: Type, e: ast.Node) -> tuple[int, ...]:
        sa = a.shape if isinstance(a, TileT) else ()
        sb = b.shape if isinstance(b, TileT) else ()
        n = max(len(sa), len(sb))
        sa2, sb2 = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
        out = []
        for x, y in zip(sa2, sb2):
            if x != y and 1 not in (x, y):
                raise self.err("shape", f"tile shapes {shape_str(sa)} and {shape_str(sb)} do not broadcast", e,
                               "use x[:, None] or x[None, :] to add a unit axis")
            out.append(max(x, y))
        return tuple(out)

    def compare(self, e: ast.Compare | ast.BoolOp) -> Type:
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(a, ElemT) or isinstance(b, ElemT):
            raise self.err("type", "compare tag fields of elements (x[i, j].K), not the elements themselves", e)
        if a == STR and b == STR and e.op in ("==", "!=") and id(e.left) in self.consts and id(e.right) in self.consts:
            # compile-time strings (MMA == "wgmma") in params and conditions
            v = _eval_cmp(e.op, self.consts[id(e.left)], self.consts[id(e.right)])
            return self.set(e, ScalarT(BOOL, True), v, True)
        if isinstance(a, ScalarT) and isinstance(b, ScalarT):
            if id(e.left) in self.consts and id(e.right) in self.consts:
                v = _eval_cmp(e.op, self.consts[id(e.left)], self.consts[id(e.right)])
                return self.set(e, ScalarT(BOOL, True), v, True)
            return ScalarT(BOOL, False)
        if isinstance(e, ast.BoolOp):
            raise self.err("type", f"`{e.op}` combines scalar conditions; for tiles use & and |", e)
        for t, n in ((a, e.left), (b, e.right)):
            if not isinstance(t, (ScalarT, TileT)) or (isinstance(t, TileT) and t.space != "reg"):
                raise self.err("type", f"cannot compare {_fmt(t)}", n)
        return TileT(BOOL, self.broadcast(a, b, e), "reg")

    def attribute(self, e: ast.Attribute) -> Type:
        t = self.expr(e.value)
        if isinstance(t, ElemT):
            self.tag_fields.add(e.attr)
            known = {d for g in self.tensors.values() for d in g.dims if isinstance(d, str)}
            known |= {"tensor", "step", "stage"} | self.tag_fields_declared
            if e.attr not in known:
                raise self.err("unknown-tag", f"unknown tag field '{e.attr}'", e,
                               "origin tags are named by the tensors' axis names ("
                               + ", ".join(sorted(known)) + "); add fields with tag(x, name=...)")
            return ScalarT(I32, False)
        if e.attr == "T":
            if isinstance(t, TileT) and len(t.shape) == 2:
                return TileT(t.dtype, (t.shape[1], t.shape[0]), t.space)
            raise self.err("type", f".T transposes a 2-D tile, not {_fmt(t)}", e)
        if e.attr == "shape" and isinstance(t, (TileT,)):
            return self.set(e, OpaqueT("tuple"), t.shape, True)
        raise self.err("unknown-attribute", f"{_fmt(t)} has no attribute '{e.attr}'", e,
                       "tiles have .T and .shape; elements in tag lambdas have tag fields")

    @property
    def tag_fields_declared(self) -> set[str]:
        out = set()
        for n in ast.walk(self.k.body):
            if isinstance(n, ast.Call) and n.func_name == "tag":
                out |= {kw.name for kw in n.kwargs}
        return out

    def subscript(self, e: ast.Subscript) -> Type:
        t = self.expr(e.value)
        if t is MBARRIER_ARRAY:
            if len(e.items) != 1 or isinstance(e.items[0], ast.Slice):
                raise self.err("type", "index an mbarrier array with one index: bar[i]", e)
            self.need_index(e.items[0], "an mbarrier index")
            return MBARRIER
        if t is DTYPE_T:
            shape = []
            for it in e.items:
                if isinstance(it, ast.Slice):
                    raise self.err("type", "a tile type takes sizes, not slices: f32[BM, BN]", it)
                v = self.need_const_int(it, "a tile dimension")
                if v < 1:
                    raise self.err("shape", f"tile dimension {v} must be positive", it)
                shape.append(v)
            return self.set(e, TYPEEXPR, (self.consts[id(e.value)], tuple(shape)), True)
        if isinstance(t, GlobalT):
            return self.index_global(e, t)
        if isinstance(t, TileT) and t.space in ("shared", "global"):
            if self.lambda_vars and len(e.items) == len(t.shape) and not any(isinstance(i, ast.Slice)
                                                                             for i in e.items):
                for it in e.items:
                    self.need_index(it, "an element index")
                return ElemT(t.dtype)
            return self.index_tile(e, t)
        if isinstance(t, TileT) and t.space == "reg":
            if self.lambda_vars and len(e.items) == len(t.shape):
                for it in e.items:
                    self.need_index(it, "an element index")
                return ElemT(t.dtype)
            shape = []
            src = list(t.shape)
            for it in e.items:
                if isinstance(it, ast.Const) and it.value is None:
                    shape.append(1)
                elif isinstance(it, ast.Slice) and it.start is None and it.stop is None and it.length is None:
                    if not src:
                        raise self.err("rank", f"too many indices for {_fmt(t)}", it)
                    shape.append(src.pop(0))
                else:
                    raise self.err("type", "register tiles take only ':' and None in [...] (to add unit axes)",
                                   it, "index shared or global tiles instead, or use a reduction")
            if src:
                shape.extend(src)
            return TileT(t.dtype, tuple(shape), "reg")
        raise self.err("type", f"{_fmt(t)} cannot be indexed", e)

    def index_global(self, e: ast.Subscript, t: GlobalT) -> Type:
        if len(e.items) != len(t.dims):
            raise self.err("rank", f"'{t.name}' has {len(t.dims)} dimensions ({', '.join(map(str, t.dims))}) but "
                           f"{len(e.items)} indices were given", e,
                           "index every dimension: a slice start:+length keeps it, an index drops it")
        shape = []
        for it, dim in zip(e.items, t.dims):
            if isinstance(it, ast.Slice):
                shape.append(self.slice_len(it, dim))
            elif isinstance(it, ast.Const) and it.value is None:
                raise self.err("type", "None (new axis) is not allowed on a global tensor", it)
            else:
                self.need_index(it, "an index")
        if self.lambda_vars and not shape:
            return ElemT(t.dtype)
        return TileT(t.dtype, tuple(shape), "global")

    def slice_len(self, it: ast.Slice, dim: str | int | None) -> int:
        if it.length is not None:
            self.need_index(it.start, "a slice start")
            n = self.need_const_int(it.length, "a slice length (start:+length)")
            if n < 1:
                raise self.err("shape", f"slice length {n} must be positive", it.length)
            return n
        if it.start is None and it.stop is None:
            if isinstance(dim, int):
                return dim
            raise self.err("shape", f"':' over the runtime dimension '{dim}' has no compile-time size", it,
                           "take a tile: start:+LENGTH")
        if it.start is not None:
            self.expr(it.start)
        if it.stop is not None:
            self.expr(it.stop)
        lo = 0 if it.start is None else self.consts.get(id(it.start))
        hi = (dim if isinstance(dim, int) else None) if it.stop is None else self.consts.get(id(it.stop))
        if lo is None or hi is None:
            raise self.err("shape", "a slice start:stop needs both bounds known at compile time", it,
                           "for a tile at a runtime offset write start:+LENGTH")
        if hi <= lo:
            raise self.err("shape", f"empty slice {lo}:{hi}", it)
        if isinstance(dim, int) and (lo < 0 or hi > dim):
            raise self.err("out-of-range", f"slice {lo}:{hi} is outside the dimension of size {dim}", it)
        return hi - lo

    def index_tile(self, e: ast.Subscript, t: TileT) -> Type:
        if len(e.items) > len(t.shape):
            raise self.err("rank", f"{_fmt(t)} has {len(t.shape)} dimensions but {len(e.items)} indices were given",
                           e)
        shape = []
        for it, dim in zip(e.items, t.shape):
            if isinstance(it, ast.Slice):
                n = self.slice_len(it, dim)
                if it.length is not None and id(it.start) in self.consts:
                    lo = self.consts[id(it.start)]
                    if lo < 0 or lo + n > dim:
                        raise self.err("out-of-range", f"slice {lo}:+{n} is outside the dimension of size {dim}",
                                       it)
                shape.append(n)
            else:
                self.need_index(it, "an index")
                if id(it) in self.consts:
                    v = self.consts[id(it)]
                    if not 0 <= v < dim:
                        raise self.err("out-of-range", f"index {v} is outside the dimension of size {dim}", it)
        shape.extend(t.shape[len(e.items):])
        return TileT(t.dtype, tuple(shape), t.space)

    # ---- calls ----
    def call(self, e: ast.Call) -> Type:
        name = e.func_name
        if name is None:
            if isinstance(e.func, ast.Attribute):
                attr = e.func.attr
                if attr in BUILTINS:
                    raise self.err("type", f"methods are not supported: write {attr}(x, ...)", e.func)
                hint = _NUMPY_SPELLINGS.get(attr)
                raise self.err("type", f"methods are not supported (.{attr}(...))", e.func,
                               *([hint] if hint else []))
            raise self.err("type", "only builtin functions can be called", e.func)
        if name in self.names:
            raise self.err("type", f"'{name}' is a {self.names[name][0]}, not a function", e.func)
        if name in ITERATORS:
            raise self.err("type", f"{name}(...) is only valid as the iterable of a for loop", e)
        fn = BUILTINS.get(name)
        if fn is None:
            hint = _NUMPY_SPELLINGS.get(name)
            near = _closest(name, list(BUILTINS))
            notes = [hint] if hint else [f"did you mean '{near}'?"] if near else []
            raise self.err("undefined-name", f"unknown function '{name}'", e.func, *notes)
        return fn(self, e)

    def args(self, e: ast.Call, n_min: int, n_max: int, kws: tuple[str, ...] = ()) -> None:
        if not n_min <= len(e.args) <= n_max:
            want = f"{n_min}" if n_min == n_max else f"{n_min} to {n_max}"
            raise self.err("arity", f"{e.func_name}() takes {want} positional arguments, got {len(e.args)}", e)
        for k in e.kwargs:
            if k.name not in kws:
                raise self.err("unknown-keyword", f"{e.func_name}() has no option '{k.name}'", k,
                               ("options: " + ", ".join(kws)) if kws else f"{e.func_name}() takes no options")

    def tile_arg(self, node: ast.Expr, what: str, spaces: tuple[str, ...]) -> TileT:
        t = self.expr(node)
        if not isinstance(t, TileT) or t.space not in spaces:
            where = " or ".join(spaces)
            raise self.err("type", f"{what} must be a {where} tile, got {_fmt(t)}", node)
        return t

    def check_reference(self, stmts: tuple[ast.Stmt, ...]) -> None:
        known = set(self.tensors) | set(self.scalars) | set(self.dims) | set(self.params) | set(NAMED_CONSTS)
        assigned: set[str] = set()
        for s in stmts:
            if not isinstance(s, ast.Assign):
                raise self.err("reference", "the reference block holds only assignments (NAME = expression)", s)
            for n in ast.walk(s.value):
                if isinstance(n, ast.Name) and n.id not in known | assigned:
                    if not _is_called(s.value, n):
                        raise self.err("undefined-name", f"undefined name '{n.id}' in the reference block", n)
                if isinstance(n, ast.Call):
                    fname = n.func_name
                    if fname is None and isinstance(n.func, ast.Attribute):
                        raise self.err("undefined-name", f"the reference block calls the method "
                                       f"'.{n.func.attr}()'; it takes NumPy's function spelling, not methods",
                                       n.func, _method_hint(n.func.attr))
                    if fname is None or fname not in REFERENCE_NAMES:
                        raise self.err("undefined-name", f"unknown reference function '{fname}'", n.func,
                                       "available: " + ", ".join(sorted(REFERENCE_NAMES)))
            for tg in s.targets:
                assigned.add(tg.id)
        missing = [o for o in self.outputs if o not in assigned]
        if missing:
            raise self.err("reference", f"the reference block does not compute output '{missing[0]}'",
                           stmts[0].span if stmts else self.k.name_span, f"add `{missing[0]} = ...`")


def _is_called(root: ast.Expr, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(root))


def _dt(t: Type) -> DType:
    return t.dtype if isinstance(t, (ScalarT, TileT)) else I32


def _dtype_of_py(v) -> DType:
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return I32
    return F32


def _eval_cmp(op: str, a, b) -> bool:
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
            "and": bool(a) and bool(b), "or": bool(a) or bool(b)}[op]


# NumPy / Triton spellings a kernel writes differently (the reference block takes the NumPy ones)
_NUMPY_SPELLINGS = {
    "where": "in a kernel, write select(cond, a, b)",
    "maximum": "in a kernel, max(a, b) is elementwise (max(x, axis=...) reduces)",
    "minimum": "in a kernel, min(a, b) is elementwise (min(x, axis=...) reduces)",
    "mean": "in a kernel, write sum(x, axis=...) * (1.0 / n)",
    "softmax": "in a kernel, write it out: e = exp(x - max(x, axis=1)[:, None]); e / sum(e, axis=1)[:, None]",
    "transpose": "in a kernel, write x.T",
    "matmul": "in a kernel, use mma(a, b, acc)",
    "dot": "in a kernel, use mma(a, b, acc), or sum(a * b, axis=...)",
    "astype": "in a kernel, write cast(x, dtype)",
    "relu": "in a kernel, write max(x, 0.0)",
}


def _closest(name: str, options: list[str]) -> str | None:
    import difflib
    m = difflib.get_close_matches(name, options, n=1, cutoff=0.7)
    return m[0] if m else None


# ---- builtins: each returns the call's type ----
def _index_fn(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        if kind in ("block_id", "num_blocks"):
            c.args(e, 1, 1)
            ax = c.need_const_int(e.args[0], f"the axis of {kind}")
            if ax not in (0, 1, 2):
                raise c.err("range", f"{kind} axis must be 0, 1 or 2", e.args[0])
        else:
            c.args(e, 0, 0)
        return ScalarT(I32, False)
    return f


def _cdiv(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 2, 2)
    a, b = (c.need_index(x, "an argument of cdiv") for x in e.args)
    if c.consts.get(id(e.args[1]), 1) == 0:
        raise c.err("division-by-zero", "cdiv by zero", e.args[1])
    if all(id(x) in c.consts for x in e.args):
        va, vb = (c.consts[id(x)] for x in e.args)
        if vb == 0:
            raise c.err("division-by-zero", "cdiv by zero", e.args[1])
        return c.set(e, ScalarT(I32, True), -(-va // vb), True)
    return ScalarT(I32, False)


def _minmax(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        if e.kw("axis") is not None:
            return _reduce(kind)(c, e)
        c.args(e, 2, 2)
        a, b = c.expr(e.args[0]), c.expr(e.args[1])
        if isinstance(a, ScalarT) and isinstance(b, ScalarT):
            if all(id(x) in c.consts for x in e.args):
                va, vb = (c.consts[id(x)] for x in e.args)
                return c.set(e, ScalarT(promote(a.dtype, b.dtype), True), min(va, vb) if kind == "min"
                             else max(va, vb), True)
            return ScalarT(promote(a.dtype, b.dtype), False)
        for t, n in ((a, e.args[0]), (b, e.args[1])):
            if not isinstance(t, (ScalarT, TileT)) or (isinstance(t, TileT) and t.space != "reg"):
                raise c.err("type", f"{kind}() takes register tiles or scalars, got {_fmt(t)}", n)
        return TileT(promote(_dt(a), _dt(b)), c.broadcast(a, b, e), "reg")
    return f


def _reduce(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        c.args(e, 1, 1, ("axis",))
        t = c.tile_arg(e.args[0], f"the argument of {kind}", ("reg",))
        ak = e.kw("axis")
        if ak is None:
            raise c.err("arity", f"{kind}(x, axis=A) needs the axis to reduce", e)
        ax = c.need_const_int(ak.value, "axis")
        if not -len(t.shape) <= ax < len(t.shape):
            raise c.err("rank", f"axis {ax} is out of range for {_fmt(t)}", ak.value)
        ax %= len(t.shape)
        shape = t.shape[:ax] + t.shape[ax + 1:]
        if kind == "argmax" and t.dtype == BOOL:
            raise c.err("type", "argmax() needs a numeric tile", e.args[0])
        if kind == "sum" and t.dtype == BOOL:  # NumPy counts; a bool sum would be an or
            raise c.err("type", "sum() of a bool tile: cast it to count", e.args[0], "sum(cast(m, i32), axis=...)")
        return TileT(I32 if kind == "argmax" else t.dtype, shape or (1,), "reg")
    return f


def _unary_math(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        c.args(e, 1, 1)
        t = c.expr(e.args[0])
        if isinstance(t, ScalarT):
            if id(e.args[0]) in c.consts:
                v = c.consts[id(e.args[0])]
                fn = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2,
                      "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x), "abs": abs, "tanh": math.tanh,
                      "erf": math.erf, "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
                      "silu": lambda x: x / (1 + math.exp(-x)),
                      "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2)))}[kind]
                try:
                    return c.set(e, ScalarT(F32 if kind != "abs" else t.dtype, True), fn(v), True)
                except (ValueError, ZeroDivisionError, OverflowError):
                    raise c.err("domain", f"{kind}({v}) is undefined or out of range", e) from None
            return ScalarT(F32 if kind != "abs" else t.dtype, False)
        if not isinstance(t, TileT) or t.space != "reg":
            raise c.err("type", f"{kind}() takes a register tile or a scalar, got {_fmt(t)}", e.args[0],
                        "load shared/global tiles into registers first")
        if kind != "abs" and not t.dtype.is_float:
            raise c.err("type", f"{kind}() needs a float tile, got {_fmt(t)}", e.args[0], "cast it first")
        return t
    return f


def _cast(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 2, 2)
    t = c.expr(e.args[0])
    dt = c.expr(e.args[1])
    if dt is not DTYPE_T:
        raise c.err("type", "cast's second argument is an element type such as bf16", e.args[1])
    target: DType = c.consts[id(e.args[1])]
    if isinstance(t, ScalarT):
        if id(e.args[0]) in c.consts:
            v = c.consts[id(e.args[0])]
            return c.set(e, ScalarT(target, True), float(v) if target.is_float else int(v), True)
        return ScalarT(target, False)
    if not isinstance(t, TileT) or t.space != "reg":
        raise c.err("type", f"cast() takes a register tile or a scalar, got {_fmt(t)}", e.args[0])
    return TileT(target, t.shape, "reg")


def _select(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 3, 3)
    ct, a, b = (c.expr(x) for x in e.args)
    if isinstance(ct, TileT) and ct.dtype != BOOL:
        raise c.err("type", f"select's condition must be a bool tile, got {_fmt(ct)}", e.args[0])
    if not isinstance(ct, (ScalarT, TileT)):
        raise c.err("type", "select's condition must be a comparison", e.args[0])
    for t, n in ((a, e.args[1]), (b, e.args[2])):
        if not isinstance(t, (ScalarT, TileT)) or (isinstance(t, TileT) and t.space != "reg"):
            raise c.err("type", f"select() takes register tiles or scalars, got {_fmt(t)}", n)
    shape = c.broadcast(ct, a, e)
    shape = c.broadcast(TileT(BOOL, shape, "reg") if shape else ScalarT(BOOL, False), b, e)
    dt = promote(_dt(a), _dt(b))
    if not shape:
        return ScalarT(dt, False)
    return TileT(dt, shape, "reg")


def _typeexpr(c: _Checker, node: ast.Expr, fn: str) -> tuple[DType, tuple[int, ...]]:
    t = c.expr(node)
    if t is not TYPEEXPR:
        raise c.err("type", f"{fn}() takes a tile type such as f32[BM, BN]", node)
    return c.consts[id(node)]


def _shared(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 1, ("swizzle", "layout"))
    if c.role_depth or c.lambda_vars:
        raise c.err("placement", "shared buffers are allocated at the top level of the kernel", e)
    dt, shape = _typeexpr(c, e.args[0], "shared")
    sw = e.kw("swizzle")
    if sw is not None:
        v = c.need_const_int(sw.value, "swizzle")
        if v not in SWIZZLES:
            raise c.err("swizzle", f"swizzle={v}: supported swizzles are 0, 32, 64 and 128 bytes", sw.value)
        row_bytes = shape[-1] * dt.bytes
        if v and row_bytes % v:
            raise c.err("swizzle", f"swizzle={v} needs rows of a multiple of {v} bytes; this buffer's rows are "
                        f"{row_bytes} bytes", sw.value, f"make the last dimension a multiple of {v // dt.bytes}")
    lk = e.kw("layout")
    if lk is not None:
        if c.expr(lk.value) is not LAYOUT:
            raise c.err("type", "layout= takes layout(shape, stride), possibly composed with swizzle(...)",
                        lk.value)
        if sw is not None and c.consts.get(id(sw.value)):
            raise c.err("type", "give either swizzle= or layout=, not both", lk.value)
        if c.consts[id(lk.value)][0] == "swizzle":
            raise c.err("type", "layout= needs a layout of the buffer's coordinates: "
                        "compose(swizzle(B, M, S), layout(shape, stride))", lk.value)
    if math.prod(shape) * dt.bytes > 227 * 1024:
        raise c.err("shared-memory", f"shared buffer of {math.prod(shape) * dt.bytes} bytes exceeds the "
                    "227 KiB a Hopper block can have", e)
    return TileT(dt, shape, "shared")


def _zeros(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 1, ("layout",))
    dt, shape = _typeexpr(c, e.args[0], "zeros")
    return TileT(dt, shape, "reg")


def _full(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 2, 2, ("layout",))
    dt, shape = _typeexpr(c, e.args[0], "full")
    v = c.expr(e.args[1])
    if not isinstance(v, ScalarT):
        raise c.err("type", f"full()'s fill value must be a scalar, not a {v}", e.args[1],
                    "a tile of the right shape is already a value: use it as it is (or broadcast it with "
                    "x[:, None] / x[None, :], or cast(x, dtype))")
    return TileT(dt, shape, "reg")


def _arange(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 1)
    n = c.need_const_int(e.args[0], "the length of arange")
    return TileT(I32, (n,), "reg")


def _note_read(c: _Checker, node: ast.Expr) -> None:
    base = node
    while isinstance(base, (ast.Subscript, ast.Attribute)):
        base = base.value
    if isinstance(base, ast.Name) and base.id in c.tensors and base.id not in c.inputs:
        c.inputs.append(base.id)


def _scalar_load(c: _Checker, e: ast.Call) -> Type | None:
    """load(T[i, j]) with every axis of a global tensor indexed: a data-dependent scalar of T's dtype.

    Such a scalar may index other tensors, enter assume(...) and tag lambdas. It is read unmasked
    (an index outside the tensor is an out-of-bounds fault)."""
    a = e.args[0] if e.args else None
    if not (isinstance(a, ast.Subscript) and isinstance(a.value, ast.Name)):
        return None
    kind = c.names.get(a.value.id, (None, None))
    if kind[0] != "tensor" or any(isinstance(it, ast.Slice) for it in a.items):
        return None
    c.args(e, 1, 1)
    g = kind[1]
    c.symbols[id(a.value)] = "tensor"
    c.types[id(a.value)] = g
    if len(a.items) != len(g.dims):
        raise c.err("rank", f"'{g.name}' has {len(g.dims)} dimensions ({', '.join(map(str, g.dims))}) but "
                    f"{len(a.items)} indices were given", a,
                    "a scalar load indexes every dimension: load(T[i, j])")
    for it in a.items:
        if isinstance(it, ast.Const) and it.value is None:
            raise c.err("type", "None (new axis) is not allowed on a global tensor", it)
        c.need_index(it, "an index")
    c.types[id(a)] = TileT(g.dtype, (), "global")
    c.scalar_loads.setdefault(g.name, a)
    _note_read(c, a)
    return c.set(e, ScalarT(g.dtype, False))


def _load(c: _Checker, e: ast.Call) -> Type:
    st = _scalar_load(c, e)
    if st is not None:
        return st
    c.args(e, 1, 1, ("masked",))
    t = c.tile_arg(e.args[0], "load's source", ("global", "shared"))
    _note_read(c, e.args[0])
    _masked(c, e)
    return TileT(t.dtype, t.shape, "reg")


def _masked(c: _Checker, e: ast.Call) -> None:
    m = e.kw("masked")
    if m is not None:
        c.expr(m.value)
        if not isinstance(c.consts.get(id(m.value)), bool):
            raise c.err("type", "masked= is True or False", m.value)


def _copy(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        kws = ("masked",) if kind != "copy_bulk" else ("barrier",)
        c.args(e, 2, 2, kws)
        if c.lambda_vars:
            raise c.err("placement", f"{kind} inside a lambda", e)
        dst = c.expr(e.args[0])
        src = c.expr(e.args[1])
        _note_read(c, e.args[1])
        for t, n, what in ((dst, e.args[0], "destination"), (src, e.args[1], "source")):
            if not isinstance(t, TileT):
                raise c.err("type", f"{kind}'s {what} must be a tile, got {_fmt(t)}", n)
        if kind in ("copy_async", "copy_bulk"):
            if src.space != "global" or dst.space != "shared":
                raise c.err("type", f"{kind} copies a global tile into a shared tile, not {src.space} -> {dst.space}",
                            e)
        elif dst.space == "global":
            raise c.err("type", "use store(dst, value) to write global memory", e)
        elif dst.space == "reg":
            raise c.err("type", "copy's destination is a shared tile; for registers use x = load(tile)", e)
        if dst.shape != src.shape:
            raise c.err("shape", f"{kind}: destination {shape_str(dst.shape)} and source {shape_str(src.shape)} differ",
                        e)
        if dst.dtype != src.dtype:
            raise c.err("type", f"{kind}: destination is {dst.dtype} but source is {src.dtype}", e,
                        "copies do not convert; cast in registers")
        if kind == "copy_bulk":
            b = e.kw("barrier")
            if b is None:
                raise c.err("type", "copy_bulk needs barrier=an mbarrier that the copy completes", e)
            _need_barrier(c, b.value, "copy_bulk's barrier")
        else:
            _masked(c, e)
        return NONE
    return f


def _commit(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 0, 0)
    return NONE


def _wait_async(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 16)
    first = c.expr(e.args[0])
    if isinstance(first, ScalarT):
        if len(e.args) != 1:
            raise c.err("arity", "wait_async(n) takes one count, or a list of buffers", e)
        n = c.need_const_int(e.args[0], "the number of copy groups left in flight")
        if n < 0:
            raise c.err("range", "wait_async(n) needs n >= 0", e.args[0])
        return NONE
    for a in e.args:
        c.tile_arg(a, "wait_async's argument", ("shared",))
    return NONE


def _barrier(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 0, 0)
    return NONE


def _mbarrier(c: _Checker, e: ast.Call) -> Type:
    """mbarrier(count=C) -> one barrier; mbarrier(count=C, n=N) -> N barriers indexed bar[i]."""
    c.args(e, 0, 0, ("count", "n"))
    if c.role_depth or c.lambda_vars:
        raise c.err("placement", "mbarriers are allocated at the top level of the kernel", e)
    k = e.kw("count")
    if k is not None and c.need_const_int(k.value, "the arrival count") < 1:
        raise c.err("range", "an mbarrier needs at least one arrival per phase", k.value)
    n = e.kw("n")
    if n is not None:
        if c.need_const_int(n.value, "the number of mbarriers") < 1:
            raise c.err("range", "n must be at least 1", n.value)
        return MBARRIER_ARRAY
    return MBARRIER


def _need_barrier(c: _Checker, node: ast.Expr, what: str) -> None:
    t = c.expr(node)
    if t is MBARRIER_ARRAY:
        raise c.err("type", f"{what} is an array of mbarriers; pick one: bar[i]", node)
    if t is not MBARRIER:
        raise c.err("type", f"{what} must be an mbarrier, got {_fmt(t)}", node)


def _mbar_op(kind: str):
    def f(c: _Checker, e: ast.Call) -> Type:
        n = {"arrive": 1, "wait": 2, "expect_tx": 2}[kind]
        c.args(e, n, n)
        _need_barrier(c, e.args[0], f"{kind}'s first argument")
        if n == 2:
            c.need_index(e.args[1], "the phase parity" if kind == "wait" else "the byte count")
        return NONE
    return f


def _store(c: _Checker, e: ast.Call, kind: str = "store") -> Type:
    c.args(e, 2, 2, ("masked", "where"))
    dst = c.tile_arg(e.args[0], f"{kind}'s destination", ("global",) if kind == "atomic_add" else ("global", "shared"))
    v = c.expr(e.args[1])
    w = e.kw("where")
    if dst.space == "shared" and w is not None:
        raise c.err("type", "store into shared memory takes no where= mask", w.value,
                    "select(mask, value, old) in registers, then store the whole tile")
    if kind == "atomic_add" and dst.dtype.name not in ("f32", "bf16", "i32"):
        raise c.err("type", f"atomic_add accumulates into f32, bf16 or i32 tensors, not {dst.dtype}", e.args[0])
    if w is not None:
        mt = c.expr(w.value)
        if not (isinstance(mt, (ScalarT, TileT)) and (not isinstance(mt, TileT) or mt.space == "reg")
                and mt.dtype == BOOL):
            raise c.err("type", f"store's where= must be a boolean tile or condition, got {_fmt(mt)}", w.value,
                        "compare positions, e.g. where=(r0 + arange(BM))[:, None] < r_end")
        ms = mt.shape if isinstance(mt, TileT) else ()
        if len(ms) > len(dst.shape) or any(m not in (1, d) for m, d in zip(ms[::-1], dst.shape[::-1])):
            raise c.err("shape", f"store's where= mask {shape_str(ms)} does not broadcast to the stored tile "
                        f"{shape_str(dst.shape)}", w.value, "use m[:, None] or m[None, :] to add a unit axis")
    if isinstance(v, TileT):
        if v.shape != dst.shape:
            raise c.err("shape", f"{kind}: destination {shape_str(dst.shape)} and value {shape_str(v.shape)} "
                        "differ", e)
        if v.dtype != dst.dtype:
            raise c.err("type", f"{kind}: destination is {dst.dtype} but the value is {v.dtype}", e.args[1],
                        f"convert first: cast(x, {dst.dtype})")
    elif not isinstance(v, ScalarT):
        raise c.err("type", f"{kind}'s value must be a tile or a scalar, got {_fmt(v)}", e.args[1])
    _masked(c, e)
    base = e.args[0]
    while isinstance(base, ast.Subscript):
        base = base.value
    if dst.space == "global" and isinstance(base, ast.Name) and base.id not in c.outputs:
        c.outputs.append(base.id)
    if kind == "atomic_add":  # it adds to what the tensor holds: an input as well
        _note_read(c, e.args[0])
    return NONE


def _atomic_add(c: _Checker, e: ast.Call) -> Type:
    """atomic_add(T[tile], value, where=m): T[i] += value[i] atomically, for f32 / bf16 / i32 global tensors."""
    return _store(c, e, "atomic_add")


def _mma(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 3, 3, ("instr",))
    a = c.tile_arg(e.args[0], "mma's A operand", ("shared", "reg"))
    b = c.tile_arg(e.args[1], "mma's B operand", ("shared", "reg"))
    acc = c.tile_arg(e.args[2], "mma's accumulator", ("reg",))
    if len(a.shape) != 2 or len(b.shape) != 2 or len(acc.shape) != 2:
        raise c.err("rank", "mma multiplies 2-D tiles: a[M, K] @ b[K, N] + acc[M, N]", e)
    m, k1 = a.shape
    k2, n = b.shape
    if k1 != k2:
        raise c.err("shape", f"mma: A is {shape_str(a.shape)} and B is {shape_str(b.shape)}: the contracted "
                    "dimensions differ", e)
    if acc.shape != (m, n):
        raise c.err("shape", f"mma: accumulator is {shape_str(acc.shape)} but A @ B is {shape_str((m, n))}",
                    e.args[2])
    if a.dtype != b.dtype or a.dtype.name not in ("bf16", "f16", "f8e4m3", "f8e5m2"):
        raise c.err("type", f"mma takes bf16/f16/fp8 operands of the same type, got {a.dtype} and {b.dtype}", e)
    if acc.dtype != F32:
        raise c.err("type", f"mma accumulates in f32, not {acc.dtype}", e.args[2])
    ik = e.kw("instr")
    if ik is not None:
        c.expr(ik.value)
        v = c.consts.get(id(ik.value))
        if v not in MMA_INSTRS:
            raise c.err("mma-instr", f"instr={v!r}: choose one of " + ", ".join(f'"{x}"' for x in MMA_INSTRS),
                        ik.value)
    return acc


def _shfl(c: _Checker, e: ast.Call) -> Type:
    """Refused: a tile has no lanes in the language (which thread holds which element is the code generator's
    layout), so a lane exchange has no meaning the interpreter and the verifier could share; the reductions
    do their own shuffles."""
    raise c.err("unsupported", "shfl_xor is not part of the language: tiles have no lanes", e,
                "reduce with sum / max / min / argmax(x, axis=...): the code generator emits the lane shuffles")


def _tag(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 1, tuple(kw.name for kw in e.kwargs))
    t = c.expr(e.args[0])
    if not isinstance(t, TileT):
        raise c.err("type", f"tag() attaches fields to a tile, got {_fmt(t)}", e.args[0])
    if not e.kwargs:
        raise c.err("arity", "tag(x, field=value, ...) needs at least one field", e)
    for kw in e.kwargs:
        if isinstance(kw.value, ast.Lambda):
            _lambda(c, kw.value, len(t.shape), want_bool=False)
        else:
            c.need_index(kw.value, f"tag field '{kw.name}'")
        c.tag_fields.add(kw.name)
    return t


def _lambda(c: _Checker, lam: ast.Lambda, arity: int | None, want_bool: bool) -> None:
    if arity is not None and len(lam.params) != arity:
        raise c.err("arity", f"this lambda takes {len(lam.params)} indices but the tile has {arity} dimensions", lam)
    c.lambda_vars.append(set(lam.params))
    try:
        t = c.expr(lam.body)
    finally:
        c.lambda_vars.pop()
    c.types[id(lam)] = LAMBDA
    if want_bool and not (isinstance(t, ScalarT) and t.dtype == BOOL):
        raise c.err("type", "an assert_tag lambda must return a condition (==, <, and, ...)", lam.body)


def _assert_tag(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 1, 1, ("name",))
    lam = e.args[0]
    if not isinstance(lam, ast.Lambda):
        raise c.err("type", "assert_tag takes a lambda over element indices: assert_tag(lambda i, j: ...)", lam)
    _lambda(c, lam, None, want_bool=True)
    return NONE


def _layout(c: _Checker, e: ast.Call) -> Type:
    c.args(e, 2, 2)
    for a in e.args:
        c.expr(a)
        v = c.consts.get(id(a))
        if not isinstance(v, (tuple, int)):
            raise c.err("type", "layout(shape, stride) takes compile-time integer tuples", a)
    shape, stride = c.consts[id(e.args[0])], c.consts[id(e.args[1])]
    if _flat_len(shape) != _flat_len(stride):
        raise c.err("shape", "layout(shape, stride): shape and stride have different ranks", e)
    return c.set(e, LAYOUT, ("layout", shape, stride), True)


def _flat_len(x) -> int:
    return sum(_flat_len(y) for y in x) if isinstance(x, tuple) else 1


def _swizzle(c: _Checker, e: ast.Call) -> Type:
    """swizzle(B, M, S): XOR bits [M, M+B) of an offset with bits [M+S, M+S+B) (CuTe's Swizzle)."""
    c.args(e, 3, 3)
    b, m, s = (c.need_const_int(a, "a swizzle parameter") for a in e.args)
    if b < 0 or m < 0:
        raise c.err("range", "swizzle(B, M, S) needs B >= 0 and M >= 0", e)
    return c.set(e, LAYOUT, ("swizzle", b, m, s), True)


def _compose(c: _Checker, e: ast.Call) -> Type:
    """compose(outer, inner): outer(inner(x)), e.g. compose(swizzle(3, 3, 3), layout((64, 64), (64, 1)))."""
    c.args(e, 2, 2)
    for a in e.args:
        if c.expr(a) is not LAYOUT:
            raise c.err("type", "compose takes two layouts (layout(...), swizzle(...) or compose(...))", a)
    inner = c.consts[id(e.args[1])]
    if inner[0] == "swizzle":
        raise c.err("type", "a swizzle applies to offsets: put it first, compose(swizzle(...), layout(...))",
                    e.args[1])
    return c.set(e, LAYOUT, ("compose", c.consts[id(e.args[0])], inner), True)


def _assume(c: _Checker, e: ast.Call) -> Type:
    """assume(cond): a precondition on runtime dims/scalars (and scalar loads), checked by the
    interpreter where it executes, used by the verifier. assume(lambda i: cond, over=N): cond holds for
    every i in 0..N-1 (a contract over tensor contents, e.g. a host schedule)."""
    c.args(e, 1, 1, ("over",))
    if c.role_depth or c.lambda_vars:
        raise c.err("placement", "assume(...) belongs at the top level of the kernel", e)
    over = e.kw("over")
    if isinstance(e.args[0], ast.Lambda) or over is not None:
        if not (isinstance(e.args[0], ast.Lambda) and over is not None and len(e.args[0].params) == 1):
            raise c.err("type", "a quantified assume is assume(lambda i: condition, over=N): the condition holds "
                        "for every i in 0..N-1", e)
        c.need_index(over.value, "over=")
        _lambda(c, e.args[0], 1, want_bool=True)
        return NONE
    t = c.expr(e.args[0])
    if not (isinstance(t, ScalarT) and t.dtype == BOOL):
        raise c.err("type", "assume takes a condition on runtime dimensions, e.g. assume(K % 8 == 0)", e.args[0])
    return NONE


BUILTINS = {
    "assume": _assume,
    "block_id": _index_fn("block_id"), "num_blocks": _index_fn("num_blocks"),
    "thread_id": _index_fn("thread_id"), "warp_id": _index_fn("warp_id"), "lane_id": _index_fn("lane_id"),
    "warpgroup_id": _index_fn("warpgroup_id"),
    "cdiv": _cdiv, "min": _minmax("min"), "max": _minmax("max"), "sum": _reduce("sum"), "argmax": _reduce("argmax"),
    "exp": _unary_math("exp"), "exp2": _unary_math("exp2"), "log": _unary_math("log"),
    "log2": _unary_math("log2"), "sqrt": _unary_math("sqrt"), "rsqrt": _unary_math("rsqrt"),
    "abs": _unary_math("abs"), "tanh": _unary_math("tanh"), "erf": _unary_math("erf"),
    "sigmoid": _unary_math("sigmoid"), "gelu": _unary_math("gelu"), "silu": _unary_math("silu"),
    "cast": _cast, "select": _select,
    "shared": _shared, "zeros": _zeros, "full": _full, "arange": _arange, "load": _load,
    "copy": _copy("copy"), "copy_async": _copy("copy_async"), "copy_bulk": _copy("copy_bulk"),
    "commit": _commit, "wait_async": _wait_async, "barrier": _barrier,
    "mbarrier": _mbarrier, "arrive": _mbar_op("arrive"), "wait": _mbar_op("wait"),
    "expect_tx": _mbar_op("expect_tx"), "store": _store, "atomic_add": _atomic_add, "mma": _mma, "shfl_xor": _shfl,
    "tag": _tag, "assert_tag": _assert_tag, "layout": _layout, "compose": _compose, "swizzle": _swizzle,
}


def check_kernel(kernel: ast.Kernel, defines: dict[str, object] | None = None) -> Checked:
    """Type-check one kernel with compile-time parameters bound; raises ArgusError."""
    return _Checker(kernel, defines or {}).run()


def _without_layouts(e: ast.Expr) -> ast.Expr:
    """`e` with each `transposed(X)` as the literal True (for typing a specialize condition)."""
    if isinstance(e, ast.Call) and e.func_name == "transposed":
        return ast.Const(e.span, True)
    if isinstance(e, ast.BoolOp):
        return ast.BoolOp(e.span, e.op, _without_layouts(e.left), _without_layouts(e.right))
    if isinstance(e, ast.UnaryOp):
        return ast.UnaryOp(e.span, e.op, _without_layouts(e.operand))
    return e


def check_layer(layer: ast.Layer, defines: dict[str, object] | None = None) -> CheckedLayer:
    """Type-check a layer's signature, params and reference block; raises ArgusError."""
    return _Checker(layer, defines or {}).run_layer()


def check_module(module: ast.Module, defines: dict[str, object] | None = None) -> list[Checked]:
    if not module.kernels:
        raise ArgusError(Diagnostic("error", "empty", "no kernel in this file", module.span,
                                    ("declare one: kernel name(A: bf16[M, K], ...):",)))
    return [check_kernel(k, defines) for k in module.kernels]


def _method_hint(attr: str) -> str:
    if attr == "astype":
        return "drop it: the reference already sees floats in float64 and integers in int64 (or float(X), int(X))"
    if attr in REFERENCE_NAMES:
        return f"write {attr}(X, axis=...)" if attr in ("sum", "max", "min", "mean") else f"write {attr}(X, ...)"
    return f"'{attr}' is not among the reference functions either: " + ", ".join(sorted(REFERENCE_NAMES))
