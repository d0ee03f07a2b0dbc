// AWQ int4 x fp16/bf16 on tensor cores (mma.sync.m16n8k16, fp32 accumulation), weights in the
// tiles layout of awq_tiles.h. The Python emulation of every index below is
// plugins/quant_awq/tests/tile_emulator.py (CI checks it against the reference dequantization).
//
// Operands: the weights are A (16 output columns x 16 inputs per MMA), the activations B (16 inputs
// x 8 tokens), so one MMA serves up to 8 tokens and a 64-column strip takes 4 MMAs per step.
// Block: WN x WK warps (256 threads). Warp (wn, wk) owns strip n_block * WN + wn and K slice
// split * WK + wk (whole groups); blockIdx.x picks 8 * NT tokens. Per step (16 inputs) a lane copies
// ONE 16 bytes (the warp: 512 contiguous bytes) holding its A fragments of the strip's four 16-column
// tiles, kDepth steps ahead, through a cp.async ring; a group's scales and zeros are loaded at its
// start when folding (used at its end), one group ahead when dequantizing. A warp walks its slice in
// unrolled blocks (one group when folding, 8 steps otherwise) behind one warp-uniform test each, not
// one per step; only the last blocks of a slice, whose refills would pass its end, clamp addresses.
//
// Up to 16 tokens (NT <= 2, "fold"), the zero point and scale leave the inner loop: A is the raw
// (word >> 4p) & 0x000F000F | MAGIC (q + 128 for bf16, q + 1024 for fp16), the group's fp32 sums
// acc_g = sum x * A are formed by the MMAs, and at the group's end out += s * (acc_g - (z + magic) *
// sum_x). sum_x, a group's sum of x per token, is the same for every strip: the block forms it once,
// by MMAs against ones while staging x, and keeps it in shared memory (dynamic shared memory, past
// 64 KiB). Past 16 tokens the MMAs dominate: A is dequantized in registers, (A - (MAGIC + z)) * s, and
// accumulated directly. x is staged in shared memory per chunk of steps, already in B-fragment order:
// with the inputs of each pair of steps permuted (awq_tiles.h), a lane's fragments of two steps are one
// 16-byte load and one 16-byte store. The WK slices of a block are summed in shared memory; with a K
// split, blocks write fp32 partials and the last to arrive at a column block (an atomic counter) sums
// them in split order (deterministic) and writes the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "awq_tiles.h"
#include "dependent_launch.h"

namespace pagoda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStageTiles = 128;  // (step, token tile) B fragments of x staged per chunk (32 KiB)
constexpr int kDepth = 8;         // steps of weights in flight per warp (cp.async ring, 32 KiB per block)
constexpr int kLaneWords = 4;     // 16 bytes of int4 per lane per step
constexpr int kFragWords = 32 * 2;  // one step's B fragments of one token tile, in uint32 (a uint2 per lane)
constexpr int kRingWords = kWarps * kDepth * 32 * 4;  // per warp: kDepth steps x 32 lanes x 16 bytes
constexpr int kSharedWords = kStageTiles * kFragWords + kRingWords;  // 64 KiB: x stage, then the ring

// NT token tiles (8 tokens each) per block: 1 (<= 8 tokens), 2 (<= 16) or 4.
template <int NT>
struct TileShape {
  static constexpr int kWN = NT <= 2 ? 2 : 4;
  static constexpr int kWK = kThreads / 32 / kWN;
  static constexpr int kChunk = kStageTiles / (kWK * NT);  // steps per warp per staged chunk
  static constexpr int kStageSteps = kChunk * NT / kWN;  // steps of one token tile each warp stages per chunk
  static constexpr int kMinBlocks = NT <= 2 ? 2 : 1;
  static constexpr bool kFold = NT <= 2;  // zero point and scale applied to the group sums
};

// Dynamic shared memory: the x stage, the rings, then on the fold path the chunk's sums of x, 8
// tokens per (warp slice, group, token tile): 512 to 2048 bytes past the 64 KiB. Two blocks fit an SM
// of sm_80/sm_90 (164/228 KiB), one an SM of sm_86/sm_89 (100 KiB).
template <int NT, int SPG>
struct SharedLayout {
  static constexpr int kSumWords = TileShape<NT>::kFold ? kStageTiles / SPG * 8 : 0;
  static constexpr int kBytes = (kSharedWords + kSumWords) * 4;
};

