// A CPU stand-in for the CUDA features that generated kernels without inline PTX use: every thread of a
// block is an OS thread, __syncthreads and named barriers are std::barrier, __shfl_xor_sync trades
// through a per-warp buffer between two warp barriers, shared memory is one buffer (blocks run one after
// another), bf16 / f16 round to nearest even. It runs the generated code as written, so the tests see
// its index arithmetic, slot maps, shuffles and shared-memory exchanges, not a model of them.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __shared__
#define __builtin_assume(x) ((void)0)

struct ag_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local ag_dim3 threadIdx, blockIdx;
static ag_dim3 gridDim, blockDim;

alignas(1024) unsigned char ag_smem_raw[232448 + 2048];

static inline unsigned long long __cvta_generic_to_shared(const void* p) {
  return (unsigned long long)((const unsigned char*)p - ag_smem_raw);
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }

// ---- 16-bit floats ----
struct __nv_bfloat16 { uint16_t x; };
struct __half { uint16_t x; };
static inline float __bfloat162float(__nv_bfloat16 v) {
  uint32_t u = (uint32_t)v.x << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {(uint16_t)0x7fc0};
  u += 0x7fff + ((u >> 16) & 1);
  return {(uint16_t)(u >> 16)};
}
static inline float __half2float(__half v) { _Float16 h; std::memcpy(&h, &v.x, 2); return (float)h; }
static inline __half __float2half_rn(float f) { _Float16 h = (_Float16)f; __half v; std::memcpy(&v.x, &h, 2); return v; }

struct __nv_fp8_e4m3 { uint8_t x; };  // storage only here (the fp8 mma decodes the bytes itself)
struct __nv_fp8_e5m2 { uint8_t x; };

// ---- math: CUDA's overloads ----
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }

// ---- threads ----
struct AgBlock {
  int threads = 0;
  std::unique_ptr<std::barrier<>> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<uint64_t> lanes;  // one exchange slot per thread
  std::mutex named_mu;
  std::map<int, std::unique_ptr<std::barrier<>>> named;
};
static AgBlock* ag_block = nullptr;

static inline int ag_cpu_tid() { return (int)threadIdx.x; }
static inline void __syncthreads() { ag_block->all->arrive_and_wait(); }
static inline void __syncwarp() { ag_block->warps[ag_cpu_tid() / 32]->arrive_and_wait(); }
static inline void ag_bar_sync(int id, int threads) {
  std::barrier<>* b;
  {
    std::lock_guard<std::mutex> g(ag_block->named_mu);
    auto& slot = ag_block->named[id];
    if (!slot) slot = std::make_unique<std::barrier<>>(threads);
    b = slot.get();
  }
  b->arrive_and_wait();
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  int t = ag_cpu_tid(), w = t / 32;
  std::memcpy(&ag_block->lanes[t], &v, sizeof(T));
  ag_block->warps[w]->arrive_and_wait();
  T out;
  std::memcpy(&out, &ag_block->lanes[(w * 32) + ((t % 32) ^ mask)], sizeof(T));
  ag_block->warps[w]->arrive_and_wait();
  return out;
}
static inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
static std::mutex ag_atomic_mu;  // 16-bit atomics: one lock (the sum is what matters here, not speed)
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  std::lock_guard<std::mutex> g(ag_atomic_mu);
  __nv_bfloat16 old = *p;
  *p = __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(v));
  return old;
}
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
  std::lock_guard<std::mutex> g(ag_atomic_mu);
  __nv_bfloat162 old = *p;
  p->x = __float2bfloat16_rn(__bfloat162float(old.x) + __bfloat162float(v.x));
  p->y = __float2bfloat16_rn(__bfloat162float(old.y) + __bfloat162float(v.y));
  return old;
}
static inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
static inline float ag_exp2f(float x) { return exp2f(x); }

// ---- cp.async: synchronous here (landing early is one of the orders the GPU may show) ----
static inline void ag_cp_async16(uint32_t dst, const void* src, int n) {
  std::memcpy(ag_smem_raw + dst, src, n);
  std::memset(ag_smem_raw + dst + n, 0, 16 - n);
}
static inline void ag_cp_async_commit() {}
template <int N> static inline void ag_cp_async_wait() {}

// ---- packing two 16-bit floats into one register (an mma A fragment register) ----
static inline uint32_t ag_pack_bf16x2(float lo, float hi) {
  return (uint32_t)__float2bfloat16_rn(lo).x | ((uint32_t)__float2bfloat16_rn(hi).x << 16);
}
static inline uint32_t ag_pack_f16x2(float lo, float hi) {
  return (uint32_t)__float2half_rn(lo).x | ((uint32_t)__float2half_rn(hi).x << 16);
}

