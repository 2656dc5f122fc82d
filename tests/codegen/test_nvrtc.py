"""NVRTC compilation, diagnostics, isolation and resource reports. No GPU needed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from argus.codegen import nvrtc as nv  # noqa: E402
from argus.codegen.nvrtc import CompileError, compile_cuda, parse_log  # noqa: E402
from argus.codegen.resources import (  # noqa: E402
    KernelResources,
    kernel_resources,
    parse_cubin,
    parse_ptxas_log,
)

BF16_SRC = r"""
#include <cuda_bf16.h>
extern "C" __global__ void axpy_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, float alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(alpha * __bfloat162float(x[i]) + __bfloat162float(y[i]));
}
"""

# One m64n8k16 bf16 wgmma from shared-memory descriptors. The descriptors are built from real shared
# addresses: constant descriptors have crashed NVRTC's ptxas (see shared/device/README.md).
WGMMA_SRC = r"""
#include <cuda_bf16.h>
__device__ inline unsigned long long smem_desc(const void* p, unsigned lbo, unsigned sbo) {
  unsigned long long a = (unsigned long long)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
       | ((unsigned long long)(sbo >> 4) << 32);
}
extern "C" __global__ void wgmma_m64n8k16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ alignas(128) __nv_bfloat16 sA[64 * 16];
  __shared__ alignas(128) __nv_bfloat16 sB[8 * 16];
  int t = threadIdx.x;
  // core-matrix blocked layout [row/8][k/8][row%8][k%8]
  for (int i = t; i < 64 * 16; i += 128) {
    int r = i / 16, c = i % 16;
    sA[((r/8)*2 + c/8)*64 + (r%8)*8 + c%8] = A[i];
  }
  for (int i = t; i < 8 * 16; i += 128) {
    int n = i / 16, c = i % 16;
    sB[((n/8)*2 + c/8)*64 + (n%8)*8 + c%8] = B[i];
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  unsigned long long da = smem_desc(sA, 128, 256), db = smem_desc(sB, 128, 256);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#line 30 "examples/wgmma.arg"
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  int warp = t / 32, lane = t % 32, row = warp * 16 + lane / 4, col = (lane % 4) * 2;
  D[row*8 + col] = d0; D[row*8 + col + 1] = d1; D[(row+8)*8 + col] = d2; D[(row+8)*8 + col + 1] = d3;
}
"""

SYNTAX_ERROR_SRC = """
extern "C" __global__ void broken(float* out) {
#line 7 "examples/x.arg"
  out[0] = 1.0f +;
}
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_bf16_kernel_to_cubin(arch: str) -> None:
    r = compile_cuda(BF16_SRC, name="axpy", arch=arch)
    assert r.want == "cubin" and r.arch == arch and not r.cached
    assert r.cubin[:4] == b"\x7fELF"
    assert r.nvrtc_version == nv.nvrtc_version() and r.nvrtc_version >= (12, 0)
    assert f"--gpu-architecture={arch}" in r.options
    assert "axpy_bf16" in parse_cubin(r.cubin)
    with pytest.raises(ValueError):
        _ = r.ptx


@pytest.mark.parametrize("arch,target", [("sm_90a", "compute_90a"), ("sm_80", "compute_80")])
def test_bf16_kernel_to_ptx(arch: str, target: str) -> None:
    r = compile_cuda(BF16_SRC, name="axpy", arch=arch, want="ptx")
    assert r.arch == target
    assert f".target {target.replace('compute_', 'sm_')}" in r.ptx
    assert ".entry axpy_bf16" in r.ptx
    assert "\x00" not in r.ptx


def test_wgmma_kernel_compiles_for_sm90a() -> None:
    r = compile_cuda(WGMMA_SRC, name="wgmma", arch="sm_90a")
    res = kernel_resources(r)["wgmma_m64n8k16"]
    assert 8 <= res.registers <= 255
    assert res.static_smem_bytes == 64 * 16 * 2 + 8 * 16 * 2
    assert not res.spills


