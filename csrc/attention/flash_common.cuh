// Device helpers of the flash attention kernels (torch-free, NVIDIA sm_80+ only):
// cp.async copies into shared memory, ldmatrix fragment loads, mma.sync m16n8k16 with fp32
// accumulators, the swizzled shared-memory layout of a [rows, D] tile, and the paged K/V row address.
//
// Fragment layouts of mma.sync.m16n8k16 (lane = 4 * g + t, g = lane / 4, t = lane % 4), each
// register holding two 16-bit values (the lower column in the low half):
//   A (16 x 16, row major): a0 (row g, cols 2t..2t+1), a1 (row g+8, same), a2 (row g, cols 2t+8..),
//                           a3 (row g+8, cols 2t+8..)
//   B (16 x 8, k x n):      b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g)
//   C (16 x 8, fp32):       c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, cols 2t, 2t+1)
// scripts and tests emulate these in numpy (plugins/attention_flash/tests/test_fragment_layouts.py).
#pragma once

#include <cstdint>

#include "../compat.h"
#include "../kernels/common.h"            // allow_shared_memory
#include "../kernels/dependent_launch.h"  // launch_dependent, wait_for_prior_grids
#include "../kernels/fp8.cuh"             // the FP8 KV cache's conversions

// The instructions below exist from sm_80 on; for older targets the kernels compile to a trap so
// that one extension still builds for every architecture of TORCH_CUDA_ARCH_LIST.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PAGODA_FLASH_ENABLED 1
#else
#define PAGODA_FLASH_ENABLED 0
#endif

namespace pagoda {
namespace flash {

constexpr int kWarpSize = 32;
constexpr float kLog2e = 1.4426950408889634f;

// ---- shared-memory tiles ---------------------------------------------------------------------
// A tile of `rows` x D 16-bit values is stored as rows of D / 8 chunks of 16 bytes; chunk c of row r
// sits at chunk position c ^ (r % 8), so the 8 rows an ldmatrix reads (or a cp.async writes) fall
// in 8 different bank groups. Needs D / 8 >= 8 (D >= 64).
template <int D>
PAGODA_INLINE int swizzle(int row, int chunk) {
  static_assert(D % 64 == 0, "the swizzle needs at least 8 chunks of 16 bytes per row");
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// ---- asynchronous copies -----------------------------------------------------------------------
// 16 bytes global -> shared; `valid == false` writes 16 zero bytes and reads nothing (`src` must
// still be a mapped address: callers pass the tensor's base pointer then).
PAGODA_INLINE void cp_async16(void* dst, const void* src, bool valid) {
#if PAGODA_FLASH_ENABLED
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes));
#endif
}

// 8 bytes global -> shared (zeros when !valid), the same way: an FP8 cache's chunk of 8 elements.
PAGODA_INLINE void cp_async8(void* dst, const void* src, bool valid) {
#if PAGODA_FLASH_ENABLED
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes));
#endif
}

// ---- the FP8 KV cache -------------------------------------------------------------------------------
// A chunk is 8 elements of a cache row: 16 bytes of the query's dtype, or 8 FP8 bytes. An FP8 chunk is
// copied into the first half of the 16-byte tile slot its 16-bit elements fill, and the thread that copied
// it widens it in place (once its copies are complete, before the barrier that publishes the tile): the
// tiles, their swizzle and every fragment load stay those of a 16-bit cache.
template <bool kFp8>
PAGODA_INLINE void cp_async_chunk(void* dst, const void* src, bool valid) {
  if constexpr (kFp8) {
    cp_async8(dst, src, valid);
  } else {
    cp_async16(dst, src, valid);
  }
}

template <typename T>
PAGODA_INLINE void widen_fp8_chunk(uint16_t* slot, KVFormat format) {
  const uint2 eight = *reinterpret_cast<const uint2*>(slot);
  *reinterpret_cast<uint4*>(slot) = fp8x8_to<T>(eight, format);
}

// (k_scale, v_scale) of an FP8 cache, (1, 1) otherwise (read where the kernel may read what earlier ones wrote).
template <bool kFp8>
PAGODA_INLINE float2 kv_scales(const float* k_scale, const float* v_scale) {
  if constexpr (kFp8) {
    return make_float2(*k_scale, *v_scale);
  } else {
    return make_float2(1.0f, 1.0f);
  }
}

