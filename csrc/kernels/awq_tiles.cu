// AWQ int4 x fp16/bf16 on tensor cores (mma.sync.m16n8k16, fp32 accumulation), weights in the
// tiles layout of awq_tiles.h. The Python emulation of every index below is
// plugins/quant_awq/tests/tile_emulator.py (CI checks it against the reference dequantization).
//
// Block: WN x WK warps (256 threads). Warp (wn, wk) owns strip n_block * WN + wn (64 columns) and
// K slice split * WK + wk (whole groups); blockIdx.x picks 16 * MT rows of x. Per step (16 inputs)
// a lane issues ONE 16-byte load (the warp: 512 contiguous bytes) holding its B fragments of the
// strip's eight n8 tiles; kDepth steps (and their groups' scales/zeros) are in flight per warp.
// Dequantization per B register: (word >> 4p) & 0x000F000F | MAGIC (two values + 1024 or 128,
// exact), minus (MAGIC + zero) (exact), times the scale (one rounding): three instructions.
// x is staged in shared memory per chunk of steps, already in A-fragment order (one 16-byte
// shared load per lane per step and m-tile). The WK slices of a block are summed in shared memory;
// with a K split, blocks write fp32 partials and the last to arrive at a column block (an atomic
// counter) sums them in split order (deterministic) and writes the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "awq_tiles.h"

