"""Device helpers that generated kernels call: inline PTX wrappers, one small function per instruction.

Only the groups a kernel uses are emitted (keyed by feature name), so an sm_80 kernel never sees an
sm_90a instruction. Every wrapper is `__forceinline__`; none holds logic beyond its instruction.
"""

from __future__ import annotations

BASE = r"""
typedef unsigned int ag_u32;
typedef unsigned long long ag_u64;

// Shared-memory swizzle on element offsets: XOR the source bit field into the target field.
template <int SRC, int DST, int MASK> __device__ __forceinline__ int ag_swizzle(int x) {
  return x ^ (((x >> SRC) & MASK) << DST);
}
__device__ __forceinline__ ag_u32 ag_smem_u32(const void* p) { return (ag_u32)__cvta_generic_to_shared(p); }
// Python semantics for // and % on integers that may be negative.
template <typename T> __device__ __forceinline__ T ag_floordiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T ag_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> __device__ __forceinline__ T ag_cdiv(T a, T b) { return -ag_floordiv<T>(-a, b); }
// N elements of T stored with one instruction (N * sizeof(T) <= 16, naturally aligned).
template <typename T, int N> struct alignas(sizeof(T) * N) ag_vec { T v[N]; };
__device__ __forceinline__ float ag_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float ag_round_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ void ag_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void ag_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
"""

CP_ASYNC = r"""
// cp.async: 16 bytes global -> shared; bytes past src_bytes are zero-filled (0 reads nothing).
__device__ __forceinline__ void ag_cp_async16(ag_u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void ag_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void ag_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
"""

MMA_SYNC = r"""
__device__ __forceinline__ void ag_ldmatrix_x4(ag_u32 (&r)[4], ag_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ag_ldmatrix_x4_trans(ag_u32 (&r)[4], ag_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ag_ldmatrix_x2(ag_u32 (&r)[2], ag_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ag_ldmatrix_x2_trans(ag_u32 (&r)[2], ag_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
// d (16x8 f32) += a (16x16) @ b (16x8); fragments as in the PTX ISA (fragments.mma_m16n8k16_*).
#define AG_MMA_M16N8K16(NAME, AB)                                                                          \
  __device__ __forceinline__ void NAME(float* d, const ag_u32 (&a)[4], const ag_u32 (&b)[2]) {             \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 "                                \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                      \
  }
AG_MMA_M16N8K16(ag_mma_m16n8k16_bf16, "bf16")
AG_MMA_M16N8K16(ag_mma_m16n8k16_f16, "f16")
"""

MMA_SYNC_FP8 = r"""
// d (16x8 f32) += a (16x32 fp8) @ b (32x8 fp8), both K-major (sm_89+); the registers hold bytes where the
// 16-bit form holds pairs, so ldmatrix (non-transposed) loads them as it loads bf16.
#define AG_MMA_M16N8K32(NAME, AB)                                                                          \
  __device__ __forceinline__ void NAME(float* d, const ag_u32 (&a)[4], const ag_u32 (&b)[2]) {             \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." AB "." AB ".f32 "                                \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                      \
  }
AG_MMA_M16N8K32(ag_mma_m16n8k32_e4m3, "e4m3")
AG_MMA_M16N8K32(ag_mma_m16n8k32_e5m2, "e5m2")
"""

WGMMA = r"""
// wgmma shared-memory matrix descriptor: start, leading / stride byte offsets (>> 4), swizzle mode.
__device__ __forceinline__ ag_u64 ag_wgmma_desc(ag_u32 addr, ag_u32 lbo, ag_u32 sbo, ag_u32 mode) {
  return (ag_u64)((addr & 0x3FFFF) >> 4) | ((ag_u64)((lbo >> 4) & 0x3FFF) << 16)
       | ((ag_u64)((sbo >> 4) & 0x3FFF) << 32) | ((ag_u64)mode << 62);
}
__device__ __forceinline__ void ag_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ag_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void ag_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// Keep the compiler from moving accumulator reads / writes across an asynchronous wgmma.
__device__ __forceinline__ void ag_reg_fence(float& x) { asm volatile("" : "+f"(x) :: "memory"); }
"""