PAGODA_INLINE void cp_async_commit() {
#if PAGODA_FLASH_ENABLED
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
PAGODA_INLINE void cp_async_wait() {
#if PAGODA_FLASH_ENABLED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ---- fragment loads ------------------------------------------------------------------------------
// Four 8x8 matrices of 16-bit values; lanes 8i..8i+7 give the row addresses of matrix i, and
// register i receives (row lane/4, cols 2(lane%4)..+1) of matrix i (with .trans: (rows 2(lane%4)..+1,
// col lane/4), i.e. the transpose).
// `addr` is a shared-space address (see smem_addr).
PAGODA_INLINE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#if PAGODA_FLASH_ENABLED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

PAGODA_INLINE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
#if PAGODA_FLASH_ENABLED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

PAGODA_INLINE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

PAGODA_INLINE void ldmatrix_x4(uint32_t (&r)[4], const void* src) { ldmatrix_x4(r, smem_addr(src)); }

PAGODA_INLINE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* src) { ldmatrix_x4_trans(r, smem_addr(src)); }

// ---- tensor-core product -------------------------------------------------------------------------
// c (16 x 8, fp32) += a (16 x 16) * b (16 x 8), 16-bit inputs of type T.
template <typename T>
PAGODA_INLINE void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
PAGODA_INLINE void mma_16816<half_t>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if PAGODA_FLASH_ENABLED
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
PAGODA_INLINE void mma_16816<bf16_t>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if PAGODA_FLASH_ENABLED
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats rounded to T (nearest even) in one register: `lo` in the low half.
template <typename T>
PAGODA_INLINE uint32_t pack2(float lo, float hi);

template <>
PAGODA_INLINE uint32_t pack2<half_t>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <>
PAGODA_INLINE uint32_t pack2<bf16_t>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x in one MUFU.EX2 (flushes results below 2^-126 to 0; 2^-inf = 0). exp2f adds a range fix-up.
PAGODA_INLINE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- warp reductions over the 4 lanes of a quad (the lanes that share a fragment row) ------------
PAGODA_INLINE float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

PAGODA_INLINE float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- the paged cache -----------------------------------------------------------------------------
// Division by a run-time constant d (the cache block size) in one IMAD.HI, one IADD and one shift,
// for dividends below 2^31 (key positions): with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1,
// n / d = (umulhi(n, m) + n) >> l (round-up multiplier; m = 1 for a power of two; the sum stays below
// 2^32). Built on the host; plugins/attention_flash/tests/test_fast_division.py checks the formulas.
struct FastDiv {
  uint32_t divisor, multiplier, shift;
  FastDiv() = default;
  __host__ explicit FastDiv(uint32_t d) : divisor(d), multiplier(1), shift(0) {
    while ((1ull << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>((((1ull << shift) - d) << 32) / d + 1);
  }
  PAGODA_INLINE uint32_t div(uint32_t n) const { return (__umulhi(n, multiplier) + n) >> shift; }
};

// Element offset of key position `pos` of one sequence in a cache half (K or V) laid out
// [num_blocks, block_size, num_kv_heads, head_size], already offset to the kv head.
PAGODA_INLINE int64_t paged_row(const int32_t* block_table_row, int pos, const FastDiv& block, int64_t stride_block,
                                int64_t stride_token) {
  const uint32_t page_index = block.div(static_cast<uint32_t>(pos));
  const int page = __ldg(block_table_row + page_index);
  const uint32_t in_page = static_cast<uint32_t>(pos) - page_index * block.divisor;
  return static_cast<int64_t>(page) * stride_block + static_cast<int64_t>(in_page) * stride_token;
}

// ---- online softmax ------------------------------------------------------------------------------
// Online softmax of one row tile (rows g, g + 8) over raw scores `s` (masked: -inf): the running
// max `m` is kept scaled (log2 domain, `scale` = softmax scale * log2 e), so p = 2^(s * scale - m)
// is one FFMA and one MUFU.EX2. `l` is this lane's partial sum (the quad's are added at the end).
// Turns `s` into probabilities in place, rescales `l`, and returns alpha = 2^(m_old - m_new) per row.
template <int N, bool kMasked>
PAGODA_INLINE void softmax_update(float (&s)[N / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2], float scale) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float raw_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) raw_max = fmaxf(raw_max, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
    const float row_max = fmaxf(m[half], quad_max(raw_max) * scale);
    // in a masked tile a row that has seen no visible key yet keeps -inf: subtract 0 instead (p = 0,
    // alpha = 1 or 0); an unmasked tile shows every row a key, so its max is finite
    const float base = kMasked && row_max == -INFINITY ? 0.0f : row_max;
    alpha[half] = fast_exp2(m[half] - base);
    m[half] = row_max;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {
      s[nt][2 * half] = fast_exp2(fmaf(s[nt][2 * half], scale, -base));
      s[nt][2 * half + 1] = fast_exp2(fmaf(s[nt][2 * half + 1], scale, -base));
      sum += s[nt][2 * half] + s[nt][2 * half + 1];
    }
    l[half] = l[half] * alpha[half] + sum;
  }
}

// o *= alpha (rows g, g + 8 of a row tile), skipped when alpha is 1 in every row of the warp (no row's
// max grew): the product would change nothing (exact), and the maxima settle after the first key tiles,
// so most tiles of a long sequence save D / 2 FMULs per row tile and lane for a vote.
template <int D>
PAGODA_INLINE void rescale_output(float (&o)[D / 8][4], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

// The probabilities of 16 keys (score tiles 2k and 2k + 1) as the A fragment of P @ V.
template <typename T>
PAGODA_INLINE void probs_to_a(const float (&lo)[4], const float (&hi)[4], uint32_t (&a)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

// ---- products over shared-memory tiles -----------------------------------------------------------
// A fragment of rows row0..row0+15, columns 16k..16k+15 of a swizzled [*, D] tile.
template <int D>
PAGODA_INLINE void load_a(uint32_t (&a)[4], const void* tile, int row0, int k, int lane) {
  const auto* base = static_cast<const uint16_t*>(tile);
  ldmatrix_x4(a, base + swizzle<D>(row0 + (lane & 15), 2 * k + (lane >> 4)));
}

// Lane address of the ldmatrix that loads the B fragments of keys key0..key0+15, dims 16k..16k+15
// of a swizzled K tile [keys, D]: registers 0, 1 for keys key0..+7, registers 2, 3 for keys +8..+15.
template <int D>
PAGODA_INLINE const uint16_t* k_frag_src(const void* k_tile, int key0, int k, int lane) {
  const int i = lane >> 3;
  return static_cast<const uint16_t*>(k_tile) + swizzle<D>(key0 + (lane & 7) + 8 * (i >> 1), 2 * k + (i & 1));
}

// Lane address of the ldmatrix.trans that loads the B fragments of keys key0..key0+15, dims
// 16dp..16dp+15 of a swizzled V tile [keys, D]: registers 0, 1 for dims 16dp..+7, 2, 3 for +8..+15.
template <int D>
PAGODA_INLINE const uint16_t* v_frag_src(const void* v_tile, int key0, int dp, int lane) {
  const int i = lane >> 3;
  return static_cast<const uint16_t*>(v_tile) + swizzle<D>(key0 + (lane & 7) + 8 * (i & 1), 2 * dp + (i >> 1));
}

// s[2p], s[2p+1] += a (16 rows x dims 16k..16k+15) @ K^T for keys key0 + 16p .. +15 of a swizzled
// K tile [keys, D] (so K rows are the B operand's columns: no transpose).
template <typename T, int D>
PAGODA_INLINE void qk_step(float (&s0)[4], float (&s1)[4], const uint32_t (&a)[4], const void* k_tile, int key0,
                           int k, int lane) {
  uint32_t b[4];
  ldmatrix_x4(b, k_frag_src<D>(k_tile, key0, k, lane));
  mma_16816<T>(s0, a, b[0], b[1]);
  mma_16816<T>(s1, a, b[2], b[3]);
}

// o[dt] += p (16 rows x keys key0..key0+15) @ V[key0.., all D dims] of a swizzled V tile [keys, D].
template <typename T, int D>
PAGODA_INLINE void pv_step(float (&o)[D / 8][4], const uint32_t (&p)[4], const void* v_tile, int key0, int lane) {
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, v_frag_src<D>(v_tile, key0, dp, lane));
    mma_16816<T>(o[2 * dp], p, b[0], b[1]);
    mma_16816<T>(o[2 * dp + 1], p, b[2], b[3]);
  }
}

}  // namespace flash
}  // namespace pagoda