namespace pagoda {

namespace {

constexpr int kThreads = 256;
// Steps in flight per warp: 8 for group 128, 4 for groups 32/64 (whose scales take more registers:
// one 20-byte slot per group in the window). A multiple of the steps per group.
template <int SPG>
constexpr int kDepth = SPG >= 8 ? 8 : 4;
constexpr int kStageSteps = 64;        // steps x m-tiles x WK of x staged per chunk (32 KiB)
constexpr int kLaneWords = 4;          // 16 bytes of int4 per lane per step
constexpr int kFragWords = 32 * 4;     // one step's A fragments (or B words) for a warp, in uint32

// Warps per block along N (WN) and K (WK) for MT m16 tiles per block.
template <int MT>
struct TileShape {
  static constexpr int kWN = MT == 1 ? 2 : 4;
  static constexpr int kWK = kThreads / 32 / kWN;
  static constexpr int kChunk = kStageSteps / (kWK * MT);  // steps per warp per staged chunk
  static constexpr int kMinBlocks = MT == 1 ? 2 : 1;
};

template <typename T>
struct Pair;
template <>
struct Pair<half_t> {
  using type = __half2;
  static constexpr uint32_t kMagic = 0x6400u;  // 1024.0: its mantissa unit is 1
};
template <>
struct Pair<bf16_t> {
  using type = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x4300u;  // 128.0
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

// d += a * b for one m16n8k16 tile (a: 4 registers of x, b: 2 registers of W); TYPE f16 or bf16.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define PAGODA_AWQ_MMA(TYPE) __trap()  // m16n8k16 needs sm_80; the host never launches it there
#else
#define PAGODA_AWQ_MMA(TYPE)                                                                                 \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
      "{%0,%1,%2,%3};\n"                                                                                    \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                       \
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1))
#endif
PAGODA_INLINE void mma(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1, half_t) { PAGODA_AWQ_MMA("f16"); }
PAGODA_INLINE void mma(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1, bf16_t) { PAGODA_AWQ_MMA("bf16"); }
#undef PAGODA_AWQ_MMA

// A streamed 16-byte load that skips L1 (every weight byte is read once per block).
PAGODA_INLINE uint4 load_stream(const uint4* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

PAGODA_INLINE uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// One group's constants for a lane: scale and MAGIC + zero of each of its eight tiles, both halves.
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

// (a & 0x000F000F) | magic2 in one instruction (nvcc otherwise emits two LOP3s, each with an immediate).
PAGODA_INLINE uint32_t mask_or(uint32_t a, uint32_t magic2) {
  uint32_t r;
  asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;\n" : "=r"(r) : "r"(a), "r"(magic2));  // 0xEA: (a & b) | c
  return r;
}

// B register `p` of a word: values at nibbles p and p + 4, dequantized. `magic2` holds MAGIC in both
// halves (in a register: see mask_or).
template <typename T>
PAGODA_INLINE uint32_t dequant_pair(uint32_t word, int p, uint32_t zero2, uint32_t scale2, uint32_t magic2) {
  using P = typename Pair<T>::type;
  const uint32_t v = mask_or(word >> (4 * p), magic2);
  return as_bits(__hmul2(__hsub2(as_pair<P>(v), as_pair<P>(zero2)), as_pair<P>(scale2)));
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

// Chunk c of x for every warp slice of the block, in A-fragment order:
// stage[((wk * kChunk + cs) * MT + mt) * 128 + lane * 4 + reg], reg = (row >= 8) + 2 * (col >= 8).
// Only rows below m are written: the kernel zeroes the stage once, and rows past m stay zero (at
// one token, 15 of every 16 rows).
template <typename T, int MT, int SPG>
__device__ void stage_x(uint32_t* stage, const AwqTilesGemm& p, int chunk, int slices, int groups) {
  using S = TileShape<MT>;
  constexpr int kItems = S::kWK * S::kChunk * MT * 32;  // (wk, step, m-tile, row, half of the step)
  const T* x = static_cast<const T*>(p.x);
  for (int item = threadIdx.x; item < kItems; item += kThreads) {
    const int h = item & 1, r = (item >> 1) & 15;
    int rest = item >> 5;
    const int mt = rest % MT;
    const int row = (blockIdx.x * MT + mt) * 16 + r;
    if (row >= p.m) continue;
    rest /= MT;
    const int cs = rest % S::kChunk, wk = rest / S::kChunk;
    const Slice s = slice_of(blockIdx.z * S::kWK + wk, slices, groups, SPG);
    const int local = chunk * S::kChunk + cs;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (local < s.len) {
      v = *reinterpret_cast<const uint4*>(x + row * p.x_stride + (s.begin + local) * kAwqTileStep + 8 * h);
    }
    uint32_t* dst = stage + ((wk * S::kChunk + cs) * MT + mt) * kFragWords + 4 * (4 * (r & 7)) + (r >> 3) + 2 * h;
    dst[0] = v.x;  // columns 8h + 0, 1: lane 4g + 0
    dst[4] = v.y;  // 8h + 2, 3: lane 4g + 1
    dst[8] = v.z;
    dst[12] = v.w;
  }
}

template <typename T>
PAGODA_INLINE void store_pair(T* out, float a, float b) {
  T v[2] = {from_float<T>(a), from_float<T>(b)};
  uint32_t bits;
  memcpy(&bits, v, 4);
  *reinterpret_cast<uint32_t*>(out) = bits;
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
    store_pair(out + static_cast<int64_t>(row) * p.n + col, sum.x, sum.y);
    store_pair(out + static_cast<int64_t>(row) * p.n + col + 2, sum.z, sum.w);
  }
}

template <typename T, int MT, int SPG>
__global__ void __launch_bounds__(kThreads, TileShape<MT>::kMinBlocks) awq_tiles_gemm_kernel(AwqTilesGemm p) {
  using S = TileShape<MT>;
  constexpr int WN = S::kWN, WK = S::kWK, CH = S::kChunk;
  constexpr int D = kDepth<SPG>;
  static_assert(D % SPG == 0 && CH % D == 0, "groups and chunks must align with the pipeline");
  static_assert((WK - 1) * WN * MT * 32 * 32 <= kStageSteps * kFragWords, "the slice sums reuse the stage");
  __shared__ __align__(16) uint32_t stage[kStageSteps * kFragWords];
  __shared__ int last_block;

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
  const int group0 = begin_in / SPG;
  const uint4* sptr = reinterpret_cast<const uint4*>(p.scales) + (static_cast<int64_t>(group0) * n_strips + strip_in) * 8 + g;
  const uint32_t* zptr = p.zeros + (static_cast<int64_t>(group0) * n_strips + strip_in) * 8 + g;  // + group * n_strips * 8

  // Every load is issued unconditionally (a step past the slice rereads its last step), so that
  // every path issues the same loads in the same order: ptxas then waits for the oldest load only
  // (a counted scoreboard wait) instead of for all of them, which cost one memory latency per step.
  uint4 wbuf[D];                // B words of steps i .. i + D - 1
  uint4 sbuf[D / SPG];          // scales of the groups starting in that window
  uint32_t zbuf[D / SPG];
  const int last = max(mine.len - 1, 0);
#pragma unroll
  for (int j = 0; j < D; ++j) {
    const int at = min(j, last);
    wbuf[j] = load_stream(wptr + static_cast<int64_t>(at) * 32);
    if (j % SPG == 0) {
      sbuf[j / SPG] = __ldg(sptr + static_cast<int64_t>(at / SPG) * n_strips * 8);
      zbuf[j / SPG] = __ldg(zptr + static_cast<int64_t>(at / SPG) * n_strips * 8);
    }
  }

  float acc[MT][8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][j][i] = 0.f;
  uint32_t scale2[8], zero2[8];
  const uint32_t magic2 = Pair<T>::kMagic * 0x00010001u;

  const int chunks = (longest + CH - 1) / CH;
  for (int i = threadIdx.x; i < kStageSteps * kFragWords / 4; i += kThreads) {
    reinterpret_cast<uint4*>(stage)[i] = make_uint4(0u, 0u, 0u, 0u);  // rows past m stay zero
  }
  for (int c = 0; c < chunks; ++c) {
    __syncthreads();  // the previous chunk's fragments are read
    stage_x<T, MT, SPG>(stage, p, c, slices, groups);
    __syncthreads();
    const uint4* frags = reinterpret_cast<const uint4*>(stage) + wk * CH * MT * 32 + lane;
    for (int r = 0; r < CH; r += D) {
#pragma unroll
      for (int j = 0; j < D; ++j) {
        const int i = c * CH + r + j;  // this warp's step, relative to its slice
        if (strip_ok && i < mine.len) {
          if (j % SPG == 0) group_constants<T>(sbuf[j / SPG], zbuf[j / SPG], scale2, zero2);
          uint4 a[MT];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) a[mt] = frags[((r + j) * MT + mt) * 32];
#pragma unroll
          for (int w = 0; w < kLaneWords; ++w) {
            const uint32_t word = word_of(wbuf[j], w);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int tile = 2 * w + half;
              const uint32_t b0 = dequant_pair<T>(word, 2 * half, zero2[tile], scale2[tile], magic2);
              const uint32_t b1 = dequant_pair<T>(word, 2 * half + 1, zero2[tile], scale2[tile], magic2);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) mma(acc[mt][tile], a[mt], b0, b1, T{});
            }
          }
        }
        const int next = min(i + D, last);  // refill this slot D steps ahead
        wbuf[j] = load_stream(wptr + static_cast<int64_t>(next) * 32);
        if (j % SPG == 0) {
          sbuf[j / SPG] = __ldg(sptr + static_cast<int64_t>(next / SPG) * n_strips * 8);
          zbuf[j / SPG] = __ldg(zptr + static_cast<int64_t>(next / SPG) * n_strips * 8);
        }
      }
    }
  }

  // Sum the WK slices of each strip into warp wk = 0 (the stage is free again).
  __syncthreads();
  float* sums = reinterpret_cast<float*>(stage);  // [WK - 1][WN][MT * 32][32 lanes]
  if (wk > 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) sums[(((wk - 1) * WN + wn) * MT * 32 + (mt * 8 + j) * 4 + i) * 32 + lane] = acc[mt][j][i];
  }
  __syncthreads();
  if (wk == 0 && strip_ok) {
#pragma unroll
    for (int w = 1; w < WK; ++w)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][j][i] += sums[(((w - 1) * WN + wn) * MT * 32 + (mt * 8 + j) * 4 + i) * 32 + lane];
    // C fragment: c0, c1 at (row g, columns 2t, 2t + 1); c2, c3 at row g + 8.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = (blockIdx.x * MT + mt) * 16 + g + 8 * hr;
          const int col = strip * kAwqTileStrip + 8 * j + 2 * t;
          if (row >= p.m) continue;
          const int64_t at = static_cast<int64_t>(row) * p.n + col;
          if (splits == 1) {
            store_pair(static_cast<T*>(p.out) + at, acc[mt][j][2 * hr], acc[mt][j][2 * hr + 1]);
          } else {
            *reinterpret_cast<float2*>(p.partials + static_cast<int64_t>(blockIdx.z) * p.m * p.n + at) =
                make_float2(acc[mt][j][2 * hr], acc[mt][j][2 * hr + 1]);
          }
        }
  }
  if (splits == 1) return;
  __threadfence();  // this block's partials are visible device-wide before it counts itself in
  __syncthreads();
  if (threadIdx.x == 0) {
    const int arrivals = gridDim.x * splits;  // every m-block and split of this column block
    const int before = atomicAdd(p.locks + blockIdx.y, 1);
    last_block = before == arrivals - 1;
    if (last_block) p.locks[blockIdx.y] = 0;  // everyone has arrived: ready for the next call
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  reduce_partials<T, WN>(p, blockIdx.y, splits);
}

