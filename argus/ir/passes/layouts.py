"""Layout assignment: choose how each `mma` spreads its tile over warps, and check the instruction fits.

mma.sync m16n8k16: the block's warps form a warps_m x warps_n grid over the accumulator; each warp
computes (M / warps_m) x (N / warps_n) with 16x8x16 instructions. wgmma m64nNk16: the warpgroups
split M in 64-row slabs (or N when M is a single slab); one instruction covers 64 x n with
n <= 256. Shapes the instruction cannot tile are errors at the `mma`, with the reason.
"""

from __future__ import annotations

import dataclasses

from argus.dsl.diagnostics import error
from argus.ir import nodes as ir
from argus.ir.transform import rewrite


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mma_sync_layout(m: int, n: int, k: int, threads: int, span) -> ir.FragmentLayout:
    warps = threads // 32
    if m % 16 or n % 8 or k % 16:
        raise error("mma-shape", f"mma.sync m16n8k16 cannot tile [{m}, {k}] @ [{k}, {n}]", span,
                    "M must be a multiple of 16, N of 8 and K of 16")
    best = None
    for wm in _divisors(warps):
        wn = warps // wm
        if m % (16 * wm) or n % (8 * wn):
            continue
        tm, tn = m // wm, n // wn
        score = abs(tm - tn)  # squarest warp tile: best operand reuse per warp
        if best is None or score < best[0]:
            best = (score, wm, wn)
    if best is None:
        raise error("mma-shape", f"{warps} warps cannot split a {m}x{n} mma.sync tile evenly", span,
                    "change the tile or the thread count so each warp gets a multiple of 16x8")
    return ir.FragmentLayout("mma.sync", (m, n), best[1], best[2], (16, 8, 16))


def _wgmma_layout(m: int, n: int, k: int, threads: int, b_in_regs: bool, span) -> ir.FragmentLayout:
    if threads % 128:
        raise error("mma-shape", f"wgmma needs whole warpgroups (128 threads); this block has {threads}", span,
                    "launch with warpgroups=N or threads a multiple of 128")
    if b_in_regs:
        raise error("mma-shape", "wgmma reads its B operand from shared memory, not registers", span,
                    "keep B in a shared buffer, or use instr=\"mma.sync\"")
    groups = threads // 128
    if k % 16:
        raise error("mma-shape", f"wgmma k16 cannot tile K={k}", span, "K must be a multiple of 16")
    if m % (64 * groups) == 0:
        gm, gn = groups, 1
    elif m == 64 and n % (8 * groups) == 0:
        gm, gn = 1, groups
    else:
        raise error("mma-shape", f"{groups} warpgroup(s) cannot split a {m}x{n} wgmma tile", span,
                    "each warpgroup computes 64-row slabs: make M a multiple of 64 x warpgroups")
    per_n = n // gn
    if per_n % 8:
        raise error("mma-shape", f"wgmma N={per_n} per warpgroup must be a multiple of 8", span)
    inst_n = max(d for d in range(8, min(per_n, 256) + 1, 8) if per_n % d == 0)
    return ir.FragmentLayout("wgmma", (m, n), gm, gn, (64, inst_n, 16))




def assign_layouts(kernel: ir.Kernel) -> ir.Kernel:
    def fix_stmt_threads(stmts, threads):
        res = []
        for s in stmts:
            t = s.warpgroups * 128 if isinstance(s, ir.Role) else threads

            def fn(node, t=t):
                if isinstance(node, ir.Mma) and node.layout is None:
                    (m, k), n = _shape2(node.a), _shape2(node.b)[1]
                    if node.instr == "wgmma":
                        lay = _wgmma_layout(m, n, k, t, not isinstance(node.b, ir.Ref), node.span)
                    else:
                        lay = _mma_sync_layout(m, n, k, t, node.span)
                    return dataclasses.replace(node, layout=lay)
                return None
            if isinstance(s, ir.Role):
                res.append(dataclasses.replace(s, body=fix_stmt_threads(s.body, t)))
            else:
                res.append(rewrite(s, fn))
        return tuple(res)
    return dataclasses.replace(kernel, body=fix_stmt_threads(kernel.body, kernel.threads))


def _shape2(x) -> tuple[int, int]:
    return x.shape if isinstance(x, ir.Ref) else x.type.shape