def test_wgmma_on_sm80_reports_ptxas_errors_at_arg_line() -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda(WGMMA_SRC, name="wgmma", arch="sm_80")
    err = info.value
    mma = [d for d in err.errors if "wgmma.mma_async" in d.message]
    assert mma, err.log
    # ptxas speaks PTX lines; they are mapped back through -lineinfo to the #line position.
    assert mma[0].origin == "ptxas"
    # The asm statement spans lines 30-32: NVRTC 13.5 marks its first line, 13.0 its last.
    assert mma[0].path == "examples/wgmma.arg" and 30 <= mma[0].line <= 32


def test_syntax_error_points_at_arg_line() -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda(SYNTAX_ERROR_SRC, name="x", arch="sm_90a")
    err = info.value
    assert not err.crashed and err.arch == "sm_90a"
    (d,) = err.errors
    assert (d.path, d.line, d.severity) == ("examples/x.arg", 7, "error")
    assert d.column == len("  out[0] = 1.0f +") + 1  # the caret sits under the ';'
    assert "expected an expression" in d.message
    assert "examples/x.arg:7:" in str(err)


def test_unknown_include_is_an_error_diagnostic() -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda('#include "nope.h"\n', name="inc")
    (d,) = info.value.errors
    assert d.path == "inc.cu" and d.line == 1 and "nope.h" in d.message


def test_bad_arch() -> None:
    with pytest.raises(ValueError, match="unrecognised GPU architecture"):
        compile_cuda(BF16_SRC, name="axpy", arch="hopper")
    with pytest.raises(CompileError) as info:
        compile_cuda(BF16_SRC, name="axpy", arch="sm_91")
    assert any("gpu-architecture" in d.message for d in info.value.errors)


def test_warnings_are_kept_on_success() -> None:
    src = '#line 3 "w.arg"\nextern "C" __global__ void k(float* a) { int unused; a[0] = 1; }\n'
    r = compile_cuda(src, name="w")
    (w,) = r.warnings
    assert (w.path, w.line, w.code) == ("w.arg", 3, "177-D")


def test_parse_log_formats() -> None:
    log = (
        "examples/x.arg(8): error: expected an expression\n"
        "    a[0] = 1.0f +;\n"
        "                 ^\n\n"
        'k.cu(1): catastrophic error: cannot open source file "foo.h"\n'
        "ptxas application ptx input, line 27; error   : Unknown modifier '.instr'\n"
        "ptxas fatal   : Ptx assembly aborted due to errors\n"
        "nvrtc: error: invalid value for --gpu-architecture (-arch)\n"
        "ptxas info    : Used 10 registers\n"
        '2 errors detected in the compilation of "k.cu".\n'
    )
    ds = parse_log(log)
    assert [(d.path, d.line, d.severity, d.origin) for d in ds] == [
        ("examples/x.arg", 8, "error", "nvrtc"),
        ("k.cu", 1, "error", "nvrtc"),
        ("<ptx>", 27, "error", "ptxas"),
        (None, None, "error", "ptxas"),
        (None, None, "error", "nvrtc"),
    ]
    assert ds[0].column == 16


def test_arch_helpers() -> None:
    assert nv.normalize_arch("sm_90a", "ptx") == "compute_90a"
    assert nv.normalize_arch("compute_80", "cubin") == "sm_80"
    assert nv.normalize_arch("90a", "cubin") == "sm_90a"
    assert nv.arch_for_capability(9, 0) == "sm_90a"
    assert nv.arch_for_capability(8, 6) == "sm_86"
    assert 90 in nv.supported_archs()


def test_detect_arch_does_not_crash() -> None:
    arch = nv.detect_arch()
    assert arch is None or arch.startswith("sm_")


def test_include_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (found,) = nv.cuda_include_dirs()
    assert (Path(found) / "cuda_bf16.h").is_file()
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_fp16.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert nv.cuda_include_dirs() == (str(tmp_path / "include"),)


# ----------------------------------------------------------------------------------------------
# isolation


