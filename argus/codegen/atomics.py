"""`atomic_add(T[tile], value, where=m)` in generated code: one atomic add per element held.

Each element is added once, by the first thread holding it (a layout with replicas would otherwise add
it once per replica). f32 uses `atomicAdd(float*)` (a `red.global.add.f32` since the result is
unused), i32 `atomicAdd(int*)` (two's complement: wraps as the interpreter's int32 sum does); bf16
adds two neighbouring columns with one `atomicAdd(__nv_bfloat162*)` where the pair is
aligned and inside the tensor (sm_80+), else one `atomicAdd(__nv_bfloat16*)`. Masks are those of
`store`: elements outside the tensor (the default) and where the mask is false are skipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from argus.codegen.errors import unsupported
from argus.codegen.memory import gview, masked_condition, open_runs, written_value
from argus.dsl.types import TileT
from argus.ir import nodes as ir

if TYPE_CHECKING:
    from argus.codegen.emit import Emitter


def atomic_add(em: Emitter, s: ir.AtomicAdd) -> None:
    gv = gview(em, s.dst)
    dt = s.dst.dtype
    if dt.name not in ("f32", "bf16", "i32"):
        raise unsupported(f"atomic_add into {dt}", s.span, "f32, bf16 and i32 tensors are supported")
    tile = isinstance(s.value.type, TileT)
    lay = s.layout if tile else em.default_layout(s.dst.shape, dt.bytes)
    if lay is None:
        raise unsupported("this atomic_add's value: it would need two different register layouts", s.span)
    em.features.add("atomics")
    tm = em.tilemap(lay)
    loads = em.preload(s.value, tm) if tile else {}
    mask = s.mask
    if mask is not None and isinstance(mask.type, TileT):
        loads.update(em.preload(mask, tm))
    pair = dt.name == "bf16" and gv.contiguous and tm.run >= 2
    v = 2 if pair else 1
    em.line(f"// atomic_add: {tm.slots} elements per thread" + (", in bf16 pairs where aligned" if pair else ""))
    gb = open_runs(em, gv, tm, v, dt.bytes)

    def value(k: str) -> str:
        return written_value(em, s.value, dt, k, tm, loads)

    def where(cond: str, slots: list[str]) -> str:
        return masked_condition(em, mask, cond, slots, tm, loads)

    def one(cond: str, col: str, slot: str) -> None:
        em.line(f"if ({cond}) atomicAdd({gv.ptr} + {gv.offset(gb, 'ag_r', col)}, {value(slot)});")

    if pair:
        cond = where(gv.in_range("ag_r", "ag_c", 2) if s.masked else "true", ["ag_i", "ag_i + 1"])
        em.open(f"if (ag_aligned && {cond})")
        em.line(f"atomicAdd(reinterpret_cast<__nv_bfloat162*>({gv.ptr} + {gv.offset(gb, 'ag_r', 'ag_c')}), "
                f"__halves2bfloat162({value('ag_i')}, {value('ag_i + 1')}));")
        em.depth -= 1
        em.open("} else")
        for u in range(2):
            col, slot = ("ag_c", "ag_i") if u == 0 else ("ag_c + 1", "ag_i + 1")
            one(where(gv.in_range("ag_r", col) if s.masked else "true", [slot]), col, slot)
        em.close()
    else:
        one(where(gv.in_range("ag_r", "ag_c") if s.masked else "true", ["ag_i"]), "ag_c", "ag_i")
    em.close()
    if tm.replicas > 1:
        em.close()
    em.close()