template <typename T>
struct Pair;
template <>
struct Pair<half_t> {
  using type = __half2;
  static constexpr uint32_t kMagic = 0x6400u;  // 1024.0: its mantissa unit is 1
  static constexpr uint32_t kOne = 0x3C00u;
  // A = q + 1024 on the fold path too: the fp32 sums then carry 1024 * sum x, 7 of their 24 bits above
  // the result's scale (bf16: 4), still 6 more than an fp16 output holds; removed with the zero
  static constexpr uint32_t kMagicF32 = 0x44800000u;  // 1024.0f: nibble at bit 13 (2^-13) adds 1
  static constexpr int kSumsUnitBit = 13;
  static PAGODA_INLINE float half_float(uint32_t word, int high) {
    return __half2float(__ushort_as_half(static_cast<uint16_t>(high ? word >> 16 : word)));
  }
};
template <>
struct Pair<bf16_t> {
  using type = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x4300u;  // 128.0
  static constexpr uint32_t kOne = 0x3F80u;
  // A = q + 128: products exact, removed with the zero
  static constexpr uint32_t kMagicF32 = 0x43000000u;  // 128.0f: nibble at bit 16 (2^-16) adds 1
  static constexpr int kSumsUnitBit = 16;
  static PAGODA_INLINE float half_float(uint32_t word, int high) {
    return __uint_as_float(high ? word & 0xFFFF0000u : word << 16);
  }
};

template <typename P>
PAGODA_INLINE P as_pair(uint32_t bits) {
  P p;
  memcpy(&p, &bits, 4);
  return p;
}

template <typename P>
PAGODA_INLINE uint32_t as_bits(P p) {
  uint32_t bits;
  memcpy(&bits, &p, 4);
  return bits;
}

// d += a * b for one m16n8k16 tile (a: 4 registers of W, b: 2 registers of x); TYPE f16 or bf16.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define PAGODA_AWQ_MMA(TYPE) __trap()  // m16n8k16 needs sm_80; the host never launches it there
#else
#define PAGODA_AWQ_MMA(TYPE)                                                                                 \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
      "{%0,%1,%2,%3};\n"                                                                                    \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                       \
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y))
#endif
PAGODA_INLINE void mma(float (&d)[4], const uint4& a, const uint2& b, half_t) { PAGODA_AWQ_MMA("f16"); }
PAGODA_INLINE void mma(float (&d)[4], const uint4& a, const uint2& b, bf16_t) { PAGODA_AWQ_MMA("bf16"); }
#undef PAGODA_AWQ_MMA

// Weights stream through a per-warp ring in shared memory by cp.async (L2 only): each lane copies
// and later reads back its own 16 bytes, so no barrier is needed, and the loads in flight hold no
// registers (held in registers, ptxas reused them and sank every refill to the end of the unrolled
// block: one memory latency per 8 steps).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
PAGODA_INLINE void copy_async(void*, const void*) { __trap(); }
PAGODA_INLINE void commit_copies() {}
template <int N>
PAGODA_INLINE void wait_copies() {}
#else
PAGODA_INLINE void copy_async(void* smem, const void* gmem) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
PAGODA_INLINE void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
PAGODA_INLINE void wait_copies() {  // at most N of this thread's newest groups still in flight
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// A streamed 16-byte load that skips L1 (every weight byte is read once).
PAGODA_INLINE uint4 load_stream(const uint4* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

PAGODA_INLINE uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// (a & kMask) | c in one instruction (nvcc otherwise emits two LOP3s, each with an immediate).
template <uint32_t kMask>
PAGODA_INLINE uint32_t mask_or(uint32_t a, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "n"(kMask), "r"(c));  // 0xEA: (a & b) | c
  return r;
}

// Zero point j of a lane's zeros plus the magic left in the fold's sums, in fp32: nibble j placed at
// the mantissa unit of the magic (128.0f, 1024.0f) is exactly magic + z (a shift and one LOP3).
template <typename T>
PAGODA_INLINE float zero_in_sums(uint32_t zeros, int j) {
  constexpr int kBit = Pair<T>::kSumsUnitBit;
  const uint32_t at = 4 * j <= kBit ? zeros << (kBit - 4 * j) : zeros >> (4 * j - kBit);
  return __uint_as_float(mask_or<0xFu << kBit>(at, Pair<T>::kMagicF32));
}

// A register p of a word (nibbles p and p + 4): column g + 8 * (p & 1), inputs 2t (+1) + 8 * (p >> 1).
PAGODA_INLINE uint32_t raw_pair(uint32_t word, int p, uint32_t magic2) {
  return mask_or<0x000F000Fu>(word >> (4 * p), magic2);  // q + MAGIC, exact
}

// One group's constants for a lane, per column j = 2 * tile + half (column 16 tile + g + 8 half):
// the scale and MAGIC + zero, both halves of a register (the dequantizing path).
template <typename T>
PAGODA_INLINE void group_constants(const uint4& scales, uint32_t zeros, uint32_t (&scale2)[8],
                                   uint32_t (&zero2)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    scale2[j] = __byte_perm(word_of(scales, j >> 1), 0u, (j & 1) ? 0x3232u : 0x1010u);
    const uint32_t z = ((zeros >> (4 * j)) & 0xFu) | Pair<T>::kMagic;
    zero2[j] = z | (z << 16);
  }
}