// ---- ldmatrix and mma.sync m16n8k16, from the PTX ISA's fragment tables ----
// Each lane publishes its operands in its row of a per-warp table, then computes its own outputs.
struct AgWarpTable { uint32_t v[32][12]; };
static std::vector<AgWarpTable> ag_tables;
static inline uint32_t* ag_publish(int n, const uint32_t* vals) {
  int t = ag_cpu_tid(), w = t / 32;
  std::memcpy(ag_tables[w].v[t % 32], vals, 4 * n);
  ag_block->warps[w]->arrive_and_wait();
  return &ag_tables[w].v[0][0];
}
static inline void ag_retire() { ag_block->warps[ag_cpu_tid() / 32]->arrive_and_wait(); }
static inline uint16_t ag_b16(uint32_t addr) { uint16_t x; std::memcpy(&x, ag_smem_raw + addr, 2); return x; }
template <int X, bool TRANS> static inline void ag_ldmatrix(uint32_t* r, uint32_t addr) {
  const uint32_t* tab = ag_publish(1, &addr);
  int l = ag_cpu_tid() % 32;
  for (int i = 0; i < X; ++i) {
    uint32_t lo, hi;
    if (!TRANS) {  // row l / 4 of matrix i, elements 2 (l % 4), 2 (l % 4) + 1
      uint32_t row = tab[(8 * i + l / 4) * 12];
      lo = ag_b16(row + 4 * (l % 4));
      hi = ag_b16(row + 4 * (l % 4) + 2);
    } else {  // column l / 4 of matrix i, rows 2 (l % 4) and 2 (l % 4) + 1
      lo = ag_b16(tab[(8 * i + 2 * (l % 4)) * 12] + 2 * (l / 4));
      hi = ag_b16(tab[(8 * i + 2 * (l % 4) + 1) * 12] + 2 * (l / 4));
    }
    r[i] = lo | (hi << 16);
  }
  ag_retire();
}
static inline void ag_ldmatrix_x4(uint32_t (&r)[4], uint32_t a) { ag_ldmatrix<4, false>(r, a); }
static inline void ag_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t a) { ag_ldmatrix<4, true>(r, a); }
static inline void ag_ldmatrix_x2(uint32_t (&r)[2], uint32_t a) { ag_ldmatrix<2, false>(r, a); }
static inline void ag_ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t a) { ag_ldmatrix<2, true>(r, a); }
// 16-bit A (16x16) and B (16x8, k x n): lane (row % 8) * 4 + (k % 8) / 2, register row / 8 + 2 (k / 8) (B: k / 8),
// half k % 2. 8-bit A (16x32) and B (32x8): lane (row % 8) * 4 + (k % 16) / 4, register row / 8 + 2 (k / 16)
// (B: k / 16), byte k % 4. C (16x8): lane (g, t) holds row g + 8 (j / 2), column 2t + j % 2 in d[j].
// 8-bit floats: e4m3 (bias 7, no infinities, 0x7f / 0xff NaN) and e5m2 (bias 15, IEEE-like)
static inline float ag_fp8(uint32_t b, bool e4m3) {
  int s = (b >> 7) & 1, e = e4m3 ? (b >> 3) & 15 : (b >> 2) & 31, m = e4m3 ? b & 7 : b & 3;
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  float v;
  if (e4m3 && e == 15 && m == 7) v = NAN;
  else if (!e4m3 && e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexpf((float)m, 1 - bias - mbits);
  else v = ldexpf((float)(m | (1 << mbits)), e - bias - mbits);
  return s ? -v : v;
}
static inline float ag_operand(uint32_t reg, int k, int kind) {  // kind: 0 bf16, 1 f16, 2 e4m3, 3 e5m2
  if (kind >= 2) return ag_fp8((reg >> (8 * (k % 4))) & 255, kind == 2);
  uint16_t x = (uint16_t)(k % 2 ? reg >> 16 : reg & 0xffff);
  return kind == 0 ? __bfloat162float(__nv_bfloat16{x}) : __half2float(__half{x});
}
static inline void ag_mma_emulated(float* d, const uint32_t (&a)[4], const uint32_t (&b)[2], int kind) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const uint32_t* tab = ag_publish(6, mine);
  int l = ag_cpu_tid() % 32, g = l / 4, t = l % 4;
  int ks = kind >= 2 ? 32 : 16, half = ks / 2, per = ks / 8;  // K, K per register pair, elements per lane
  float out[4];
  for (int j = 0; j < 4; ++j) {
    int row = g + 8 * (j / 2), col = 2 * t + (j % 2);
    float acc = d[j];
    for (int k = 0; k < ks; ++k) {
      uint32_t ar = tab[((row % 8) * 4 + (k % half) / per) * 12 + (row / 8) + 2 * (k / half)];
      uint32_t br = tab[(col * 4 + (k % half) / per) * 12 + 4 + k / half];
      acc += ag_operand(ar, k, kind) * ag_operand(br, k, kind);
    }
    out[j] = acc;
  }
  ag_retire();
  for (int j = 0; j < 4; ++j) d[j] = out[j];
}
static inline void ag_mma_m16n8k16_bf16(float* d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ag_mma_emulated(d, a, b, 0);
}
static inline void ag_mma_m16n8k16_f16(float* d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ag_mma_emulated(d, a, b, 1);
}
static inline void ag_mma_m16n8k32_e4m3(float* d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ag_mma_emulated(d, a, b, 2);
}
static inline void ag_mma_m16n8k32_e5m2(float* d, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ag_mma_emulated(d, a, b, 3);
}

// Run `body` for every thread of every block of the grid.
template <typename F> static void ag_cpu_launch(int gx, int gy, int gz, int threads, F body) {
  gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
  blockDim = {(unsigned)threads, 1, 1};
  for (int bz = 0; bz < gz; ++bz)
    for (int by = 0; by < gy; ++by)
      for (int bx = 0; bx < gx; ++bx) {
        std::memset(ag_smem_raw, 0xff, sizeof(ag_smem_raw));  // NaN: a read before a write shows
        AgBlock blk;
        blk.threads = threads;
        blk.all = std::make_unique<std::barrier<>>(threads);
        for (int w = 0; w < (threads + 31) / 32; ++w) blk.warps.push_back(std::make_unique<std::barrier<>>(32));
        blk.lanes.assign(threads, 0);
        ag_tables.assign((threads + 31) / 32, AgWarpTable{});
        ag_block = &blk;
        std::vector<std::thread> ts;
        ts.reserve(threads);
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            threadIdx = {(unsigned)t, 0, 0};
            blockIdx = {(unsigned)bx, (unsigned)by, (unsigned)bz};
            body();
          });
        for (auto& th : ts) th.join();
        ag_block = nullptr;
      }
}