def test_isolated_compile_matches_in_process() -> None:
    a = compile_cuda(BF16_SRC, name="axpy", isolate=True)
    b = compile_cuda(BF16_SRC, name="axpy")
    assert a.cubin[:4] == b"\x7fELF"
    assert parse_cubin(a.cubin) == parse_cubin(b.cubin)
    assert parse_ptxas_log(a.log).keys() == {"axpy_bf16"}


def test_repeated_compiles_keep_the_ptxas_report() -> None:
    # NVRTC's own cache would hand back the second compile with an empty log (seen with 13.0).
    for _ in range(2):
        r = compile_cuda(BF16_SRC, name="axpy", arch="sm_90a")
        assert kernel_resources(r)["axpy_bf16"].source == "ptxas+elf"


def test_isolated_compile_error_keeps_diagnostics() -> None:
    with pytest.raises(CompileError) as info:
        compile_cuda(SYNTAX_ERROR_SRC, name="x", isolate=True)
    assert not info.value.crashed
    assert [(d.path, d.line) for d in info.value.errors] == [("examples/x.arg", 7)]


def test_isolated_crash_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child aborts (as a segfaulting ptxas would kill it); the caller gets a CompileError.
    monkeypatch.setenv(nv.CRASH_ENV, "1")
    with pytest.raises(CompileError, match=r"compiler crashed \(SIGABRT\)") as info:
        compile_cuda(BF16_SRC, name="axpy", isolate=True)
    assert info.value.crashed
    # The in-process path ignores the hook, and this process is alive to prove it.
    assert compile_cuda(BF16_SRC, name="axpy").cubin[:4] == b"\x7fELF"


# ----------------------------------------------------------------------------------------------
# resources

SMEM_SRC = r"""
extern "C" __global__ void __launch_bounds__(256) smem_k(float* a) {
  __shared__ float s[333];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = s[threadIdx.x ^ 1];
}
extern "C" __global__ void dyn_k(float* a) {
  extern __shared__ float d[];
  d[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = d[threadIdx.x ^ 1];
}
"""