// (q - z) * s for A register p: three instructions per pair of weights.
template <typename T>
PAGODA_INLINE uint32_t dequant_pair(uint32_t word, int p, uint32_t zero2, uint32_t scale2, uint32_t magic2) {
  using P = typename Pair<T>::type;
  const uint32_t v = mask_or<0x000F000Fu>(word >> (4 * p), magic2);
  return as_bits(__hmul2(__hsub2(as_pair<P>(v), as_pair<P>(zero2)), as_pair<P>(scale2)));
}

// Two floats rounded to T, packed into one 32-bit word (lo: a, hi: b), by integer ops only.
template <typename T>
PAGODA_INLINE uint32_t pack_pair(float a, float b) {
  const T lo = from_float<T>(a), hi = from_float<T>(b);
  uint16_t lo_bits, hi_bits;
  memcpy(&lo_bits, &lo, 2);
  memcpy(&hi_bits, &hi, 2);
  return static_cast<uint32_t>(lo_bits) | (static_cast<uint32_t>(hi_bits) << 16);
}

// End of a group (fold path): out += s * (acc_g - (z + magic) * sum_x) per column (the difference
// rounded once, by an FMA), then the group sums restart. C fragment: c[i] is column g + 8 (i >> 1) of
// the tile, token 2t + (i & 1); sum_x: the group's sums of x staged for token tile nt at
// sum_x[8 * nt], tokens 2t and 2t + 1.
template <typename T, int NT>
PAGODA_INLINE void fold_group(float (&out)[NT][4][4], float (&acc)[NT][4][4], const float* sum_x,
                              const uint4& scales, uint32_t zeros) {
  float2 sx[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) sx[nt] = *reinterpret_cast<const float2*>(sum_x + 8 * nt);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float s = Pair<T>::half_float(word_of(scales, j >> 1), j & 1), zm = zero_in_sums<T>(zeros, j);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& a = acc[nt][j >> 1][2 * (j & 1) + e];
        float& o = out[nt][j >> 1][2 * (j & 1) + e];
        o = fmaf(s, fmaf(-zm, e ? sx[nt].y : sx[nt].x, a), o);
        a = 0.f;
      }
  }
}

// Steps [begin, begin + len) of K slice q of `slices` (whole groups, as even as possible).
struct Slice {
  int begin, len;
};
PAGODA_INLINE Slice slice_of(int q, int slices, int groups, int steps_per_group) {
  const int g0 = q * groups / slices;  // 32-bit: q * groups < 2^31 (K / 32 groups, <= 4096 slices)
  const int g1 = (q + 1) * groups / slices;
  return {g0 * steps_per_group, (g1 - g0) * steps_per_group};
}

// Chunk c of x for every warp slice of the block, as B fragments, two steps per uint4: stage4[((wk * kChunk
// + cs) / 2 * NT + nt) * 32 + lane] holds, for steps cs and cs + 1 (cs even) of token 8 nt + g (lane 4g +
// t), inputs 8t .. 8t + 7 of that pair of steps (MMA inputs 2t, 2t + 1, 2t + 8, 2t + 9 of each step);
// tokens past m and steps past the slice are zeros. Warp (wn, wk) stages kStageSteps steps of one token
// tile of its own slice, and on the fold path sums them per group by MMAs against ones
// (fp32), once per block instead of once per strip: sums[((wk * kChunk / SPG + group of the chunk) *
// NT + nt) * 8 + token].
template <typename T, int NT, int SPG>
__device__ void stage_x(uint32_t* stage, float* sums, const AwqTilesGemm& p, int chunk, Slice mine, int wn, int wk) {
  using S = TileShape<NT>;
  constexpr int kSteps = S::kStageSteps;
  static_assert(S::kWN % NT == 0 && kSteps % SPG == 0 && kSteps % 2 == 0, "whole groups and pairs of one tile per warp");
  const int lane = threadIdx.x & 31, t = lane & 3;
  const int nt = wn % NT, cs0 = wn / NT * kSteps, local = chunk * S::kChunk + cs0;  // + j: the step in the slice
  const int row = (blockIdx.x * NT + nt) * 8 + (lane >> 2);
  const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.x_stride +
                                                  (mine.begin + local) * kAwqTileStep) + t;  // + pair * 4
  uint4* const dst = reinterpret_cast<uint4*>(stage) + ((wk * S::kChunk + cs0) / 2 * NT + nt) * 32 + lane;
  const uint32_t one2 = Pair<T>::kOne * 0x00010001u;
  const uint4 ones = make_uint4(one2, one2, one2, one2);
  float sum[4] = {0.f, 0.f, 0.f, 0.f};
  // x formed here, once: used only under each pair's condition, the compiler formed the address anew
  // under every condition
  asm volatile("" ::"l"(x));
  // batches of 4 pairs (8 steps), all loaded before the first is stored; the batches unrolled too except
  // at group 32, where the two-tile kernels then spilled
  constexpr int kBatch = 4;
  static_assert(kSteps % (2 * kBatch) == 0, "whole batches");
