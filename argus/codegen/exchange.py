"""Values that move between threads: reductions along an axis and layout conversions.

* `reduce`: `op(x, axis=a)` of a register tile in any layout (argus/ir/reg_layout.reduction_plan):
  each thread folds its own slots into the kept indices it holds, then combines with the lanes holding
  the same indices (`__shfl_xor_sync`), then, when a line spans several warps (a blocked row of a wide
  tile, the columns of an mma fragment), through the scope's shared scratch: every warp writes its
  partial per kept index, a barrier, every thread combines the partials of its indices. The result is
  held as the plan's slice of the operand's layout.
* `convert`: a register tile into another layout (a transpose read, a vector broadcast into a tile
  whose slice it is not held in): the holders write it to the scratch, a barrier, every thread reads
  the elements its slots want. Rows are padded so that column reads spread over the banks.

The scratch is the code generator's own shared memory, after the kernel's buffers, one region per
scope (the block, each role); a barrier of the scope comes before it is written (earlier readers are
done) and after (the writes are visible). The program is unchanged, so the interpreter and the
verifier see the same kernel: these are data movements inside one IR operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from argus.codegen.cexpr import compute_type, literal, render_layout
from argus.codegen.errors import unsupported
from argus.codegen.tiles import TileMap
from argus.dsl.types import DType
from argus.ir import nodes as ir
from argus.ir.reg_layout import equivalent, reduction_plan, slice_layout

if TYPE_CHECKING:
    from argus.codegen.emit import Emitter

INT_MAX = 2**31 - 1


def int_range(dt: DType) -> tuple[int, int]:
    """The least and greatest value of an integer (or bool) dtype."""
    if dt.kind == "int":
        return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1
    if dt.kind == "bool":
        return 0, 1
    return 0, 2**dt.bits - 1


def identity(op: str, dt: DType) -> str:
    # an integer max starts from its type's least value: i32's -2^31 would truncate to 0 in an i8 / i16
    # register and win over an all-negative row
    if op == "sum":
        return literal(0, dt)
    if op in ("max", "argmax"):
        return literal(float("-inf"), dt) if dt.is_float else literal(int_range(dt)[0], dt)
    if op in ("min", "argmin"):
        return literal(float("inf"), dt) if dt.is_float else literal(int_range(dt)[1], dt)
    raise unsupported(f"a {op} reduction", None)


def reduce(em: Emitter, r: ir.Reduce, operand: ir.RegLayout) -> tuple[str, ir.RegLayout]:
    """Emit `r` with its operand computed in `operand`; returns (compute-typed array, its layout)."""
    tmx = em.tilemap(operand)
    one_d = len(r.x.type.shape) == 1
    axis = 1 if one_d else r.axis
    try:
        plan = reduction_plan(operand, axis)
    except ValueError as exc:
        raise unsupported(f"this reduction: {exc}", r.span) from None
    lay = slice_layout(operand, 1 - axis)
    if not equivalent(lay, ir.RegLayout("slice", lay.shape, lay.threads, parent=operand, keep=1 - axis)):
        lay = ir.RegLayout("slice", lay.shape, lay.threads, parent=operand, keep=1 - axis)
    rm = em.tilemap(lay)
    arg = r.op in ("argmax", "argmin")
    vdt = r.x.type.dtype  # the values compared / summed
    vt = compute_type(vdt) if arg else compute_type(r.type.dtype)
    acc_dt = vdt if arg else r.type.dtype
    temps = em.preload(r.x, tmx)
    n = plan.fragment.slots
    t = em.tmp("red")
    ti = f"{t}_i" if arg else None
    kept = "rows" if axis == 1 and not one_d else "columns" if not one_d else "element"
    em.line(f"// {r.op}(axis={r.axis}): {tmx.slots} slots per thread onto {n} {kept}, then lanes "
            f"{'^'.join(map(str, plan.lanes)) or '(none)'}"
            + (f", then {plan.partials} partials through shared memory" if plan.cross else ""))
    em.line(f"{vt} {t}[{n}];")
    if arg:
        em.line(f"int {ti}[{n}];")
    em.line("#pragma unroll")
    init = f"{t}[ag_r] = {identity(r.op, acc_dt)};"
    em.line(f"for (int ag_r = 0; ag_r < {n}; ++ag_r) " + (f"{{ {init} {ti}[ag_r] = {INT_MAX}; }}" if arg else init))
    em.line("#pragma unroll")
    em.open(f"for (int ag_s = 0; ag_s < {tmx.slots}; ++ag_s)")
    slot = render_layout(plan.slot_map, "ag_s")
    value = em.ex(r.x, "ag_s", tmx, temps)
    if arg:
        pos = tmx.col("ag_s") if axis == 1 else tmx.row("ag_s")
        em.line(f"const {vt} ag_v = {value};")
        em.line(f"const int ag_p = {pos};")
        _fold_arg(em, r.op, f"{t}[{slot}]", f"{ti}[{slot}]", "ag_v", "ag_p")
    else:
        em.line(f"{t}[{slot}] = {_combine(em, r.op, f'{t}[{slot}]', value, acc_dt)};")
    em.close()
    if plan.lanes:
        em.line("#pragma unroll")
        em.open(f"for (int ag_r = 0; ag_r < {n}; ++ag_r)")
        for m in plan.lanes:
            if arg:
                em.line(f"{{ const {vt} ag_v = __shfl_xor_sync(0xffffffffu, {t}[ag_r], {m}); "
                        f"const int ag_p = __shfl_xor_sync(0xffffffffu, {ti}[ag_r], {m});")
                _fold_arg(em, r.op, f"{t}[ag_r]", f"{ti}[ag_r]", "ag_v", "ag_p")
                em.line("}")
            else:
                other = f"__shfl_xor_sync(0xffffffffu, {t}[ag_r], {m})"
                em.line(f"{t}[ag_r] = {_combine(em, r.op, f'{t}[ag_r]', other, acc_dt)};")
        em.close()
    if plan.cross:
        _cross(em, r, plan, rm, t, ti, vt, acc_dt)
    if not arg and r.type.dtype != acc_dt:
        raise unsupported("a reduction whose result type differs from its operand's", r.span)
    return (ti if arg else t), lay


def _combine(em: Emitter, op: str, a: str, b: str, dt: DType) -> str:
    if op == "sum":
        return f"{a} + {b}"
    return em.math(op, [a, b], dt, nonneg=False)


def _fold_arg(em: Emitter, op: str, v: str, i: str, nv: str, ni: str) -> None:
    """(v, i) <- the better of (v, i) and (nv, ni): NumPy's argmax / argmin (first index on ties, NaN
    wins as the first NaN does)."""
    em.features.add("argreduce")
    fn = "ag_arg_better_max" if op == "argmax" else "ag_arg_better_min"
    em.line(f"if ({fn}({nv}, {ni}, {v}, {i})) {{ {v} = {nv}; {i} = {ni}; }}")


def _cross(em: Emitter, r: ir.Reduce, plan, rm: TileMap, t: str, ti: str | None, vt: str, dt: DType) -> None:
    """Combine the partials of threads in other warps through the scope's scratch."""
    length = plan.fragment.tile[1]
    parts = plan.partials
    n = plan.fragment.slots
    tid = em.scope.tid
    cidx = " + ".join(f"({tid} / {p}) % {s} * {m}" for (p, s), m in zip(plan.cross, _mults(plan.cross)))
    vbytes = 4 if vt == "float" or vt == "int" else 8
    nbytes = parts * length * vbytes + (parts * length * 4 if ti else 0)
    base = em.scratch(nbytes, r.span)
    sv = f"reinterpret_cast<{vt}*>({base})"
    si = f"reinterpret_cast<int*>({base} + {parts * length * vbytes})" if ti else None
    em.line("#pragma unroll")
    em.open(f"for (int ag_r = 0; ag_r < {n}; ++ag_r)")
    em.line(f"const int ag_k = {rm.col('ag_r')};")
    em.line(f"{sv}[({cidx}) * {length} + ag_k] = {t}[ag_r];")
    if ti:
        em.line(f"{si}[({cidx}) * {length} + ag_k] = {ti}[ag_r];")
    em.close()
    em.sync_scope()
    em.line("#pragma unroll")
    em.open(f"for (int ag_r = 0; ag_r < {n}; ++ag_r)")
    em.line(f"const int ag_k = {rm.col('ag_r')};")
    if ti:
        em.line(f"{t}[ag_r] = {sv}[ag_k]; {ti}[ag_r] = {si}[ag_k];")
        em.line("#pragma unroll")
        em.open(f"for (int ag_p2 = 1; ag_p2 < {parts}; ++ag_p2)")
        em.line(f"const {vt} ag_v = {sv}[ag_p2 * {length} + ag_k]; const int ag_p = {si}[ag_p2 * {length} + ag_k];")
        _fold_arg(em, r.op, f"{t}[ag_r]", f"{ti}[ag_r]", "ag_v", "ag_p")
        em.close()
    else:
        em.line(f"{vt} ag_a = {sv}[ag_k];")
        em.line("#pragma unroll")
        em.line(f"for (int ag_p2 = 1; ag_p2 < {parts}; ++ag_p2) "
                f"ag_a = {_combine(em, r.op, 'ag_a', f'{sv}[ag_p2 * {length} + ag_k]', dt)};")
        em.line(f"{t}[ag_r] = ag_a;")
    em.close()


