"""Analytic cost model: an *estimate* of a kernel's time on the target, used as the reward without a GPU.

Per SM and per k-step of the main loop it takes the slowest of tensor-core work, shared-memory
operand traffic (with bank-conflict ways from the swizzle) and L2 -> SM copy traffic, then exposes
global-memory latency that the pipeline depth cannot cover (Little's law), plus, without warp
specialisation, the per-k-step issue and block-barrier time of the MMA warps. Tiles run in waves of
(SMs x resident blocks); HBM traffic follows the operand panels a wave really shares (the program's
own tile order, simulated). Registers and occupancy come from the accumulator size, the role
register budgets and shared memory per block against 227 KB. Every number it produces is an estimate
and is labelled so wherever it is shown; constants live in hardware.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from argus.agent.features import Features, Wave, extract, simulate_wave
from argus.agent.hardware import H200, Machine
from argus.ir import nodes as ir


@dataclass(frozen=True)
class Resources:
    registers: int  # per thread, estimated
    register_cap: int
    spill_fraction: float  # share of the live registers that would spill (0: none)
    smem_bytes: int
    blocks_per_sm: int  # 0: does not fit
    limiter: str  # what bounds blocks_per_sm
    feasible: bool
    reason: str = ""

    def to_json(self) -> dict:
        return {"registers_est": self.registers, "register_cap": self.register_cap,
                "spill_fraction_est": round(self.spill_fraction, 3), "smem_bytes": self.smem_bytes,
                "blocks_per_sm_est": self.blocks_per_sm, "occupancy_limiter": self.limiter,
                "feasible": self.feasible, "reason": self.reason, "estimate": True}


@dataclass(frozen=True)
class CostEstimate:
    seconds: float
    flops_executed: float
    terms: dict[str, float] = field(default_factory=dict)  # seconds per component (see model())
    bound: str = ""  # "tensor" | "smem" | "l2" | "latency" | "sync" | "hbm" | "epilogue"
    resources: Resources | None = None
    wave: Wave | None = None
    conflict_ways: float = 1.0
    notes: tuple[str, ...] = ()
    estimate: bool = True

    def to_json(self) -> dict:
        return {"seconds_est": self.seconds, "bound_est": self.bound, "conflict_ways_est": self.conflict_ways,
                "terms_est": {k: v for k, v in self.terms.items()},
                "resources": self.resources.to_json() if self.resources else None,
                "wave": None if self.wave is None else {"tiles": self.wave.tiles,
                                                         "unique_bytes": self.wave.unique_bytes,
                                                         "total_bytes": self.wave.total_bytes},
                "notes": list(self.notes), "estimate": True}


def resources(f: Features, m: Machine = H200) -> Resources:
    s = f.main
    smem = f.smem_bytes
    if s is None:
        return Resources(32, 255, 0.0, smem, 1, "none", True)
    if f.warp_specialised:
        mma_threads = max(1, f.consumer_warpgroups) * 128
        cap = f.consumer_regs or 168
    else:
        mma_threads = f.threads
        cap = 255
    acc = s.m * s.n / mma_threads  # fp32 accumulator registers per thread
    frag = 0.0
    if s.instr == "mma.sync":
        wm, wn = s.m / s.warps_m, s.n / s.warps_n
        frag = (wm + wn) / 2  # A and B fragments for one k16 slice, double-buffered
    overhead = 24 if f.warp_specialised else (40 if f.copy_mode == "async" else 32)
    need = int(acc + frag + overhead)
    spill = max(0.0, (need - cap) / need)
    regs = min(need, cap)
    limit_smem = m.smem_per_sm.value // (smem + 1024) if smem else m.max_blocks_per_sm
    if f.warp_specialised:
        limit_regs = 1 if (f.producer_regs or f.consumer_regs) else m.regs_per_sm // (f.threads * 168)
    else:
        limit_regs = m.regs_per_sm // (f.threads * (math.ceil(regs / 8) * 8))
    limit_threads = m.max_threads_per_sm // f.threads
    limits = {"shared memory": int(limit_smem), "registers": int(limit_regs), "threads": int(limit_threads),
              "blocks": m.max_blocks_per_sm}
    limiter = min(limits, key=limits.get)
    r = limits[limiter]
    if smem + 1024 > m.smem_per_sm.value:
        return Resources(regs, cap, spill, smem, 0, "shared memory", False,
                         f"needs {smem / 1024:.0f} KB of shared memory per block; an SM has "
                         f"{m.smem_per_sm.value / 1024:.0f} KB")
    if r < 1:
        return Resources(regs, cap, spill, smem, 0, limiter, False, f"no block fits on an SM ({limiter})")
    return Resources(regs, cap, spill, smem, r, limiter, True)


def _conflict_ways(swizzle: int, row_bytes: int) -> float:
    """Shared-memory bank-conflict ways when 8 rows of 16-byte chunks are read (ldmatrix / wgmma)."""
    span = min(row_bytes, 128)
    if span <= 16:
        return 1.0
    return max(1.0, span / max(swizzle, 16))


def _instr_efficiency(f: Features, r: int, m: Machine) -> tuple[float, str]:
    s = f.main
    if s.instr == "wgmma":
        n_per_wg = s.n / s.warps_n
        eff = 1.0 if n_per_wg >= 128 else 0.92 if n_per_wg >= 64 else 0.75 if n_per_wg >= 32 else 0.55
        groups = (f.consumer_warpgroups if f.warp_specialised else f.threads // 128) * r
        note = ""
        if groups < 2:
            eff *= 0.85  # one warpgroup cannot keep wgmma issue going while it waits on its own results
            note = "only one MMA warpgroup per SM"
        return eff, note
    wm, wn = s.m / s.warps_m, s.n / s.warps_n
    eff = m.mma_sync_fraction.value * (1.0 if min(wm, wn) >= 32 else 0.9 if min(wm, wn) >= 16 else 0.7)
    return eff, "mma.sync peaks well below wgmma on sm_90"


def model(kernel: ir.Kernel, dims: dict[str, int], useful_flops: float, m: Machine = H200) -> CostEstimate:
    f = extract(kernel, dims)
    res = resources(f, m)
    if not res.feasible:
        return CostEstimate(math.inf, f.executed_mma_flops, {}, "resources", res, None, 1.0, (res.reason,))
    s = f.main
    if s is None or f.ksteps == 0:
        # No tensor-core loop: a bandwidth-only estimate from the bytes the kernel moves.
        # Bytes at HBM bandwidth, or the CUDA cores' elementwise work (and the SFU's) when that takes longer:
        # a product done with elementwise outer products is bound by its arithmetic, not its reads.
        moved = f.copy_bytes_per_tile + f.load_bytes_per_tile + f.store_bytes_per_tile
        t_hbm = moved * f.tiles / m.hbm_bytes_per_s.value
        per_s = m.clock_hz.value * m.sms
        t_alu = f.alu_per_tile * f.tiles / (m.alu_ops_per_clk_per_sm * per_s)
        t_sfu = 2.0 * f.mufu_per_tile * f.tiles / (m.sfu_ops_per_clk_per_sm * per_s)
        t = max(t_hbm, t_alu, t_sfu) + m.launch_overhead_s.value
        bound = "hbm" if t_hbm >= max(t_alu, t_sfu) else "alu" if t_alu >= t_sfu else "sfu"
        return CostEstimate(t, 0.0, {"hbm": t_hbm, "alu": t_alu, "sfu": t_sfu}, bound, res, None, 1.0,
                            ("no mma: bandwidth and CUDA-core estimate only",))
    sms = m.sms
    # Blocks that really share an SM: the occupancy limit, unless there are too few blocks to fill it.
    launched = (f.grid[0] if f.grid else f.blocks) if f.persistent else f.blocks
    r = max(1, min(res.blocks_per_sm, math.ceil(launched / sms)))
    peak_sm = m.peak_bf16_flops.value * m.sustained_clock_fraction.value / sms
    eff, instr_note = _instr_efficiency(f, r, m)
    flops_step = f.mma_flops_per_tile / max(1, f.ksteps) if f.mma_flops_per_tile else 2.0 * s.m * s.n * s.k
    copy_step = f.copy_bytes_per_tile / max(1, f.ksteps)
    # Operand reads from shared memory per k-step: each warp (mma.sync) or warpgroup (wgmma) reads
    # its rows of A and its columns of B.
    units = s.warps_m * s.warps_n
    read_step = units * ((s.m / s.warps_m) * s.k + s.k * (s.n / s.warps_n)) * 2
    ways = max((_conflict_ways(f.swizzle, rb) for rb in f.operand_row_bytes), default=1.0)
    issue = 1.0
    notes = [instr_note] if instr_note else []
    if f.copy_mode == "async":
        issue = 1.06 if s.instr == "wgmma" else 1.1  # threads issue cp.async and address math
    if not f.warp_specialised and f.ring_depth > 1:
        issue *= 1.03  # a block-wide barrier every k-step
    t_c = r * flops_step / (peak_sm * eff) * issue
    # Transcendentals (softmax's exp2) run on the SFUs, not the tensor cores; with the surrounding FP32
    # math (max, scale, sum) they cost about two SFU slots per element. The same warps issue both: one
    # warpgroup serialises them, several overlap one's softmax with another's MMAs (partly).
    mufu_step = f.mufu_per_tile / max(1, f.ksteps)
    t_x = r * 2.0 * mufu_step / (m.sfu_ops_per_clk_per_sm * m.clock_hz.value)
    groups = (f.consumer_warpgroups if f.warp_specialised else max(1, f.threads // 128)) * r
    if t_x > 0:
        overlap = 0.5 if groups >= 2 and s.instr == "wgmma" else 0.0
        t_c = max(t_c, t_x) + (1.0 - overlap) * min(t_c, t_x)
        if t_x > 0.3 * t_c:
            notes.append(f"softmax exponentials take {t_x / t_c:.0%} of each step's compute (SFU-bound share)")
    t_s = r * (copy_step + read_step * ways) / m.smem_bytes_per_s_per_sm.value
    t_g = r * copy_step / (m.l2_bytes_per_s.value / sms)
    t_step = max(t_c, t_s, t_g)
    if res.spill_fraction > 0:
        t_step *= 1.0 + 4.0 * res.spill_fraction
        notes.append(f"~{res.spill_fraction:.0%} of the live registers spill to local memory")
    lat = m.global_latency_s.value
    depth = f.ring_depth + (1 if f.warp_specialised else 0)
    if depth <= 1:
        t_round = max(t_step, lat + t_step / r)
    else:
        t_round = max(t_step, lat / (depth - 1))
    t_sync = 0.0 if f.warp_specialised else r * m.block_sync_s.value
    t_round += t_sync
    hbm_share = m.hbm_bytes_per_s.value / sms
    epi = r * (f.store_bytes_per_tile + f.load_bytes_per_tile) / hbm_share + 0.3e-6  # bias, residual, Q reads
    fill = lat + 0.5e-6  # first stage's latency plus block start-up, per tile
    if f.persistent:
        g = max(1, launched)
        per_block = math.ceil(f.tiles / g)
        block_waves = math.ceil(g / (sms * res.blocks_per_sm))
        # With a producer warpgroup the next tile's first stages load during this tile's epilogue.
        fill_total = fill if f.warp_specialised else fill * per_block
        t_main = block_waves * (per_block * (f.ksteps * t_round + epi) + fill_total)
        waves = block_waves * per_block
        concurrent = min(g, sms * r)
    else:
        waves = math.ceil(f.tiles / (sms * r))
        t_main = waves * (f.ksteps * t_round + epi + fill)
        concurrent = sms * r
    wave = simulate_wave(kernel, f, concurrent)
    # Tiles of a wave move through K roughly together, so each operand panel they share is read from
    # HBM about once per wave; a footprint beyond L2 costs some re-reads (mild, an estimate).
    over = max(0.0, wave.unique_bytes - m.l2_bytes.value) / m.l2_bytes.value
    hbm_wave = min(wave.total_bytes, wave.unique_bytes * (1.0 + 0.1 * over))
    n_waves = max(1.0, f.tiles / max(1, wave.tiles))
    t_hbm = (hbm_wave * n_waves + (f.store_bytes_per_tile + f.load_bytes_per_tile) * f.tiles) / m.hbm_bytes_per_s.value
    # DRAM traffic overlaps the main loop only partly (it contends for L2 with the operand reads).
    total = max(t_main, t_hbm) + 0.1 * min(t_main, t_hbm) + m.launch_overhead_s.value
    terms = {"tensor": t_c * f.ksteps * waves, "smem": t_s * f.ksteps * waves, "l2": t_g * f.ksteps * waves,
             "latency": max(0.0, t_round - t_sync - t_step) * f.ksteps * waves, "sync": t_sync * f.ksteps * waves,
             "epilogue": (epi + fill) * waves,
             "hbm": t_hbm, "main_loop": t_main}
    bound = max(("tensor", "smem", "l2", "latency", "sync", "hbm"), key=lambda k: terms[k])
    if terms["epilogue"] > 0.25 * total:
        bound = "epilogue"
    if f.cluster and math.prod(f.cluster) > 1:
        notes.append("cluster launch without multicast copies: no modelled effect")
    _ = useful_flops  # the reward uses useful FLOPs; executed FLOPs (with padding) drive the model
    return CostEstimate(total, f.executed_mma_flops, terms, bound, res, wave, ways, tuple(notes))