#pragma unroll(SPG > 2 ? kSteps / 2 / kBatch : 1)
  for (int b0 = 0; b0 < kSteps / 2; b0 += kBatch) {
    uint4 b[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      b[i] = make_uint4(0u, 0u, 0u, 0u);
      if (row < p.m && local + 2 * (b0 + i) < mine.len) b[i] = __ldg(x + (b0 + i) * 4);  // slices are whole pairs
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      dst[(b0 + i) * NT * 32] = b[i];
      if constexpr (S::kFold) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const int j = 2 * (b0 + i) + s;  // j % SPG: known, as 8 % SPG == 0
          mma(sum, ones, s ? make_uint2(b[i].z, b[i].w) : make_uint2(b[i].x, b[i].y), T{});  // c[e]: token 2t + e
          if (j % SPG != SPG - 1) continue;
          if (lane < 4) {
            float* const at = sums + ((wk * S::kChunk + cs0 + j) / SPG * NT + nt) * 8 + 2 * t;
            *reinterpret_cast<float2*>(at) = make_float2(sum[0], sum[1]);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) sum[e] = 0.f;
        }
      }
    }
  }
}

// The last block to arrive at column block n_block sums the split partials of every row.
template <typename T, int WN>
__device__ void reduce_partials(const AwqTilesGemm& p, int n_block, int splits) {
  const int col0 = n_block * WN * kAwqTileStrip;
  const int quads = min(WN * kAwqTileStrip, p.n - col0) / 4;
  T* out = static_cast<T*>(p.out);
  for (int idx = threadIdx.x; idx < p.m * quads; idx += kThreads) {
    const int row = idx / quads, col = col0 + 4 * (idx % quads);
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.partials + (static_cast<int64_t>(s) * p.m + row) * p.n + col));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    // one 8-byte store of two packed pairs. A memcpy of a T[4] here became byte stores, and ptxas
    // (CUDA 13.0, sm_90) compiled each low-byte store of a converted value as F2I.U8.F16 (a float to
    // u8 conversion): every output kept its high byte only (docs/quant_awq.md, run 6).
    const uint2 packed = make_uint2(pack_pair<T>(sum.x, sum.y), pack_pair<T>(sum.z, sum.w));
    *reinterpret_cast<uint2*>(out + static_cast<int64_t>(row) * p.n + col) = packed;
  }
}

// The block's WK slices summed into warp wk = 0 (through the free stage), then stored: the output
// (no split) or this split's fp32 partials.
template <typename T, int NT>
__device__ void store_block(const AwqTilesGemm& p, float (&out)[NT][4][4], uint32_t* stage, int wn, int wk,
                            int strip, bool strip_ok) {
  using S = TileShape<NT>;
  constexpr int WN = S::kWN, WK = S::kWK;
  static_assert((WK - 1) * WN * NT * 16 * 32 <= kSharedWords, "the slice sums reuse the shared memory");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  wait_copies<0>();  // the ring's last (discarded) refills land before it is overwritten
  __syncthreads();
  float* sums = reinterpret_cast<float*>(stage);  // [WK - 1][WN][NT * 16][32 lanes]
  if (wk > 0) {
#pragma unroll
    for (int v = 0; v < NT * 16; ++v) sums[(((wk - 1) * WN + wn) * NT * 16 + v) * 32 + lane] = out[v / 16][v / 4 % 4][v % 4];
  }
  __syncthreads();
  if (wk != 0 || !strip_ok) return;
#pragma unroll
  for (int w = 1; w < WK; ++w)
#pragma unroll
    for (int v = 0; v < NT * 16; ++v) out[v / 16][v / 4 % 4][v % 4] += sums[(((w - 1) * WN + wn) * NT * 16 + v) * 32 + lane];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = (blockIdx.x * NT + nt) * 8 + 2 * t + (i & 1);
      if (row >= p.m) continue;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int64_t at = static_cast<int64_t>(row) * p.n + strip * kAwqTileStrip + 16 * w + g + 8 * (i >> 1);
        if (gridDim.z == 1) {
          static_cast<T*>(p.out)[at] = from_float<T>(out[nt][w][i]);
        } else {
          p.partials[static_cast<int64_t>(blockIdx.z) * p.m * p.n + at] = out[nt][w][i];
        }
      }
    }
}