SPILL_SRC = r"""
extern "C" __global__ void spill_k(float* a, int n) {
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = a[i * n + threadIdx.x];
  float s = 0;
  for (int j = 0; j < 64; j++)
    for (int i = 0; i < 64; i++) s += v[i] * v[(i + j) % 64];
  a[threadIdx.x] = s;
}
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_resources_static_smem_and_launch_bounds(arch: str) -> None:
    r = compile_cuda(SMEM_SRC, name="smem", arch=arch)
    res = kernel_resources(r)
    assert set(res) == {"smem_k", "dyn_k"}
    # padded to 16 B so that the module's dynamic smem (dyn_k) starts aligned
    assert 333 * 4 <= res["smem_k"].static_smem_bytes < 333 * 4 + 16
    assert res["smem_k"].max_threads == 256
    assert res["smem_k"].barriers == 1
    assert res["dyn_k"].static_smem_bytes == 0  # dynamic smem is a launch argument
    for k in res.values():
        assert isinstance(k, KernelResources) and k.source == "ptxas+elf" and k.arch == arch
        assert 4 <= k.registers <= 255


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_resources_spills_and_elf_agree_with_ptxas(arch: str) -> None:
    r = compile_cuda(SPILL_SRC, name="spill", arch=arch, options=("--maxrregcount=32",))
    log = parse_ptxas_log(r.log)["spill_k"]
    elf = parse_cubin(r.cubin)["spill_k"]
    assert log.registers == elf.registers == 32
    assert log.stack_frame_bytes == elf.stack_frame_bytes > 0
    assert log.spills and log.spill_store_bytes > 0 and log.spill_load_bytes > 0
    assert elf.spill_store_bytes is None and elf.source == "elf"  # the ELF has no spill counts
    assert "spill stores" in log.summary()


def test_resources_need_a_cubin() -> None:
    r = compile_cuda(BF16_SRC, name="axpy", want="ptx")
    with pytest.raises(ValueError, match="need a cubin"):
        kernel_resources(r)


def test_ptxas_log_with_device_function() -> None:
    log = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'callk' for 'sm_80'\n"
        "ptxas info    : Function properties for callk\n"
        "ptxas         .     160 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 32 registers, used 1 barriers, 160 bytes cumulative stack size, "
        "4096 bytes smem, 360 bytes cmem[0]\n"
        "ptxas info    : Function properties for _Z1fPf\n"
        "ptxas         .     48 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    (k,) = parse_ptxas_log(log).values()
    assert k == KernelResources(
        name="callk",
        registers=32,
        static_smem_bytes=4096,
        stack_frame_bytes=160,
        spill_store_bytes=8,
        spill_load_bytes=12,
        barriers=1,
        const_bytes=360,
        arch="sm_80",
        source="ptxas",
    )


def test_compiler_lines_map_back_to_the_directive_they_count_from() -> None:
    from argus.codegen.compile import _directive_line

    src = '#line 5 "x.arg"\na;\nb;\nc;\n#line 9 "x.arg"\nd;\n'
    # NVRTC presumes the lines after `#line 5` are 5, 6, 7: a message about `c;` says 7, the statement is 5
    assert [_directive_line(src, n) for n in (5, 6, 7, 9, 40)] == [5, 5, 5, 9, 40]


def test_emit_cuda_writes_the_source_when_it_does_not_compile(tmp_path, monkeypatch) -> None:
    from argus.codegen import artefact
    from argus.dsl.diagnostics import ArgusError, Diagnostic
    from argus.ir.build import build_file
    from tests.conftest import EXAMPLES

    k = build_file(EXAMPLES / "rmsnorm.arg", {})

    def broken(*a, **kw):
        raise ArgusError(Diagnostic("error", "nvrtc", "generated CUDA does not compile: x", None))
    monkeypatch.setattr(artefact, "build", broken)
    out = tmp_path / "k.cu"
    with pytest.raises(ArgusError):
        artefact.build_command("examples/rmsnorm.arg", [k], emit="cuda", output=str(out))
    assert "rmsnorm" in out.read_text()


SPILLS_AT_TWO_BLOCKS = """
kernel rows(X: bf16[M, N], W: bf16[N], B: bf16[N], Y: bf16[M, N]):
    param BN = 8192
    launch grid=(min(M, 264),), threads=512
    assume(N <= BN)
    cols = arange(BN)
    w = cast(load(W[0 : +BN]), f32)
    b = cast(load(B[0 : +BN]), f32)
    xn = load(X[block_id(0) : +1, 0 : +BN])
    for r in persistent(M):
        x = cast(xn, f32)
        xn = load(X[r + num_blocks(0) : +1, 0 : +BN])
        mean = sum(x, axis=1) * (1.0 / N)
        xc = select(cols[None, :] < N, x - mean[:, None], 0.0)
        store(Y[r : +1, 0 : +BN], cast(xc * rsqrt(sum(xc * xc, axis=1) + 1.0)[:, None] * w[None, :] + b[None, :], bf16))
reference:
    Y = X
"""


def test_a_build_that_spills_at_two_blocks_per_sm_takes_one() -> None:
    """__launch_bounds__(512, 2) caps this kernel at 64 registers and ptxas spills; the build keeps the
    (512, 1) variant, which has the registers it needs."""
    from argus.codegen.compile import build
    from argus.ir.build import build_source

    built = build(build_source(SPILLS_AT_TWO_BLOCKS), arch="sm_90a")
    assert "__launch_bounds__(512, 1)" in built.generated.source
    assert not any(r.spills for r in built.resources.values())
    forced = build(build_source(SPILLS_AT_TWO_BLOCKS), arch="sm_90a", blocks_per_sm=2)
    assert any(r.spills for r in forced.resources.values())


def test_launch_blocks_per_sm_is_the_occupancy_promised_to_ptxas() -> None:
    """`launch ..., blocks_per_sm=N` is __launch_bounds__(threads, N): ptxas caps registers at
    65536 / (N x threads); the spill fallback leaves the kernel's own choice alone; 0 is the default."""
    from argus.codegen.compile import build
    from argus.ir.build import build_source

    src = SPILLS_AT_TWO_BLOCKS.replace("threads=512", "threads=512, blocks_per_sm=2")
    assert src != SPILLS_AT_TWO_BLOCKS
    built = build(build_source(src), arch="sm_90a")
    assert "__launch_bounds__(512, 2)" in built.generated.source  # kept although it spills
    assert any(r.spills for r in built.resources.values())
    assert all(r.registers <= 64 for r in built.resources.values())
    default = build(build_source(SPILLS_AT_TWO_BLOCKS.replace("threads=512", "threads=512, blocks_per_sm=0")),
                    arch="sm_90a")
    assert "__launch_bounds__(512, 1)" in default.generated.source


