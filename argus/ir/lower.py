"""Lowering: a checked AST (argus.dsl.check) -> IR kernel (argus.ir.nodes).

Mechanical: every type and compile-time value comes from the checker's tables. Views of shared or
global memory assigned to a name are aliases (substituted at each use), not values.
"""

from __future__ import annotations

from argus.dsl import ast
from argus.dsl.check import Checked
from argus.dsl.diagnostics import error
from argus.dsl.types import BOOL, I32, ElemT, ScalarT, TileT
from argus.ir import nodes as ir

_MATH = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "cdiv", "cast", "tanh", "erf", "sigmoid", "gelu",
         "silu"}


class _Lower:
    def __init__(self, c: Checked):
        self.c = c
        self.aliases: dict[str, ir.Ref] = {}
        self.shared: set[str] = set()

    def t(self, node: ast.Expr):
        return self.c.types[id(node)]

    # ---- statements ----
    def block(self, stmts) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ast.Stmt) -> list[ir.Stmt]:
        if isinstance(s, (ast.Param, ast.Specialize, ast.Launch, ast.Pass)):
            return []
        if isinstance(s, ast.Assign):
            return self.assign(s)
        if isinstance(s, ast.AugAssign):
            value = ir.Bin(self.c.types[id(s)], s.span, s.op, self.var(s.target), self.expr(s.value))
            return [ir.Let(s.span, s.target.id, value)]
        if isinstance(s, ast.ExprStmt):
            return self.call_stmt(s.expr)
        if isinstance(s, ast.For):
            return [self.for_stmt(s)]
        if isinstance(s, ast.If):
            return [ir.If(s.span, self.expr(s.cond), self.block(s.body), self.block(s.orelse))]
        if isinstance(s, ast.With) and s.context.func_name == "turn":
            on = not s.context.args or self.c.consts[id(s.context.args[0])]
            body = list(self.block(s.body))
            return [ir.Turn(s.span, "begin"), *body, ir.Turn(s.span, "end")] if on else body
        if isinstance(s, ast.With):
            c = s.context
            kw = {k.name: self.c.consts[id(k.value)] for k in c.kwargs}
            return [ir.Role(s.span, c.args[0].value, kw["warpgroups"], kw.get("registers"), self.block(s.body),
                            kw.get("release", "deferred"))]
        raise error("unsupported", f"cannot lower {type(s).__name__}", s.span)

    def var(self, n: ast.Name) -> ir.Expr:
        return ir.Var(self.c.types.get(id(n), ScalarT(I32, False)), n.span, n.id)

    def assign(self, s: ast.Assign) -> list[ir.Stmt]:
        values = s.value.elts if len(s.targets) > 1 else (s.value,)
        out: list[ir.Stmt] = []
        pending: list[tuple[str, ir.Expr, ast.Node]] = []
        for tgt, v in zip(s.targets, values):
            t = self.t(v)
            if isinstance(v, ast.Call) and v.func_name == "shared":
                dt, shape = self.c.consts[id(v.args[0])]
                sw, lay = v.kw("swizzle"), v.kw("layout")
                self.shared.add(tgt.id)
                out.append(ir.AllocShared(s.span, tgt.id, dt, shape, self.c.consts[id(sw.value)] if sw else 0,
                                          self.c.consts[id(lay.value)] if lay else None))
            elif isinstance(v, ast.Call) and v.func_name == "mbarrier":
                cnt, n = v.kw("count"), v.kw("n")
                out.append(ir.AllocBarrier(s.span, tgt.id, self.c.consts[id(cnt.value)] if cnt else 1,
                                           self.c.consts[id(n.value)] if n else None))
            elif isinstance(t, TileT) and t.space in ("shared", "global"):
                self.aliases[tgt.id] = self.ref(v)
            else:
                pending.append((tgt.id, self.expr(v), v))
        if len(pending) > 1:  # parallel assignment: evaluate every value before binding any name
            names = {p[0] for p in pending}
            tmp = []
            for name, val, v in pending:
                if _uses(val, names):
                    out.append(ir.Let(v.span, f"{name}__tmp", val))
                    tmp.append((name, ir.Var(val.type, v.span, f"{name}__tmp"), v))
                else:
                    tmp.append((name, val, v))
            pending = tmp
        out.extend(ir.Let(s.span, name, val) for name, val, _ in pending)
        return out

    def call_stmt(self, e: ast.Expr) -> list[ir.Stmt]:
        assert isinstance(e, ast.Call)
        name = e.func_name
        masked = self._masked(e)
        if name in ("copy", "copy_async", "copy_bulk"):
            mode = {"copy": "sync", "copy_async": "async", "copy_bulk": "bulk"}[name]
            src_t = self.t(e.args[1])
            src = self.ref(e.args[1]) if isinstance(src_t, TileT) and src_t.space != "reg" else self.expr(e.args[1])
            bar = e.kw("barrier")
            return [ir.Copy(e.span, self.ref(e.args[0]), src, mode, masked if mode != "bulk" else True,
                            self.barrier(bar.value) if bar else None)]
        if name == "commit":
            return [ir.Commit(e.span)]
        if name == "wait_async":
            if isinstance(self.t(e.args[0]), ScalarT):
                return [ir.WaitGroup(e.span, self.c.consts[id(e.args[0])])]
            # outside a pipeline: wait for everything issued so far, then make it visible to all threads
            return [ir.Commit(e.span), ir.WaitGroup(e.span, 0), ir.Barrier(e.span)]
        if name == "barrier":
            return [ir.Barrier(e.span)]
        if name == "arrive":
            return [ir.Arrive(e.span, self.barrier(e.args[0]))]
        if name == "wait":
            return [ir.WaitBarrier(e.span, self.barrier(e.args[0]), self.expr(e.args[1]))]
        if name == "expect_tx":
            return [ir.ExpectTx(e.span, self.barrier(e.args[0]), self.expr(e.args[1]))]
        if name in ("store", "atomic_add"):
            vt = self.t(e.args[1])
            value = self.expr(e.args[1]) if not (isinstance(vt, TileT) and vt.space == "shared") \
                else ir.Load(TileT(vt.dtype, vt.shape, "reg"), e.args[1].span, self.ref(e.args[1]), True)
            w = e.kw("where")
            mask = self.expr(w.value) if w is not None else None
            dst = self.ref(e.args[0])
            if name == "atomic_add":
                return [ir.AtomicAdd(e.span, dst, value, masked, mask=mask)]
            if dst.space == "shared":  # registers -> shared memory: a synchronous copy of the value
                return [ir.Copy(e.span, dst, value, "sync", True, None)]
            return [ir.Store(e.span, dst, value, masked, mask=mask)]
        if name == "assume":
            over = e.kw("over")
            if over is not None:
                return [ir.Assume(e.span, self.lam(e.args[0]), self.expr(over.value))]
            return [ir.Assume(e.span, self.expr(e.args[0]))]
        if name == "assert_tag":
            nk = e.kw("name")
            return [ir.AssertTag(e.span, self.lam(e.args[0]), self.c.consts.get(id(nk.value)) if nk else None)]
        raise error("unsupported", f"{name}(...) cannot be a statement", e.span)

    def barrier(self, e: ast.Expr) -> ir.BarrierRef:
        if isinstance(e, ast.Subscript):
            return ir.BarrierRef(e.value.id, self.expr(e.items[0]))
        return ir.BarrierRef(e.id, None)

    def _masked(self, e: ast.Call) -> bool:
        m = e.kw("masked")
        return True if m is None else bool(self.c.consts[id(m.value)])

    def for_stmt(self, s: ast.For) -> ir.Stmt:
        it = s.iter
        kind = it.func_name
        i32 = ScalarT(I32, False)
        if kind in ("range", "unroll"):
            args = [self.expr(a) for a in it.args]
            start, stop, step = (ir.Const(ScalarT(I32, True), it.span, 0), args[0], None) if len(args) == 1 \
                else (args[0], args[1], args[2] if len(args) == 3 else None)
            step = step or ir.Const(ScalarT(I32, True), it.span, 1)
            return ir.For(s.span, s.var, start, stop, step, self.block(s.body),
                          "unroll" if kind == "unroll" else "serial")
        if kind == "persistent":
            return ir.For(s.span, s.var, ir.Special(i32, it.span, "block_id", 0), self.expr(it.args[0]),
                          ir.Special(i32, it.span, "num_blocks", 0), self.block(s.body), "persistent")
        # pipeline: split the body at its wait_async(bufs) into producer and consumer halves
        idx = next(i for i, c in enumerate(s.body) if isinstance(c, ast.ExprStmt)
                   and isinstance(c.expr, ast.Call) and c.expr.func_name == "wait_async")
        wait = s.body[idx]
        producer = self.block(s.body[:idx])
        consumer = self.block(s.body[idx + 1:])
        for p in producer:
            if not isinstance(p, (ir.Let, ir.Copy)) or (isinstance(p, ir.Copy) and p.mode != "async"):
                raise error("pipeline", "before wait_async, a pipeline body may only compute indices and issue "
                            "copy_async", p.span, "move other work after the wait")
        stages = self.c.consts[id(it.kw("stages").value)]
        return ir.PipelineFor(s.span, s.var, self.expr(it.args[0]), stages, producer, consumer, wait.span)

    # ---- expressions ----
    def lam(self, e: ast.Lambda) -> ir.Lambda:
        return ir.Lambda(ScalarT(BOOL, False), e.span, e.params, self.expr(e.body))

    def ref(self, e: ast.Expr) -> ir.Ref:
        if isinstance(e, ast.Name):
            if e.id in self.aliases:
                return self.aliases[e.id]
            t = self.t(e)
            if isinstance(t, TileT) and t.space == "shared":
                return ir.Ref("shared", e.id, tuple(self.zero(e) for _ in t.shape), t.shape, t.dtype, span=e.span)
            raise error("type", f"'{e.id}' is not a view of memory", e.span)
        if isinstance(e, ast.Attribute) and e.attr == "T":
            r = self.ref(e.value)
            return ir.Ref(r.space, r.base, r.starts, r.extents, r.dtype, not r.transposed, e.span)
        if isinstance(e, ast.Subscript):
            t = self.t(e.value)
            if hasattr(t, "dims"):  # GlobalT
                starts, extents = [], []
                for it, dim in zip(e.items, t.dims):
                    s, n = self.slice(it, dim)
                    starts.append(s)
                    extents.append(n)
                return ir.Ref("global", e.value.id, tuple(starts), tuple(extents), t.dtype, span=e.span)
            base = self.ref(e.value)
            if base.transposed:
                raise error("type", "index a shared view before transposing it", e.span)
            starts, extents = list(base.starts), list(base.extents)
            kept = [i for i, x in enumerate(extents) if x is not None]
            for it, axis in zip(e.items, kept):
                s, n = self.slice(it, extents[axis])
                starts[axis] = s if isinstance(starts[axis], ir.Const) and starts[axis].value == 0 \
                    else ir.Bin(ScalarT(I32, False), it.span, "+", starts[axis], s)
                extents[axis] = n
            return ir.Ref(base.space, base.base, tuple(starts), tuple(extents), base.dtype, span=e.span)
        raise error("type", "expected a view of shared or global memory", e.span)

    def zero(self, e: ast.Node) -> ir.Expr:
        return ir.Const(ScalarT(I32, True), e.span, 0)

    def slice(self, it: ast.Expr, dim) -> tuple[ir.Expr, int | None]:
        if isinstance(it, ast.Slice):
            if it.length is not None:
                return self.expr(it.start), self.c.consts[id(it.length)]
            lo = 0 if it.start is None else self.c.consts[id(it.start)]
            hi = dim if it.stop is None else self.c.consts[id(it.stop)]
            return ir.Const(ScalarT(I32, True), it.span, lo), hi - lo
        return self.expr(it), None

    def expr(self, e: ast.Expr) -> ir.Expr:
        t = self.c.types[id(e)]
        if id(e) in self.c.consts and isinstance(t, ScalarT):
            return ir.Const(t, e.span, self.c.consts[id(e)])
        if isinstance(e, ast.Name):
            if e.id in self.aliases:
                raise error("type", f"'{e.id}' is a view of memory; load it first: load({e.id})", e.span)
            return ir.Var(t, e.span, e.id)
        if isinstance(e, ast.BinOp):
            return ir.Bin(t, e.span, e.op, self.expr(e.left), self.expr(e.right))
        if isinstance(e, ast.UnaryOp):
            return ir.Un(t, e.span, e.op, self.expr(e.operand))
        if isinstance(e, (ast.Compare, ast.BoolOp)):
            return ir.Cmp(t, e.span, e.op, self.expr(e.left), self.expr(e.right))
        if isinstance(e, ast.IfExp):
            pick = (e.then if self.c.consts[id(e.cond)] else e.orelse) if id(e.cond) in self.c.consts else None
            if pick is not None and self.c.types[id(pick)] == t:  # a compile-time choice: no select
                return self.expr(pick)
            return ir.Select(t, e.span, self.expr(e.cond), self.expr(e.then), self.expr(e.orelse))
        if isinstance(e, ast.Attribute):
            if isinstance(self.t(e.value), ElemT):
                src, idx = self.elem(e.value)
                return ir.ElemTag(t, e.span, src, idx, e.attr)
            if e.attr == "T":
                return ir.Transpose(t, e.span, self.expr(e.value))
        if isinstance(e, ast.Subscript):
            return ir.Reshape(t, e.span, self.expr(e.value))
        if isinstance(e, ast.Call):
            return self.call(e, t)
        raise error("unsupported", f"cannot lower {type(e).__name__} here", e.span)

    def elem(self, e: ast.Expr) -> tuple[ir.Ref | ir.Expr, tuple[ir.Expr, ...]]:
        assert isinstance(e, ast.Subscript)
        vt = self.t(e.value)
        idx = tuple(self.expr(i) for i in e.items)
        if isinstance(vt, TileT) and vt.space == "reg":
            return self.expr(e.value), idx
        if hasattr(vt, "dims"):
            r = ir.Ref("global", e.value.id, tuple(self.zero(e) for _ in vt.dims), tuple(vt.dims), vt.dtype,
                       span=e.span)
            return r, idx
        return self.ref(e.value), idx

    def operand(self, e: ast.Expr) -> ir.Ref | ir.Expr:
        t = self.t(e)
        return self.ref(e) if isinstance(t, TileT) and t.space != "reg" else self.expr(e)

    def call(self, e: ast.Call, t) -> ir.Expr:
        name = e.func_name
        if name in ("block_id", "num_blocks"):
            return ir.Special(t, e.span, name, self.c.consts[id(e.args[0])])
        if name in ("thread_id", "warp_id", "lane_id", "warpgroup_id"):
            return ir.Special(t, e.span, name, 0)
        if name in ("min", "max", "sum", "argmax") and e.kw("axis") is not None:
            ax = self.c.consts[id(e.kw("axis").value)] % len(self.t(e.args[0]).shape)
            return ir.Reduce(t, e.span, name, self.expr(e.args[0]), ax)
        if name in ("min", "max"):
            return ir.Math(t, e.span, name, tuple(self.expr(a) for a in e.args))
        if name == "cast":
            return ir.Math(t, e.span, "cast", (self.expr(e.args[0]),))
        if name in _MATH:
            return ir.Math(t, e.span, name, tuple(self.expr(a) for a in e.args))
        if name == "select":
            return ir.Select(t, e.span, *(self.expr(a) for a in e.args))
        if name == "zeros":
            return ir.Full(t, e.span, ir.Const(ScalarT(t.dtype, True), e.span, 0))
        if name == "full":
            return ir.Full(t, e.span, self.expr(e.args[1]))
        if name == "arange":
            return ir.Arange(t, e.span)
        if name == "load":
            return ir.Load(t, e.span, self.ref(e.args[0]), self._masked(e))
        if name == "mma":
            ik = e.kw("instr")
            instr = self.c.consts[id(ik.value)] if ik else "mma.sync"
            return ir.Mma(t, e.span, self.operand(e.args[0]), self.operand(e.args[1]), self.expr(e.args[2]), instr)
        if name == "shfl_xor":
            return ir.Shfl(t, e.span, self.expr(e.args[0]), self.c.consts[id(e.args[1])])
        if name == "tag":
            fields = tuple((kw.name, self.lam_value(kw.value)) for kw in e.kwargs)
            return ir.Tag(t, e.span, self.expr(e.args[0]), fields)
        raise error("unsupported", f"{name}(...) has no value here", e.span)

    def lam_value(self, v: ast.Expr) -> ir.Expr:
        if isinstance(v, ast.Lambda):
            return ir.Lambda(ScalarT(I32, False), v.span, v.params, self.expr(v.body))
        return self.expr(v)