template <typename T, int NT, int SPG>
__global__ void __launch_bounds__(kThreads, TileShape<NT>::kMinBlocks) awq_tiles_gemm_kernel(AwqTilesGemm p) {
  using S = TileShape<NT>;
  constexpr int WN = S::kWN, WK = S::kWK, CH = S::kChunk, D = kDepth;
  // Steps per unrolled block: one group on the fold path, folded after the block (past the join of its
  // two variants, where ptxas cannot overlap the fold with MMAs: overlapped, the two-tile kernels
  // needed more than 128 registers), else whole ring turns.
  constexpr int U = S::kFold ? SPG : D > SPG ? D : SPG;
  // Steps per refill batch (one cp.async group): batched, the waits, commits and the hazard guards
  // ptxas puts before a copy that follows a shared load (three predicated-off LDS) come once per batch.
  constexpr int R = U < 4 ? U : 4;
  static_assert(D % R == 0 && U % R == 0, "batches align with the ring and blocks");
  static_assert((U % D == 0 || D % U == 0) && U % SPG == 0 && CH % U == 0 && U % 2 == 0,
                "blocks align with the ring, the chunks and the pairs of steps");
  extern __shared__ __align__(16) uint32_t smem[];  // SharedLayout<NT, SPG>::kBytes
  uint32_t* const stage = smem;
  float* const sums = reinterpret_cast<float*>(smem + kSharedWords);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wn = warp % WN, wk = warp / WN;
  const int g = lane >> 2, t = lane & 3;
  const int n_strips = p.n / kAwqTileStrip, steps = p.k / kAwqTileStep, groups = p.k / p.group;
  const int splits = gridDim.z, slices = splits * WK;
  const int strip = blockIdx.y * WN + wn;
  const bool strip_ok = strip < n_strips;
  const Slice mine = slice_of(blockIdx.z * WK + wk, slices, groups, SPG);
  int longest = 0;
#pragma unroll
  for (int w = 0; w < WK; ++w) longest = max(longest, slice_of(blockIdx.z * WK + w, slices, groups, SPG).len);

  // a strip past N or an empty slice reads valid addresses (strip and step clamped) and discards them
  const int strip_in = min(strip, n_strips - 1), begin_in = min(mine.begin, steps - SPG);
  const uint4* wptr = reinterpret_cast<const uint4*>(p.weights) +
                      (static_cast<int64_t>(strip_in) * steps + begin_in) * 32 + lane;  // + step * 32
  // a group's scales (uint4) and zeros (uint32) of this lane: element group_at(group) of either
  const int group_stride = n_strips * 8;
  const int64_t group0 = static_cast<int64_t>(begin_in / SPG) * group_stride + strip_in * 8 + g;
  auto group_at = [&](int group) { return group0 + static_cast<int64_t>(group) * group_stride; };
  const uint4* const scales = reinterpret_cast<const uint4*>(p.scales);

  // Every load of a block is issued unconditionally (a step past the slice rereads its last step),
  // so that every path issues the same loads in the same order: ptxas then waits for the oldest load
  // only (a counted scoreboard wait) instead of for all of them, which cost one memory latency per step.
  const int last = max(mine.len - 1, 0), last_group = last / SPG;
  uint4* const ring = reinterpret_cast<uint4*>(smem + kStageTiles * kFragWords) + warp * D * 32 + lane;  // + slot * 32
#pragma unroll
  for (int j = 0; j < D; ++j) {
    copy_async(ring + j * 32, wptr + static_cast<int64_t>(min(j, last)) * 32);
    if (j % R == R - 1) commit_copies();
  }
  uint4 next_scales = S::kFold ? uint4{} : __ldg(scales + group0), group_scales;  // the group's scales and zeros
  uint32_t next_zeros = S::kFold ? 0u : __ldg(p.zeros + group0), group_zeros;
  // Launched as a programmatic dependent (dependent_launch.h): the weights above stream in while the
  // kernel before this one finishes; x, the outputs, partials and counters only after it has.
  start_as_dependent();

  float out[NT][4][4], acc[NT][4][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int w = 0; w < 4; ++w) out[nt][w][i] = acc[nt][w][i] = 0.f;
  uint32_t scale2[8], zero2[8];
  const uint32_t magic2 = Pair<T>::kMagic * 0x00010001u;

  // Steps r .. r + U - 1 of chunk c, unrolled. Steps past the slice (a dequantizing block, when groups
  // are shorter than U) multiply the zeros staged for them: they add exactly nothing. Unless kTail,
  // every refill (D steps ahead) and group of the block lies inside the slice: addressed unclamped, a
  // constant offset per step.
  auto block = [&](int c, int r, auto tail) {
    constexpr bool kTail = decltype(tail)::value;
    const int i0 = c * CH + r;  // this warp's step, relative to its slice: i0 + j, in ring slot i0 % D + j
    uint4* const slots = ring + (U % D == 0 ? 0 : i0 % D) * 32;
    const uint4* const refill = wptr + static_cast<int64_t>(i0 + D) * 32;  // + j * 32
    // B fragments of steps j, j + 1 (j even): the uint4 of lane, pair j / 2 and token tile nt, read per step
    // as uint2 (the uint4 held across two steps made the two-tile kernel spill on sm_80)
    const uint2* const frags = reinterpret_cast<const uint2*>(stage) + ((wk * CH + r) / 2 * NT * 32 + lane) * 2;
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int i = i0 + j;
      if (j % R == 0) wait_copies<D / R - 1>();  // steps i .. i + R - 1 have landed in their slots
      const uint4 words = slots[(j % D) * 32];
      if (j % R == R - 1) {  // the batch's slots, read, refilled D steps ahead
#pragma unroll
        for (int b = j + 1 - R; b <= j; ++b)
          copy_async(slots + (b % D) * 32, kTail ? wptr + static_cast<int64_t>(min(i0 + b + D, last)) * 32 : refill + b * 32);
        commit_copies();
      }
      if (j % SPG == 0 && S::kFold) {  // used at the group's end: loaded at its start
        const int64_t at = group_at(kTail ? min(i / SPG, last_group) : i / SPG);
        group_scales = __ldg(scales + at);
        group_zeros = __ldg(p.zeros + at);
      } else if (j % SPG == 0) {  // used now: loaded one group ahead
        const int64_t at = group_at(kTail ? min(i / SPG + 1, last_group) : i / SPG + 1);
        group_constants<T>(next_scales, next_zeros, scale2, zero2);
        next_scales = __ldg(scales + at);
        next_zeros = __ldg(p.zeros + at);
      }
      uint2 b[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) b[nt] = frags[(j / 2 * NT + nt) * 64 + j % 2];
#pragma unroll
      for (int w = 0; w < kLaneWords; ++w) {
        const uint32_t word = word_of(words, w);
        uint4 a;
        if (S::kFold) {
          a = make_uint4(raw_pair(word, 0, magic2), raw_pair(word, 1, magic2), raw_pair(word, 2, magic2),
                         raw_pair(word, 3, magic2));
        } else {
          a = make_uint4(dequant_pair<T>(word, 0, zero2[2 * w], scale2[2 * w], magic2),
                         dequant_pair<T>(word, 1, zero2[2 * w + 1], scale2[2 * w + 1], magic2),
                         dequant_pair<T>(word, 2, zero2[2 * w], scale2[2 * w], magic2),
                         dequant_pair<T>(word, 3, zero2[2 * w + 1], scale2[2 * w + 1], magic2));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma(S::kFold ? acc[nt][w] : out[nt][w], a, b[nt], T{});
      }
    }
  };

  const int chunks = (longest + CH - 1) / CH;
  const int len = strip_ok ? mine.len : 0;  // a strip past N computes nothing
  for (int c = 0; c < chunks; ++c) {
    __syncthreads();  // the previous chunk's fragments and sums are read
    stage_x<T, NT, SPG>(stage, sums, p, c, mine, wn, wk);
    __syncthreads();
    // a warp-uniform test per block: blocks start inside the slice; tail blocks clamp their reads
#pragma unroll 1
    for (int r = 0; r < CH && c * CH + r < len; r += U) {
      if (c * CH + r + U + D <= len) {
        block(c, r, std::false_type{});
      } else {
        block(c, r, std::true_type{});
      }
      if (S::kFold) fold_group<T, NT>(out, acc, sums + (wk * CH + r) / SPG * NT * 8 + 2 * t, group_scales, group_zeros);
    }
  }

  store_block<T, NT>(p, out, stage, wn, wk, strip, strip_ok);
  if (splits == 1) return;
  __threadfence();  // this block's partials are visible device-wide before it counts itself in
  __syncthreads();
  int& last_block = *reinterpret_cast<int*>(smem + kSharedWords - 1);  // the sums are read
  if (threadIdx.x == 0) {
    const int arrivals = gridDim.x * splits;  // every token block and split of this column block
    const int before = atomicAdd(p.locks + blockIdx.y, 1);
    last_block = before == arrivals - 1;
    if (last_block) p.locks[blockIdx.y] = 0;  // everyone has arrived: ready for the next call
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  reduce_partials<T, WN>(p, blockIdx.y, splits);
}

// One warp per (strip, step): its 16 x 64 block of W through shared memory, stored row by row (MMA
// input k of the step at its input of the pair, awq_tiles.h).
template <typename T>
__global__ void __launch_bounds__(kThreads) awq_tiles_dequantize_kernel(const uint32_t* __restrict__ weights,
                                                                       const void* __restrict__ scales,
                                                                       const uint32_t* __restrict__ zeros,
                                                                       T* __restrict__ w, int n, int k, int group) {
  __shared__ __align__(16) T block[kThreads / 32][kAwqTileStep][kAwqTileStrip];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n_strips = n / kAwqTileStrip, steps = k / kAwqTileStep;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + warp;
  if (id >= static_cast<int64_t>(n_strips) * steps) return;  // whole warps only: no block-wide sync below
  const int strip = static_cast<int>(id / steps), step = static_cast<int>(id % steps);
  const int grp = step * kAwqTileStep / group;
  const uint4 q = load_stream(reinterpret_cast<const uint4*>(weights) + id * 32 + lane);
  const uint4 s = __ldg(reinterpret_cast<const uint4*>(scales) + (static_cast<int64_t>(grp) * n_strips + strip) * 8 + g);
  const uint32_t z = __ldg(zeros + (static_cast<int64_t>(grp) * n_strips + strip) * 8 + g);
  uint32_t scale2[8], zero2[8];
  const uint32_t magic2 = Pair<T>::kMagic * 0x00010001u;
  group_constants<T>(s, z, scale2, zero2);
#pragma unroll
  for (int tile = 0; tile < kLaneWords; ++tile)
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      const int j = 2 * tile + (pair & 1);  // column 16 tile + g + 8 (pair & 1)
      const uint32_t v = dequant_pair<T>(word_of(q, tile), pair, zero2[j], scale2[j], magic2);
      T halves[2];
      memcpy(halves, &v, 4);
      // A fragment: inputs 2t (+1 in the high half) + 8 (pair >> 1)
      block[warp][2 * t + 8 * (pair >> 1)][16 * tile + g + 8 * (pair & 1)] = halves[0];
      block[warp][2 * t + 8 * (pair >> 1) + 1][16 * tile + g + 8 * (pair & 1)] = halves[1];
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 4; ++it) {  // 16 rows x 128 bytes: 4 x 16 bytes per lane
    const int chunk = it * 32 + lane, row = chunk / 8, c16 = chunk % 8;
    const int input = step / 2 * kAwqTilePair + 8 * ((row >> 1) & 3) + 4 * (step & 1) + 2 * (row >> 3) + (row & 1);
    const uint4 v = *reinterpret_cast<const uint4*>(&block[warp][row][8 * c16]);
    *reinterpret_cast<uint4*>(w + static_cast<int64_t>(input) * n + strip * kAwqTileStrip + 8 * c16) = v;
  }
}