def test_roles_at_two_blocks_per_sm_redistribute_half_the_registers() -> None:
    """With roles, blocks_per_sm=2 is __launch_bounds__(256, 2) (128 registers per thread at entry) and the
    roles' setmaxnreg must fit the block's half of the register file: 24 + 232 does, 24 + 240 (the one-block
    split) is refused, as is a ring whose two blocks' shared memory does not fit."""
    from argus.codegen.compile import build
    from argus.dsl.diagnostics import ArgusError
    from argus.ir.build import build_file
    from tests.conftest import EXAMPLES

    path = EXAMPLES / "decode_attention.arg"
    b = build(build_file(path, {"OCCUPANCY": 2, "STAGES": 2}, kernel="decode_split_ws"), arch="sm_90a", cache=False)
    src = b.generated.source
    assert "__launch_bounds__(256, 2)" in src
    assert "ag_setmaxnreg_dec<24>" in src and "ag_setmaxnreg_inc<232>" in src
    assert not any(r.spills for r in b.resources.values())
    for params, message in (({"OCCUPANCY": 2, "STAGES": 2, "CONSUMER_REGS": 240}, "each of 2 blocks per SM"),
                            ({"OCCUPANCY": 2, "STAGES": 2, "BKV": 128}, "do not fit a multiprocessor")):
        with pytest.raises(ArgusError) as e:
            build(build_file(path, params, kernel="decode_split_ws"), arch="sm_90a", cache=False)
        assert message in str(e.value)


@pytest.mark.parametrize("opt, message", [
    ("blocks_per_sm=5", "a multiprocessor holds at most 2048 threads"),
    ("blocks_per_sm=-1", "a multiprocessor holds at most 2048 threads"),
    ("blocks_per_sm=M", "blocks_per_sm"),
])
def test_bad_blocks_per_sm_is_refused_at_its_line(opt: str, message: str) -> None:
    from argus.dsl.diagnostics import ArgusError
    from argus.ir.build import build_source

    with pytest.raises(ArgusError) as e:
        build_source(SPILLS_AT_TWO_BLOCKS.replace("threads=512", "threads=512, " + opt))
    assert message in str(e.value)


def test_the_wait_watchdog_keeps_the_setmaxnreg_budget() -> None:
    """The mbarrier wait's watchdog (a trap after AG_WATCHDOG_SPINS polls): an inlined __trap() inside a
    setmaxnreg region makes ptxas fall back to the entry budget (168 registers for 384 threads) in
    FlashAttention-3's order at BKV = 128 (92 B of spills); called through a function of its own it does
    not, and the build is as spill-free as one without the watchdog."""
    import re

    from argus.codegen.compile import build
    from argus.ir.build import build_source

    path = Path(__file__).resolve().parents[1] / "analysis" / "corpus" / "correct" / "fa_ws_pipelined_pv_bf16.arg"
    k = build_source(path.read_text(), {"BKV": 128, "STAGES": 2}, path=str(path))
    guarded = build(k, arch="sm_90a")
    assert "ag_watchdog_trap();" in guarded.generated.source
    assert not any(r.spills for r in guarded.resources.values())
    free = build(k, arch="sm_90a", options=("-DAG_WATCHDOG_SPINS=0",))
    assert not any(r.spills for r in free.resources.values())
    inlined = guarded.generated.source.replace("ag_watchdog_trap();", "__trap();")
    log = compile_cuda(inlined, name=guarded.generated.name, arch="sm_90a").log
    assert re.search(r"[1-9]\d* bytes spill stores", log), log
