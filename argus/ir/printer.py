"""Text form of the IR: stable, readable, used by golden tests and `argus check --emit-ir`."""

from __future__ import annotations

from argus.dsl.types import ScalarT, TileT
from argus.ir import nodes as ir

_PREC = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "|": 5, "^": 6, "&": 7,
         "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10, "**": 12}


def expr(e, prec: int = 0) -> str:
    if isinstance(e, ir.Ref):
        return ref(e)
    if isinstance(e, ir.Const):
        return repr(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Special):
        return f"{e.kind}({e.axis})" if e.kind in ("block_id", "num_blocks") else f"{e.kind}()"
    if isinstance(e, (ir.Bin, ir.Cmp)):
        p = _PREC.get(e.op, 3)
        s = f"{expr(e.a, p)} {e.op} {expr(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, ir.Un):
        return f"{e.op}{'' if e.op != 'not' else ' '}{expr(e.a, 11)}"
    if isinstance(e, ir.Select):
        return f"select({expr(e.cond)}, {expr(e.a)}, {expr(e.b)})"
    if isinstance(e, ir.Math):
        if e.fn == "cast":
            return f"cast({expr(e.args[0])}, {e.type.dtype})"
        return f"{e.fn}({', '.join(expr(a) for a in e.args)})"
    if isinstance(e, ir.Reduce):
        return f"{e.op}({expr(e.x)}, axis={e.axis})"
    if isinstance(e, ir.Full):
        return f"full({ty(e.type)}, {expr(e.value)})"
    if isinstance(e, ir.Arange):
        return f"arange({e.type.shape[0]})"
    if isinstance(e, ir.Load):
        return f"load({ref(e.ref)}{'' if e.masked else ', masked=False'})"
    if isinstance(e, ir.Mma):
        lay = ""
        if e.layout is not None:
            m, n, k = e.layout.inst_shape
            lay = f", warps={e.layout.warps_m}x{e.layout.warps_n}, inst=m{m}n{n}k{k}"
        return f"mma({expr(e.a)}, {expr(e.b)}, {expr(e.acc)}, instr={e.instr!r}{lay})"
    if isinstance(e, ir.Shfl):
        return f"shfl_xor({expr(e.x)}, {e.mask})"
    if isinstance(e, ir.Reshape):
        return f"reshape({expr(e.x)}, {list(e.type.shape)})"
    if isinstance(e, ir.Transpose):
        return f"{expr(e.x, 13)}.T"
    if isinstance(e, ir.Lambda):
        return f"lambda {', '.join(e.params)}: {expr(e.body)}"
    if isinstance(e, ir.Tag):
        return f"tag({expr(e.x)}, {', '.join(f'{n}={expr(v)}' for n, v in e.fields)})"
    if isinstance(e, ir.ElemTag):
        return f"{expr(e.source)}[{', '.join(expr(i) for i in e.indices)}].{e.field}"
    raise TypeError(type(e).__name__)


def ref(r: ir.Ref) -> str:
    parts = []
    for s, n in zip(r.starts, r.extents):
        if n is None:
            parts.append(expr(s))
        else:
            parts.append(f"{expr(s)}:+{n}")
    return f"{r.base}[{', '.join(parts)}]{'.T' if r.transposed else ''}"


def bar(b: ir.BarrierRef) -> str:
    return b.name if b.index is None else f"{b.name}[{expr(b.index)}]"


def ty(t) -> str:
    if isinstance(t, TileT):
        return f"{t.dtype}[{', '.join(map(str, t.shape))}]"
    if isinstance(t, ScalarT):
        return str(t.dtype)
    return str(t)