// Past 48 KiB of shared memory (every variant: the x stage and the ring take 64 KiB): opted in per kernel
// and device at the first launch (allow_shared_memory, common.h). A programmatic dependent of the
// kernel before it on sm_90+.
template <typename T, int NT, int SPG>
void launch_gemm_kernel(const AwqTilesGemm& p, dim3 grid, cudaStream_t stream) {
  constexpr int bytes = SharedLayout<NT, SPG>::kBytes;
  allow_shared_memory<awq_tiles_gemm_kernel<T, NT, SPG>>(bytes);
  launch_dependent(awq_tiles_gemm_kernel<T, NT, SPG>, grid, dim3(kThreads), bytes, stream, p);
}

template <typename T, int NT>
void launch_gemm(const AwqTilesGemm& p, dim3 grid, cudaStream_t stream) {
  switch (p.group) {
    case 32: launch_gemm_kernel<T, NT, 2>(p, grid, stream); break;
    case 64: launch_gemm_kernel<T, NT, 4>(p, grid, stream); break;
    default: launch_gemm_kernel<T, NT, 8>(p, grid, stream); break;
  }
}

template <typename T>
void launch_gemm(const AwqTilesGemm& p, AwqTilesPlan plan, dim3 grid, cudaStream_t stream) {
  switch (plan.token_tiles) {
    case 1: launch_gemm<T, 1>(p, grid, stream); break;
    case 2: launch_gemm<T, 2>(p, grid, stream); break;
    default: launch_gemm<T, 4>(p, grid, stream); break;
  }
}