PROXY_FENCE = r"""
// Writes through the generic proxy (st.shared, cp.async) made visible to the async proxy (wgmma, TMA).
__device__ __forceinline__ void ag_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
"""

MBARRIER = r"""
__device__ __forceinline__ void ag_mbar_init(ag_u32 bar, ag_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void ag_fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void ag_mbar_arrive(ag_u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void ag_mbar_expect_tx(ag_u32 bar, ag_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
#ifndef AG_WATCHDOG_SPINS
#define AG_WATCHDOG_SPINS (1u << 26)
#endif
#if AG_WATCHDOG_SPINS
// The trap lives in a function of its own: a __trap() inlined into a setmaxnreg region makes ptxas fall back
// to the entry register budget there (FlashAttention-3's order at BKV = 128: 92 B of spills; the warp-specialised
// attention at D = 256: 576 B and 0.41 of cuDNN causal), a call on the cold path does not.
__device__ __noinline__ void ag_watchdog_trap() { __trap(); }
#endif
// Wait until the phase with this parity has completed. A protocol bug traps instead of hanging
// (-DAG_WATCHDOG_SPINS=0 builds the wait without the watchdog).
__device__ __forceinline__ void ag_mbar_wait(ag_u32 bar, ag_u32 parity) {
  ag_u32 done;
#if AG_WATCHDOG_SPINS
  ag_u32 spins = 0;
#endif
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#if AG_WATCHDOG_SPINS
    if (!done && ++spins > AG_WATCHDOG_SPINS) ag_watchdog_trap();
#endif
  } while (!done);
}
"""

TMA = r"""
// CUtensorMap is an opaque 128-byte, 64-byte-aligned struct, passed by value as a __grid_constant__.
struct __align__(64) AgTmaMap { ag_u64 opaque[16]; };
// Coordinates innermost first (column, row, then the indexed leading axes).
__device__ __forceinline__ void ag_tma_load_2d(ag_u32 dst, const AgTmaMap* map, ag_u32 bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(dst), "l"((ag_u64)map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void ag_tma_load_3d(ag_u32 dst, const AgTmaMap* map, ag_u32 bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5}], [%2];"
               :: "r"(dst), "l"((ag_u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void ag_tma_load_4d(ag_u32 dst, const AgTmaMap* map, ag_u32 bar, int c0, int c1, int c2,
                                               int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6}], [%2];"
               :: "r"(dst), "l"((ag_u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void ag_tma_load_5d(ag_u32 dst, const AgTmaMap* map, ag_u32 bar, int c0, int c1, int c2,
                                               int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
               :: "r"(dst), "l"((ag_u64)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
"""

EX2 = r"""
// 2^x on the special-function unit: relative error ~2^-22, subnormal results flushed to zero.
__device__ __forceinline__ float ag_exp2f(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
"""

PACK = r"""
// Two floats rounded (to nearest even) into one .b32 register of a 16-bit pair, `lo` in the low half:
// the order of an MMA A fragment register.
__device__ __forceinline__ ag_u32 ag_pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<ag_u32*>(&v);
}
__device__ __forceinline__ ag_u32 ag_pack_f16x2(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<ag_u32*>(&v);
}
"""

SETMAXNREG = r"""
template <int N> __device__ __forceinline__ void ag_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}
template <int N> __device__ __forceinline__ void ag_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}
"""

ACTIVATIONS = r"""
// Activation functions, as the interpreter (and torch) define them: accurate expf / erff, no fast paths.
__device__ __forceinline__ float ag_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double ag_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ float ag_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ double ag_silu(double x) { return x / (1.0 + exp(-x)); }
__device__ __forceinline__ float ag_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ double ag_gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752)); }
"""

TMA_STORE = r"""
// TMA stores (shared -> global), one bulk group per store; coordinates innermost first.
__device__ __forceinline__ void ag_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// all but the newest N bulk groups of this thread have finished reading their shared source
template <int N> __device__ __forceinline__ void ag_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
// all but the newest N bulk groups of this thread have completed (their writes are done)
template <int N> __device__ __forceinline__ void ag_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}
__device__ __forceinline__ void ag_tma_store_2d(const AgTmaMap* map, ag_u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"((ag_u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void ag_tma_store_3d(const AgTmaMap* map, ag_u32 src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"((ag_u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void ag_tma_store_4d(const AgTmaMap* map, ag_u32 src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               :: "l"((ag_u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void ag_tma_store_5d(const AgTmaMap* map, ag_u32 src, int c0, int c1, int c2, int c3,
                                                int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
               :: "l"((ag_u64)map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
"""