// One warp per (strip, step): its 16 x 64 block of W through shared memory, stored row by row.
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
  for (int word = 0; word < kLaneWords; ++word)
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      const int tile = 2 * word + (pair >> 1), reg = pair & 1;
      const uint32_t v = dequant_pair<T>(word_of(q, word), pair, zero2[tile], scale2[tile], magic2);
      T halves[2];
      memcpy(halves, &v, 4);
      // B fragment: rows 2t (+1 in the high half) + 8 * reg, column g of tile `tile`
      block[warp][2 * t + 8 * reg][8 * tile + g] = halves[0];
      block[warp][2 * t + 8 * reg + 1][8 * tile + g] = halves[1];
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 4; ++it) {  // 16 rows x 128 bytes: 4 x 16 bytes per lane
    const int chunk = it * 32 + lane, row = chunk / 8, c16 = chunk % 8;
    const uint4 v = *reinterpret_cast<const uint4*>(&block[warp][row][8 * c16]);
    *reinterpret_cast<uint4*>(w + (static_cast<int64_t>(step) * kAwqTileStep + row) * n + strip * kAwqTileStrip + 8 * c16) = v;
  }
}

template <typename T, int MT>
void launch_gemm(const AwqTilesGemm& p, dim3 grid, cudaStream_t stream) {
  switch (p.group) {
    case 32: awq_tiles_gemm_kernel<T, MT, 2><<<grid, kThreads, 0, stream>>>(p); break;
    case 64: awq_tiles_gemm_kernel<T, MT, 4><<<grid, kThreads, 0, stream>>>(p); break;
    default: awq_tiles_gemm_kernel<T, MT, 8><<<grid, kThreads, 0, stream>>>(p); break;
  }
}