int warps_along_n(int token_tiles) { return token_tiles <= 2 ? TileShape<1>::kWN : TileShape<4>::kWN; }

}  // namespace

// Token tiles: 1 up to 8 tokens, 2 up to 16, else 4 (32 tokens per block). Split: the one of least
// modelled time, in units of one group per warp slice streamed by a fully occupied SM. Fit to the H100
// sweeps (docs/quant_awq.md, runs 5-7): an SM streams its blocks' bytes at one rate once it holds
// min_blocks blocks, 1.4x slower with fewer (too few loads in flight); more than one token tile costs
// 1.4x per byte (the MMAs and folds double); each round of min_blocks blocks on an SM costs a fixed
// overhead (staging x, the slice sums, the split counters: about 4 units the first round, 2 each
// further), and each split a quarter unit (the last block sums every split's partials). So splits
// fill idle SMs until their overhead outweighs the bytes.
AwqTilesPlan plan_awq_tiles_gemm(int m, int n, int k, int group, int sms, int split_override) {
  AwqTilesPlan plan{m <= 8 ? 1 : m <= 16 ? 2 : 4, 1};
  const int wn = warps_along_n(plan.token_tiles), wk = kThreads / 32 / wn;
  const int min_blocks = plan.token_tiles <= 2 ? TileShape<1>::kMinBlocks : TileShape<4>::kMinBlocks;
  const int groups = k / group;
  const int max_split = std::max(1, std::min(64, groups / wk));  // every warp keeps >= 1 group
  if (split_override > 0) {
    plan.split = std::min(split_override, max_split);
    return plan;
  }
  const int64_t blocks = static_cast<int64_t>((m + 8 * plan.token_tiles - 1) / (8 * plan.token_tiles)) *
                         ((n / kAwqTileStrip + wn - 1) / wn);
  const double per_byte = plan.token_tiles == 1 ? 1.0 : 1.4;
  double best = 0.0;
  for (int split = 1; split <= max_split; ++split) {
    const int64_t per_sm = (blocks * split + sms - 1) / sms;  // blocks on the busiest SM
    const int64_t slice = (groups + split * wk - 1) / (split * wk);  // groups per warp slice
    const int64_t rounds = (per_sm + min_blocks - 1) / min_blocks;
    const double cost = static_cast<double>(per_sm * slice) * per_byte * (per_sm >= min_blocks ? 1.0 : 1.4) + 4.0 +
                        2.0 * static_cast<double>(rounds - 1) + 0.25 * split;
    if (split == 1 || cost < best) {
      best = cost;
      plan.split = split;
    }
  }
  return plan;
}

