"""The target machine's figures (H200 SXM), each marked as a datasheet figure or an estimate.

The cost model and the speed-of-light floor read these. Datasheet figures bound what is physically
possible (the referee rejects anything faster); estimates only shape the CPU-mode reward landscape.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    estimate: bool  # False: vendor datasheet; True: our own estimate
    note: str = ""


@dataclass(frozen=True)
class Machine:
    name: str
    sms: int
    peak_bf16_flops: Figure  # dense tensor-core peak (wgmma)
    hbm_bytes_per_s: Figure
    l2_bytes_per_s: Figure
    l2_bytes: Figure
    smem_bytes_per_s_per_sm: Figure
    smem_per_sm: Figure  # usable by blocks (227 KB; 1 KB of the 228 KB is reserved per block)
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    sustained_clock_fraction: Figure  # tensor-core clock under load vs boost (power limits)
    mma_sync_fraction: Figure  # mma.sync peak as a fraction of wgmma peak on sm_90
    global_latency_s: Figure  # global -> shared copy latency seen by a pipeline stage
    launch_overhead_s: Figure
    clock_hz: Figure = Figure(1.83e9, "Hz", True, "sustained SM clock under load")
    # Per k-step of each resident block of a kernel without warp specialisation: its MMA warps also issue
    # the copies and address math and meet at a block barrier, and the tensor cores idle meanwhile (the
    # blocks of an SM do not hide it from each other: their issue slots are shared). Calibrated on the
    # H200 on 2026-12-01 at 8192^3: examples/gemm.arg measured 425 TFLOP/s with wgmma (2 blocks per SM) and
    # 284 with mma.sync (1 block), where the model without this term gave 655 and 391.
    block_sync_s: Figure = Figure(0.24e-6, "s", True, "issue + block barrier per k-step, non-specialised")
    sfu_ops_per_clk_per_sm: int = 16  # special-function units (exp2, rsqrt): 4 per SM sub-partition
    alu_ops_per_clk_per_sm: int = 128  # FP32 lanes (CUDA cores): 32 per SM sub-partition


H200 = Machine(
    name="NVIDIA H200 SXM (sm_90a)",
    sms=132,
    peak_bf16_flops=Figure(989e12, "FLOP/s", False, "dense bf16, fp32 accumulate"),
    hbm_bytes_per_s=Figure(4.8e12, "B/s", False, "HBM3e"),
    l2_bytes_per_s=Figure(12e12, "B/s", True, "sustained L2->SM read bandwidth"),
    l2_bytes=Figure(50 * 2**20, "B", False),
    smem_bytes_per_s_per_sm=Figure(128 * 1.83e9, "B/s", True, "128 B/clk at ~1.83 GHz"),
    smem_per_sm=Figure(227 * 1024, "B", False),
    regs_per_sm=65536,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    sustained_clock_fraction=Figure(0.8, "", True, "GEMM-heavy load runs below boost clock"),
    mma_sync_fraction=Figure(0.62, "", True, "legacy warp-level MMA on Hopper"),
    global_latency_s=Figure(0.7e-6, "s", True),
    launch_overhead_s=Figure(4e-6, "s", True),
)
