"""Profile advice: measurements turned into short expert diagnoses, each naming the techniques it suggests.

Inputs are what an evaluation produced — achieved time against the roofline, the compiler's resource
report (registers, spills, shared memory), the cost model's breakdown when running on the CPU, and
Nsight Compute metrics when `ncu` is on PATH and a command to profile is given. Output is a ranked
list of `Diagnosis`: a signal id (the vocabulary the knowledge base's `signals` use), one or two
sentences a performance engineer would say, the KB technique ids, and a weight (the share of time
at stake, used by the built-in planner as a prior).
"""

from __future__ import annotations

import csv
import io
import math
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from argus.agent.features import Features, extract
from argus.agent.hardware import H200, Machine
from argus.agent.kb import KnowledgeBase
from argus.agent.referee import Evaluation
from argus.ir import nodes as ir

SIGNALS = (
    "roofline", "near-peak", "mma-sync-on-hopper", "smem-bound", "bank-conflicts", "l2-bound", "hbm-bound",
    "poor-l2-reuse", "latency-exposed", "single-stage", "copy-issue-overhead", "barrier-bound", "low-occupancy",
    "register-spill", "register-pressure", "wave-quantization", "epilogue-exposed", "launch-bound",
    "single-warpgroup", "small-m", "small-tile", "narrow-tile", "short-tile", "smem-over-limit", "precision",
    "attention-softmax", "moe-routing",
)


@dataclass(frozen=True)
class Diagnosis:
    signal: str
    text: str
    techniques: tuple[str, ...]
    weight: float  # 0..1: share of run time at stake (a prior, not a promise)
    estimate: bool

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "text": self.text, "techniques": list(self.techniques),
                "weight": round(self.weight, 3), "estimate": self.estimate}

    def line(self) -> str:
        tech = f" -> {', '.join(self.techniques)}" if self.techniques else ""
        return f"[{self.signal}] {self.text}{tech}"