void launch_awq_tiles_gemm(DType dtype, const AwqTilesGemm& p, AwqTilesPlan plan, cudaStream_t stream) {
  const dim3 grid((p.m + 8 * plan.token_tiles - 1) / (8 * plan.token_tiles),
                  (p.n / kAwqTileStrip + warps_along_n(plan.token_tiles) - 1) / warps_along_n(plan.token_tiles),
                  plan.split);
  if (dtype == DType::kFloat16) {
    launch_gemm<half_t>(p, plan, grid, stream);
  } else {
    launch_gemm<bf16_t>(p, plan, grid, stream);
  }
}

void launch_awq_tiles_dequantize(DType dtype, const uint32_t* weights, const void* scales, const uint32_t* zeros,
                                 void* w, int n, int k, int group, cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(n / kAwqTileStrip) * (k / kAwqTileStep);
  const dim3 grid(static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32)));
  if (dtype == DType::kFloat16) {
    awq_tiles_dequantize_kernel<half_t><<<grid, kThreads, 0, stream>>>(weights, scales, zeros, static_cast<half_t*>(w),
                                                                       n, k, group);
  } else {
    awq_tiles_dequantize_kernel<bf16_t><<<grid, kThreads, 0, stream>>>(weights, scales, zeros, static_cast<bf16_t*>(w),
                                                                       n, k, group);
  }
}

}  // namespace pagoda