def stmts(body, indent: int = 1) -> list[str]:
    pad = "    " * indent
    out: list[str] = []
    for s in body:
        if isinstance(s, ir.Let):
            out.append(f"{pad}{s.name}: {ty(s.value.type)} = {expr(s.value)}")
        elif isinstance(s, ir.AllocShared):
            sw = (f", swizzle={s.swizzle}" if s.swizzle else "") + (f", layout={s.layout}" if s.layout else "")
            out.append(f"{pad}{s.name} = shared({s.dtype}[{', '.join(map(str, s.shape))}]{sw})")
        elif isinstance(s, ir.AllocBarrier):
            out.append(f"{pad}{s.name} = mbarrier(count={s.count}{'' if s.n is None else f', n={s.n}'})")
        elif isinstance(s, ir.Copy):
            extra = ("" if s.masked else ", masked=False") + (f", barrier={bar(s.barrier)}" if s.barrier else "")
            op = {"sync": "copy", "async": "copy_async", "bulk": "copy_bulk"}[s.mode]
            out.append(f"{pad}{op}({ref(s.dst)}, {expr(s.src)}{extra})")
        elif isinstance(s, ir.Commit):
            out.append(f"{pad}commit()")
        elif isinstance(s, ir.WaitGroup):
            out.append(f"{pad}wait_group({s.n})")
        elif isinstance(s, ir.Barrier):
            out.append(f"{pad}barrier()")
        elif isinstance(s, ir.Turn):
            out.append(f"{pad}turn_{s.edge}()")
        elif isinstance(s, ir.Arrive):
            out.append(f"{pad}arrive({bar(s.barrier)})")
        elif isinstance(s, ir.WaitBarrier):
            out.append(f"{pad}wait({bar(s.barrier)}, {expr(s.phase)})")
        elif isinstance(s, ir.ExpectTx):
            out.append(f"{pad}expect_tx({bar(s.barrier)}, {expr(s.nbytes)})")
        elif isinstance(s, ir.Store):
            where = "" if getattr(s, "mask", None) is None else f", where={expr(s.mask)}"
            out.append(f"{pad}store({ref(s.dst)}, {expr(s.value)}{'' if s.masked else ', masked=False'}{where})")
        elif isinstance(s, ir.AtomicAdd):
            where = "" if s.mask is None else f", where={expr(s.mask)}"
            out.append(f"{pad}atomic_add({ref(s.dst)}, {expr(s.value)}{'' if s.masked else ', masked=False'}{where})")
        elif isinstance(s, ir.For):
            kind = "" if s.kind == "serial" else f"  # {s.kind}"
            out.append(f"{pad}for {s.var} in range({expr(s.start)}, {expr(s.stop)}, {expr(s.step)}):{kind}")
            out.extend(stmts(s.body, indent + 1) or [pad + "    pass"])
        elif isinstance(s, ir.PipelineFor):
            out.append(f"{pad}for {s.var} in pipeline({expr(s.count)}, stages={s.stages}):")
            out.extend(stmts(s.producer, indent + 1))
            out.append(f"{pad}    # wait")
            out.extend(stmts(s.consumer, indent + 1))
        elif isinstance(s, ir.If):
            out.append(f"{pad}if {expr(s.cond)}:")
            out.extend(stmts(s.then, indent + 1) or [pad + "    pass"])
            if s.orelse:
                out.append(f"{pad}else:")
                out.extend(stmts(s.orelse, indent + 1))
        elif isinstance(s, ir.Assume):
            over = "" if getattr(s, "over", None) is None else f", over={expr(s.over)}"
            out.append(f"{pad}assume({expr(s.cond)}{over})")
        elif isinstance(s, ir.AssertTag):
            out.append(f"{pad}assert_tag({expr(s.predicate)})")
        elif isinstance(s, ir.Role):
            extra = f", release={s.release!r}" if s.release != "deferred" else ""
            out.append(f"{pad}with role({s.kind!r}, warpgroups={s.warpgroups}{extra}):")
            out.extend(stmts(s.body, indent + 1))
        else:
            raise TypeError(type(s).__name__)
    return out


def kernel(k: ir.Kernel) -> str:
    args = ", ".join([f"{t.name}: {t.dtype}[{', '.join(map(str, t.dims))}]" for t in k.tensors]
                     + [f"{s.name}: {s.dtype}" for s in k.scalars])
    head = [f"kernel {k.name}({args}):",
            f"    # params: {', '.join(f'{n}={v!r}' for n, v in k.params)}",
            f"    # launch grid=({', '.join(expr(g) for g in k.grid)}), threads={k.threads}"
            + (f", cluster={k.cluster}" if k.cluster != (1,) else "")
            + (f", blocks_per_sm={k.blocks_per_sm}" if k.blocks_per_sm is not None else "")
            + (f", metadata={k.metadata!r}" if k.metadata is not None else ""),
            f"    # inputs: {', '.join(k.inputs)}; outputs: {', '.join(k.outputs)}"]
    return "\n".join(head + stmts(k.body)) + "\n"