def _uses(e, names: set[str]) -> bool:
    if isinstance(e, ir.Var):
        return e.name in names
    if isinstance(e, (ir.Expr, ir.Ref)):
        return any(_uses(getattr(e, f), names) for f in e.__dataclass_fields__ if f not in ("type", "span"))
    if isinstance(e, tuple):
        return any(_uses(x, names) for x in e)
    return False


def lower(c: Checked) -> ir.Kernel:
    """Translate a checked kernel into IR (before the pass pipeline)."""
    k = c.kernel
    lw = _Lower(c)
    body = lw.block(k.body)
    grid = tuple(lw.expr(g) for g in c.launch.grid)
    scalars = tuple(ir.ScalarDecl(a.name, c.scalars[a.name].dtype,
                                  None if a.default is None else const_default(a), a.span)
                    for a in k.args if a.dims is None)
    arg_spans = {a.name: a.span for a in k.args}
    tensors = tuple(ir.TensorDecl(n, g.dtype, g.dims, arg_spans.get(n)) for n, g in c.tensors.items())
    return ir.Kernel(k.name, k.span.path, tensors, scalars, tuple(c.dims), tuple(c.params.items()), grid,
                     c.launch.threads, c.launch.cluster, body, tuple(c.outputs), tuple(c.inputs),
                     k.reference, k.span, c.launch.blocks_per_sm, c.launch.metadata)


def const_default(a: ast.Arg):
    if isinstance(a.default, ast.Const):
        return a.default.value
    if isinstance(a.default, ast.UnaryOp) and isinstance(a.default.operand, ast.Const):
        return -a.default.operand.value
    raise error("type", "a scalar argument's default must be a number", a.default.span)