def _mults(cross) -> list[int]:
    out, m = [], 1
    for _, s in cross:
        out.append(m)
        m *= s
    return out


def convert(em: Emitter, src: str, src_lay: ir.RegLayout, dst_lay: ir.RegLayout, dt: DType,
            computed: bool, span) -> str:
    """`src` (an array in `src_lay`; storage-typed unless `computed`) re-distributed as `dst_lay`,
    through the scope's scratch; returns a compute-typed array."""
    from argus.codegen.cexpr import to_compute

    if tuple(src_lay.shape) != tuple(dst_lay.shape):
        raise unsupported(f"converting a {list(src_lay.shape)} tile to a {list(dst_lay.shape)} layout", span)
    stm, dtm = em.tilemap(src_lay), em.tilemap(dst_lay)
    rows, cols = (1, src_lay.shape[0]) if len(src_lay.shape) == 1 else src_lay.shape
    ct = compute_type(dt)
    eb = 8 if ct in ("double", "long long") else 4
    pitch = cols + 1 if rows > 1 else cols  # column reads of a padded row-major tile spread over banks
    base = em.scratch(rows * pitch * eb, span)
    sp = f"reinterpret_cast<{ct}*>({base})"
    t = em.tmp("cv")
    em.line(f"// {src}: register layout {_describe(src_lay)} -> {_describe(dst_lay)} through shared memory")
    em.line(f"{ct} {t}[{dtm.slots}];")
    em.open("")
    if stm.replicas > 1:
        em.open(f"if ({stm.owner()})")
    em.line("#pragma unroll")
    val = f"{src}[ag_i]" if computed else to_compute(dt, f"{src}[ag_i]")
    r, c = (0 if stm.one_d else stm.row("ag_i")), stm.col("ag_i")
    em.line(f"for (int ag_i = 0; ag_i < {stm.slots}; ++ag_i) {sp}[({r}) * {pitch} + ({c})] = {val};")
    if stm.replicas > 1:
        em.close()
    em.close()
    em.sync_scope()
    r, c = (0 if dtm.one_d else dtm.row("ag_i")), dtm.col("ag_i")
    em.line("#pragma unroll")
    em.line(f"for (int ag_i = 0; ag_i < {dtm.slots}; ++ag_i) {t}[ag_i] = {sp}[({r}) * {pitch} + ({c})];")
    return t


def _describe(lay: ir.RegLayout) -> str:
    if lay.kind in ("slice", "transposed") and lay.parent is not None:
        return f"{lay.kind} of {_describe(lay.parent)}"
    return f"{lay.kind}{list(lay.shape)}"