def _us(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s >= 1e-5 else f"{s * 1e6:.1f} us"


def diagnose(kernel: ir.Kernel, ev: Evaluation, kb: KnowledgeBase, kind: str = "gemm", m: Machine = H200,
             ncu: dict[str, float] | None = None) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    est = ev.estimate
    tag = " (est.)" if est else ""

    def add(signal: str, text: str, weight: float) -> None:
        techs = tuple(t.id for t in kb.by_signal(signal, kind))
        out.append(Diagnosis(signal, text, techs, max(0.0, min(1.0, weight)), est))

    if ev.status == "compile-error" and "shared memory" in ev.message:
        add("smem-over-limit", f"does not launch: {ev.message}", 1.0)
        return out
    if not ev.ok or not ev.timings:
        return out
    t = ev.timings[0]
    dims = t.dims
    f: Features = extract(kernel, dims)
    peak = m.peak_bf16_flops.value
    frac = t.tflops * 1e12 / peak if peak else 0.0
    fl = t.tflops * 1e12 * t.median_s
    nbytes = sum(math.prod(_shape(td, dims)) * td.dtype.bytes for td in kernel.tensors)
    intensity = fl / nbytes if nbytes else 0.0
    ridge = peak / m.hbm_bytes_per_s.value
    regime = "compute-bound" if intensity >= ridge else "memory-bound"
    shape = "x".join(str(v) for v in dims.values())
    add("roofline", f"{t.tflops:.0f} TFLOP/s{tag} at {shape} = {frac:.0%} of the {peak / 1e12:.0f} TFLOP/s bf16 "
        f"peak; time {_us(t.median_s)} vs floor {_us(t.floor_s)}; {regime} "
        f"({intensity:.0f} FLOP/B vs ridge {ridge:.0f})", 0.0)
    if frac >= 0.7:
        add("near-peak", f"at {frac:.0%} of peak this is near the practical ceiling (~75-80%); remaining "
            "gains come from overlap (warp specialisation, persistent epilogue) rather than the main loop", 0.05)
    s = f.main
    details = t.details or {}
    terms = details.get("terms_est") or {}
    res = (details.get("resources") or {}) if details else {}
    if not terms and s is not None:
        # Measured on a GPU: the breakdown (which unit bounds the main loop) still comes from the model,
        # so those sentences say so.
        from argus.agent.costmodel import model

        est_model = model(kernel, dims, fl, m)
        if math.isfinite(est_model.seconds):
            j = est_model.to_json()
            terms, tag = j["terms_est"], " (model est.)"
            details = {**details, "conflict_ways_est": j["conflict_ways_est"], "wave": j["wave"]}
            res = j["resources"] or {}
    report = ev.compile or {}
    if s is not None and s.instr == "mma.sync":
        add("mma-sync-on-hopper", "the main loop multiplies with mma.sync, which on sm_90 peaks near 60-65% of "
            "the wgmma rate and pulls every operand through registers (ldmatrix)", 0.45)
    main = terms.get("main_loop") or t.median_s  # model terms are compared with each other, never mixed
    if terms:
        tensor, smem, l2, lat = (terms.get(k, 0.0) for k in ("tensor", "smem", "l2", "latency"))
        ways = float(details.get("conflict_ways_est", 1.0))
        if smem > 1.05 * tensor and smem >= l2:
            per_step = f.copy_bytes_per_tile / max(1, f.ksteps)
            add("smem-bound", f"shared-memory operand traffic bounds the main loop{tag}: {smem / tensor:.1f}x the "
                f"tensor-core time (tile {s.m}x{s.n}x{s.k}, {per_step / 1024:.0f} KB copied per k-step"
                + (f", {ways:.0f}-way bank conflicts" if ways > 1 else "") + ")", 1 - tensor / smem)
        if l2 > 1.05 * tensor and l2 > smem:
            add("l2-bound", f"L2->SM copy bandwidth bounds the main loop{tag} ({l2 / tensor:.1f}x tensor time): "
                f"a {s.m}x{s.n} tile does only {s.m * s.n / (s.m + s.n):.0f} FLOP per byte it copies",
                1 - tensor / l2)
        if ways > 1:
            add("bank-conflicts", f"the operand buffers use swizzle={f.swizzle} on rows of "
                f"{max(f.operand_row_bytes)} B: {ways:.0f}-way shared-memory bank conflicts{tag}", 0.3)
        if lat > 0.1 * main:
            add("latency-exposed", f"global-memory latency is exposed for {lat / main:.0%} of the main loop{tag}: "
                f"{f.ring_depth} stage(s) in the ring cannot cover ~{m.global_latency_s.value * 1e6:.1f} us per copy",
                lat / main)
        hbm = terms.get("hbm", 0.0)
        wave = details.get("wave") or {}
        if hbm > 0.6 * main:
            add("hbm-bound", f"DRAM traffic{tag} ({_us(hbm)}) is comparable to the main loop ({_us(main)})",
                min(1.0, hbm / main))
        if wave and wave.get("total_bytes") and wave["unique_bytes"] > 0.12 * wave["total_bytes"] \
                and not f.warp_specialised and hbm > 0.3 * main:
            add("poor-l2-reuse", f"a wave of {wave['tiles']} tiles touches {wave['unique_bytes'] / 2**20:.0f} MB of "
                f"distinct operand panels{tag}: the tile order gives little L2 sharing", 0.1)
        epi = terms.get("epilogue", 0.0)
        if epi > 0.06 * main:
            add("epilogue-exposed", f"per-tile epilogue and pipeline fill take {epi / main:.0%} of the time{tag}",
                epi / main)
    else:
        if f.ring_depth <= 1 and not f.warp_specialised:
            add("single-stage", "a single shared-memory stage: every k-step waits for its own copies", 0.3)
    if f.ring_depth <= 1 and not f.warp_specialised and terms:
        add("single-stage", "a single shared-memory stage: every k-step waits for its own copies", 0.3)
    if s is not None and s.instr == "wgmma" and f.copy_mode == "async" and not f.warp_specialised:
        sync = terms.get("sync", 0.0) if terms else 0.0
        share = f" ({sync / main:.0%} of the main loop{tag})" if sync and main else ""
        add("copy-issue-overhead", f"all {f.threads} threads issue cp.async and address math each k-step and "
            f"meet at a block barrier{share}; a TMA producer warpgroup would take both off the MMA warps",
            max(0.08, min(1.0, sync / main)) if sync and main else 0.08)
    spill = report.get("spill_store_bytes") or 0
    spill_est = res.get("spill_fraction_est") or report.get("spill_fraction_est") or 0
    regs = report.get("registers") or report.get("registers_est")
    cap = report.get("register_cap") or 255
    if spill or spill_est:
        what = f"{spill} B of spill stores" if spill else f"~{spill_est:.0%} of live registers spill (est.)"
        add("register-spill", f"register spills: {what}; the {s.m}x{s.n} fp32 accumulator is too large "
            "for the threads holding it" if s else what, 0.5)
        if f.warp_specialised and s is not None and f.consumer_warpgroups < 4:
            # the fix that keeps the tile (and its operand reuse): spread the accumulator over more consumers
            add("single-warpgroup", f"{f.consumer_warpgroups} consumer warpgroup(s) hold the whole {s.m}x{s.n} "
                "accumulator; more consumer warpgroups split it without shrinking the tile", 0.5)
    elif regs and regs >= 0.9 * cap:
        add("register-pressure", f"{regs} registers per thread against a cap of {cap}", 0.1)
    bps = res.get("blocks_per_sm_est") or report.get("blocks_per_sm_est")
    if bps == 1 and not f.warp_specialised and f.smem_bytes > 100 * 1024:
        add("low-occupancy", f"one block per SM ({f.smem_bytes / 1024:.0f} KB shared memory per block): its "
            "barriers and epilogue are not overlapped by another block", 0.08)
    if bps:
        per_wave = m.sms * bps if not f.persistent else max(1, f.grid[0] if f.grid else 1)
        waves = f.tiles / per_wave
        if waves < 8 and waves % 1 and (waves / math.ceil(waves)) < 0.85:
            add("wave-quantization", f"{f.tiles} tiles over {per_wave} concurrent blocks = {waves:.2f} waves: the last "
                f"wave runs {waves % 1:.0%} full", 1 - waves / math.ceil(waves))
    if s is not None and s.instr == "wgmma":
        groups = (f.consumer_warpgroups if f.warp_specialised else f.threads // 128) * (bps or 1)
        if groups < 2:
            add("single-warpgroup", "one MMA warpgroup per SM: wgmma issue stalls while it waits on its own "
                "results", 0.15)
        if s.n / s.warps_n < 64:
            add("narrow-tile", f"each warpgroup's wgmma covers only n={s.n // s.warps_n}", 0.15)
        elif s.m < 128 and not f.warp_specialised:
            # measured on the H200 (2026-12-01): FlashAttention BQ 64 -> 128 at 2 stages 356 -> 436 TFLOP/s
            add("short-tile", f"a {s.m}-row tile: every operand tile copied into shared memory serves only {s.m} "
                "rows (one warpgroup's slab); 128+ rows over more warpgroups halve the copies per FLOP", 0.2)
        elif s.m * s.n < 128 * 128:
            _small_tile(add, s.m, s.n)
    elif s is not None and s.m * s.n < 128 * 128:
        _small_tile(add, s.m, s.n)
    m_dim = dims.get("M")
    if m_dim is not None and m_dim < 256:
        add("small-m", f"M={m_dim}: only {math.ceil(m_dim / max(1, s.m if s else 128))} tile row(s)", 0.5)
    if kind == "attention":
        add("attention-softmax", "attention kernel: check the online-softmax rescale order and overlap softmax "
            "with the next block's MMAs", 0.05)
    if kind == "moe":
        add("moe-routing", "MoE kernel: tile scheduling over experts decides load balance", 0.05)
    if ncu:
        out.extend(ncu_diagnoses(ncu, kb, kind))
    order = {d.signal: i for i, d in enumerate(out)}
    uniq = {}
    for d in out:
        uniq.setdefault(d.signal, d)
    return sorted(uniq.values(), key=lambda d: (d.signal != "roofline", -d.weight, order[d.signal]))


def _small_tile(add, m: int, n: int) -> None:
    """An output tile under 128x128: operands copied per k-step feed m*n/(m+n) FLOPs per byte, which
    grows fastest by doubling the shorter side (narrow: N, short: M; square: either)."""
    signal = "narrow-tile" if n < m else "short-tile" if m < n else "small-tile"
    side = {"narrow-tile": "; widen N first", "short-tile": "; grow M first", "small-tile": ""}[signal]
    add(signal, f"a {m}x{n} output tile reuses operands little: each k-step's copies feed few FLOPs{side}", 0.2)


def _shape(t: ir.TensorDecl, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else int(dims.get(d, 1)) for d in t.dims)


# ---- Nsight Compute (optional) ----
NCU_METRICS = (
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sectors_srcunit_tex_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "launch__registers_per_thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)


def ncu_available() -> bool:
    return shutil.which("ncu") is not None


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Metric name -> value from `ncu --csv --metrics ...` output (the last kernel launch wins)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    out: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name, value = row.get("Metric Name"), row.get("Metric Value")
        if not name or value is None:
            continue
        try:
            out[name] = float(value.replace(",", ""))
        except ValueError:
            continue
    return out


def ncu_profile(cmd: list[str], kernel_regex: str, timeout_s: float = 300.0) -> dict[str, float] | None:
    """Profile one launch of the kernel run by `cmd` (None when ncu is missing or fails)."""
    if not ncu_available():
        return None
    try:
        p = subprocess.run(["ncu", "--csv", "--launch-count", "1", "-k", f"regex:{kernel_regex}", "--metrics",
                            ",".join(NCU_METRICS), *cmd], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ncu_csv(p.stdout) or None


def ncu_diagnoses(metrics: dict[str, float], kb: KnowledgeBase, kind: str) -> list[Diagnosis]:
    out = []

    def add(signal: str, text: str, weight: float) -> None:
        out.append(Diagnosis(signal, text + " (ncu)", tuple(t.id for t in kb.by_signal(signal, kind)), weight, False))

    tensor = metrics.get(NCU_METRICS[0])
    dram = metrics.get(NCU_METRICS[1])
    hit, tot = metrics.get(NCU_METRICS[2]), metrics.get(NCU_METRICS[3])
    conflicts = metrics.get(NCU_METRICS[4])
    if tensor is not None and tensor < 60:
        add("latency-exposed", f"tensor pipes active {tensor:.0f}% of cycles", (60 - tensor) / 100)
    if dram is not None and dram > 70:
        add("hbm-bound", f"DRAM throughput at {dram:.0f}% of peak", dram / 100)
    if hit is not None and tot:
        rate = hit / tot
        if rate < 0.6:
            add("poor-l2-reuse", f"L2 hit rate {rate:.0%}", 0.6 - rate)
    if conflicts:
        add("bank-conflicts", f"{conflicts:.0f} shared-memory bank conflicts", 0.2)
    return out