ARGREDUCE = r"""
// argmax / argmin: does (v, i) beat (w, j)? NumPy's order: the first index among equals, NaN beats all
// (x != x only for a float NaN).
template <typename T> __device__ __forceinline__ bool ag_arg_better_max(T v, int i, T w, int j) {
  if (v != v) return w == w || i < j;
  return w == w && (v > w || (v == w && i < j));
}
template <typename T> __device__ __forceinline__ bool ag_arg_better_min(T v, int i, T w, int j) {
  if (v != v) return w == w || i < j;
  return w == w && (v < w || (v == w && i < j));
}
"""

GROUPS: tuple[tuple[str, str], ...] = (
    ("cp.async", CP_ASYNC),
    ("mma.sync", MMA_SYNC),
    ("mma.sync.fp8", MMA_SYNC_FP8),
    ("wgmma", WGMMA),
    ("proxy-fence", PROXY_FENCE),
    ("mbarrier", MBARRIER),
    ("tma", TMA),
    ("tma-store", TMA_STORE),
    ("setmaxnreg", SETMAXNREG),
    ("pack", PACK),
    ("ex2", EX2),
    ("activations", ACTIVATIONS),
    ("argreduce", ARGREDUCE),
)


def wgmma_function(n: int, ab: str, trans_a: int = 0, trans_b: int = 0) -> tuple[str, str]:
    """(name, definition) of one wgmma f32 += ab*ab with both operands from descriptors: m64nNk16 for
    16-bit `ab` (with its transpose operands), m64nNk32 for 8-bit e4m3 / e5m2 (K-major only: no
    transpose operands)."""
    eight = ab in ("e4m3", "e5m2")
    k = 32 if eight else 16
    name = f"ag_wgmma_m64n{n}k32_{ab}" if eight else f"ag_wgmma_m64n{n}k16_{ab}_t{trans_a}{trans_b}"
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    dlist = ", ".join(f"%{i}" for i in range(regs))
    trans = "" if eight else f", {trans_a}, {trans_b}"
    body = (
        f"__device__ __forceinline__ void {name}(float* d, ag_u64 da, ag_u64 db) {{\n"
        f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'               " wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}.{ab} "\n'
        f'               "{{{dlist}}}, %{regs}, %{regs + 1}, p, 1, 1{trans};\\n}}\\n"\n'
        f"               : {outs}\n"
        f'               : "l"(da), "l"(db), "r"(1));\n'
        "}\n"
    )
    return name, body


def wgmma_rs_function(n: int, ab: str, trans_b: int) -> tuple[str, str]:
    """(name, definition) of one wgmma.m64nNk16 f32 += ab*ab with A from four .b32 registers (the
    wgmma.m64k16 A fragment) and B from a descriptor."""
    name = f"ag_wgmma_m64n{n}k16_{ab}_rs_t{trans_b}"
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    dlist = ", ".join(f"%{i}" for i in range(regs))
    alist = ", ".join(f"%{regs + i}" for i in range(4))
    body = (
        f"__device__ __forceinline__ void {name}(float* d, const ag_u32 (&a)[4], ag_u64 db) {{\n"
        f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
        f'               " wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} "\n'
        f'               "{{{dlist}}}, {{{alist}}}, %{regs + 4}, p, 1, 1, {trans_b};\\n}}\\n"\n'
        f"               : {outs}\n"
        f'               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));\n'
        "}\n"
    )
    return name, body


def prelude(features: frozenset[str], extra: list[str], fp8: bool = False) -> str:
    """Includes, the base helpers, each used feature group, then `extra` (e.g. wgmma shapes)."""
    head = "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n" + ("#include <cuda_fp8.h>\n" if fp8 else "")
    parts = [head, BASE]
    parts += [text for key, text in GROUPS if key in features]
    parts += extra
    return "".join(parts)