// Time model of one call with `split` K splits (seconds, H100-like constants): the weight bytes of
// the busiest wave at the bandwidth its blocks can draw, plus the partials written and read back.
double plan_cost(int m, int n, int k, int group, int sms, int m_tiles, int split) {
  constexpr double kBandwidth = 3.0e12, kBlockBandwidth = 40e9, kReduceFixed = 1.5e-6;
  const int wn = m_tiles == 1 ? TileShape<1>::kWN : TileShape<2>::kWN;
  const int wk = kThreads / 32 / wn, min_blocks = m_tiles == 1 ? TileShape<1>::kMinBlocks : TileShape<2>::kMinBlocks;
  const int64_t m_blocks = (m + 16 * m_tiles - 1) / (16 * m_tiles);
  const int64_t n_blocks = (n / kAwqTileStrip + wn - 1) / wn;
  const int64_t blocks = m_blocks * n_blocks * split, slots = static_cast<int64_t>(sms) * min_blocks;
  const int groups = k / group;
  const int64_t slice_groups = (groups + split * wk - 1) / (split * wk);
  const double block_bytes = static_cast<double>(slice_groups) * group * wn * kAwqTileStrip * wk / 2;
  const int64_t waves = (blocks + slots - 1) / slots, concurrent = std::min(blocks, slots);
  const double bandwidth = std::min(kBandwidth, concurrent * kBlockBandwidth);
  double seconds = waves * block_bytes * concurrent / bandwidth;
  if (split > 1) seconds += kReduceFixed + 2.0 * split * m * n * 4 / kBandwidth;
  return seconds;
}

}  // namespace

AwqTilesPlan plan_awq_tiles_gemm(int m, int n, int k, int group, int sms, int split_override) {
  AwqTilesPlan plan{m <= 16 ? 1 : 2, 1};
  const int wk = plan.m_tiles == 1 ? TileShape<1>::kWK : TileShape<2>::kWK;
  const int max_split = std::max(1, std::min(64, k / group / wk));  // every warp keeps >= 1 group
  if (split_override > 0) {
    plan.split = std::min(split_override, max_split);
    return plan;
  }
  double best = plan_cost(m, n, k, group, sms, plan.m_tiles, 1);
  for (int split = 2; split <= max_split; ++split) {
    const double cost = plan_cost(m, n, k, group, sms, plan.m_tiles, split);
    if (cost < best * 0.97) {  // a split must pay for itself clearly
      best = cost;
      plan.split = split;
    }
  }
  return plan;
}

void launch_awq_tiles_gemm(DType dtype, const AwqTilesGemm& p, AwqTilesPlan plan, cudaStream_t stream) {
  const int wn = plan.m_tiles == 1 ? TileShape<1>::kWN : TileShape<2>::kWN;
  const dim3 grid((p.m + 16 * plan.m_tiles - 1) / (16 * plan.m_tiles), (p.n / kAwqTileStrip + wn - 1) / wn,
                  plan.split);
  const bool half = dtype == DType::kFloat16;
  if (plan.m_tiles == 1) {
    half ? launch_gemm<half_t, 1>(p, grid, stream) : launch_gemm<bf16_t, 1>(p, grid, stream);
  } else {
    half ? launch_gemm<half_t, 2>(p, grid, stream) : launch_gemm<bf16_t, 2>(p, grid, stream);
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
