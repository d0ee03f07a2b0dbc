// Dense GEMV for decode steps of a few tokens: out [M, n] = x [M, k] @ w^T (+ bias), w [n, k] row major
// (nn.Linear's layout), fp32 sums, M <= kDenseGemvMaxTokens. Streaming the weights is the whole cost:
// S warps (1, 2 or 4, split-K) per R output rows, each over a contiguous share of k, lane l reading
// 16-byte chunks l, l + 32, ... of its share of each row, kBlock chunks of each row in flight while the
// block before them is multiplied (x, a few KiB shared by every warp, comes from L1); the S partial sums
// of a row meet in shared memory. Launched as a programmatic dependent (dependent_launch.h): the first
// two blocks of weights are requested before the wait, so a layer's weights stream while the kernel
// before it finishes, the first wave's blocks one after the other at a set rate (kPaceRate). Rounding: the
// sum in fp32, plus the bias in fp32, rounded once to T (as cuBLAS does).
#include <algorithm>

#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

namespace pagoda {

namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / PAGODA_WARP_SIZE;
constexpr int kBlock = 4;  // 16-byte chunks of each row per lane in flight
constexpr int kStride = kBlock * PAGODA_WARP_SIZE;  // chunks per block of a row

template <typename T, int R>
struct RowBlock {
  Vec<T, 8> chunk[R][kBlock];
};

// A 16-byte chunk of weights, each read once: past L1 on NVIDIA GPUs (x stays there), plain elsewhere.
// EARLY: read before the wait (load_before_wait: a read-only load would start only after it).
template <typename T, bool EARLY = false>
PAGODA_INLINE Vec<T, 8> load_once(const Vec<T, 8>* ptr) {
#if defined(__CUDA_ARCH__) && !defined(USE_ROCM)
  uint4 v;
  if constexpr (EARLY) {
    v = load_before_wait(ptr);
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  }
  Vec<T, 8> out;
  memcpy(&out, &v, sizeof(out));
  return out;
#else
  return *ptr;
#endif
}

// Chunks base + u * warp size + lane of each of the warp's rows (a chunk from `end` on, past the warp's
// share, rereads the one before `end`: loaded, never used).
template <typename T, int R, bool EARLY = false>
PAGODA_INLINE void load_block(RowBlock<T, R>& dst, const Vec<T, 8>* const (&rows)[R], int base, int end, int lane) {
#pragma unroll
  for (int u = 0; u < kBlock; ++u) {
    const int c = min(base + u * PAGODA_WARP_SIZE + lane, end - 1);
#pragma unroll
    for (int r = 0; r < R; ++r) dst.chunk[r][u] = load_once<T, EARLY>(rows[r] + c);
  }
}

template <typename T, int M, int R>
PAGODA_INLINE void multiply_block(float (&acc)[M][R], const RowBlock<T, R>& w, const T* x, int64_t x_stride,
                                  int base, int end, int lane) {
#pragma unroll
  for (int u = 0; u < kBlock; ++u) {
    const int c = base + u * PAGODA_WARP_SIZE + lane;
    if (c >= end) break;  // the chunks of a lane rise with u
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) wf[r][e] = to_float(w.chunk[r][u].val[e]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const Vec<T, 8> xv = load_vec<T, 8>(x + m * x_stride + static_cast<int64_t>(c) * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xf = to_float(xv.val[e]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] += xf * wf[r][e];
      }
    }
  }
}

// The chunks [begin, end) of each row that warp `part` of S sums: contiguous shares of whole 128-byte
// lines (8 chunks), so that every share starts on a line where the row does; the last share is
// shorter, a share past the row empty (begin = end = chunks). One warp takes the row whole. Also on the host
// (the pace sizes a block's early reads from it).
struct Share {
  int begin, end;
};
template <int S>
__host__ __device__ __forceinline__ Share share_of(int chunks, int part) {
  if constexpr (S == 1) return {0, chunks};
  const int size = ((chunks + S - 1) / S + 7) / 8 * 8;
  const int begin = min(part * size, chunks);
  return {begin, min(begin + size, chunks)};
}

// The S warps of a row group hand their sums to the group's first warp, which adds them in the order of
// k (S - 1 more fp32 additions). Every warp of the block reaches the barrier.
template <int S, int M, int R>
PAGODA_INLINE void combine_split(float (&sum)[M][R], int warp, int lane) {
  __shared__ float partial[kGemvWarps][M][R];
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) partial[warp][m][r] = sum[m][r];
  }
  __syncthreads();
  if (warp % S != 0) return;
#pragma unroll
  for (int p = 1; p < S; ++p)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) sum[m][r] += partial[warp + p][m][r];
}

// Paced early reads (pace_rate): block b < pace.blocks sleeps b * pace.cycles SM cycles before its early
// reads, so the first wave's requests reach memory at about a set rate instead of all at once, and the few
// dependent reads of the latency-bound kernel they overlap (attention, an LL sum) queue behind less of them.
// Off: cycles = 0.
struct Pace {
  int cycles, blocks;
};

PAGODA_INLINE void paced_start(Pace pace) {
#if defined(__CUDA_ARCH__) && !defined(USE_ROCM)
  if (pace.cycles == 0 || static_cast<int>(blockIdx.x) >= pace.blocks) return;
  const long long until = clock64() + static_cast<long long>(blockIdx.x) * pace.cycles;
  while (clock64() < until) __nanosleep(64);
#endif
}

// B: the blocks an SM must hold (__launch_bounds__'s minimum), 1 (no bound) or 4 (at most 64 registers a
// thread; one token at one row a warp needs 67-70 unbounded, so an SM holds 3 blocks, and fits in 64 without
// spilling).
template <typename T, int M, int R, int S, int B>
__global__ void __launch_bounds__(kGemvThreads, B) dense_gemv_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                  int64_t x_stride, const T* __restrict__ w,
                                                                  const T* __restrict__ bias, int n, int k,
                                                                  Pace pace) {
  static_assert(kGemvWarps % S == 0, "the S warps of a row group share one block");
  const int lane = threadIdx.x % PAGODA_WARP_SIZE, warp = threadIdx.x / PAGODA_WARP_SIZE;
  const int row0 = (blockIdx.x * (kGemvWarps / S) + warp / S) * R;
  const auto [begin, end] = share_of<S>(k / 8, warp % S);  // end >= 1: k >= 8
  const Vec<T, 8>* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const Vec<T, 8>*>(w + static_cast<int64_t>(min(row0 + r, n - 1)) * k);
  RowBlock<T, R> cur, next;
  paced_start(pace);
  load_block<T, R, true>(cur, rows, begin, end, lane);  // weights: written by no kernel, read before the wait
  load_block<T, R, true>(next, rows, begin + kStride, end, lane);
  start_as_dependent();
  float acc[M][R] = {};
  multiply_block<T, M, R>(acc, cur, x, x_stride, begin, end, lane);  // the first block, its successor requested
  cur = next;
  for (int base = begin + kStride; base < end; base += kStride) {
    load_block<T, R>(next, rows, base + kStride, end, lane);  // past the share: its last chunk, unused
    multiply_block<T, M, R>(acc, cur, x, x_stride, base, end, lane);
    cur = next;
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if constexpr (S > 1) {
    combine_split<S, M, R>(acc, warp, lane);
    if (warp % S != 0) return;
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = row0 + r;
      if (lane == m * R + r && row < n) {
        const float sum = acc[m][r];
        out[static_cast<int64_t>(m) * n + row] = from_float<T>(bias == nullptr ? sum : sum + to_float(bias[row]));
      }
    }
}

// Rows per warp: `requested` (1 or 2: the choice CsrcOps.tune timed for this shape), else 2 from 16384
// rows on.
inline int rows_per_warp(int n, int requested) { return requested != 0 ? requested : n >= 16384 ? 2 : 1; }

// A positive attribute of the current device, asked once per device into `known`; `fallback` if the
// runtime will not say.
template <typename Attr>
inline int device_attribute(int (&known)[64], Attr attr, int fallback) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return fallback;
  if (known[device] == 0) {
    int value = 0;
    const bool ok = cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess && value > 0;
    known[device] = ok ? value : fallback;
  }
  return known[device];
}

// SMs of the current device (an H100's 132 if the runtime will not say: only the choice of split and the
// pace's first wave rest on it).
inline int sm_count() {
  static int known[64] = {};
  return device_attribute(known, cudaDevAttrMultiProcessorCount, 132);
}

// Rows shorter than this (in 16-byte chunks: k < 7168) are not split: on an H100 (2026-11-27,
// benchmarks/results/h100_2026-11-27_round17/dense_gemv.json) splitting them lost up to 12% (1B qkv,
// TP=2 qkv: 2048- and 4096-wide rows), while long rows of few-row layers gained 5-10% (the down
// projections: 8B 48.4 -> 43.7 us, a TP=2 rank's 25.2 -> 23.8, the 1B's 16.1 -> 15.3).
constexpr int kMinSplitChunks = 7 * kStride;

// Warps a row group (split-K): `requested` (1, 2 or 4: the choice CsrcOps.tune timed for this shape; 0 for
// none), else the rule. A layer of long rows and under 32 rows an SM (4224 on an H100's 132) has too few warps
// streaming (each with kBlock chunks of a row in flight), each with a long chain of blocks: 2 warps a row group
// (4 under 16 rows an SM) bring it to 32-64 warps an SM. Counted in rows, not row groups, so that one or two
// rows a warp (CsrcOps.tune times both) sum in the same order.
inline int split_k(int rows, int chunks, int requested) {
  if (requested != 0) return requested;
  if (chunks < kMinSplitChunks) return 1;
  const int sms = sm_count();
  return rows < 16 * sms ? 4 : rows < 32 * sms ? 2 : 1;  // every share keeps 224 or more chunks
}

// Blocks of each row requested before the kernel waits for the one before it: two (a TP=2 rank's o
// projection, 256 chunks a row, then has all of its weights in flight while attention ends).
constexpr int kPreloadBlocks = 2;

#ifndef USE_ROCM  // pacing needs programmatic dependents (sm_90+)
// The early reads' rate in GB/s (bytes a ns). On 2 x H200 (2026-11-28) 2500 took 5-8% off the 8B's batch-1
// step at TP=2 and 3.5-4% at TP=1 in four pairs against no pace; 4000 nearly as much; 1500 little (the first
// wave then starts late).
constexpr int kPaceRate = 2500;

// SM cycles a ns of the current device (its clock rate; 1.98 if the runtime will not say).
inline double cycles_a_ns() {
  static int known[64] = {};
  return device_attribute(known, cudaDevAttrClockRate, 1980000) / 1e6;  // kHz
}

// The pace of a launch with `per_sm` blocks resident an SM: each block's early reads (kPreloadBlocks blocks
// of a warp's share of `share` chunks, R rows a warp) at kPaceRate, over the first wave (later blocks start
// after the wait anyway). Only for programmatic dependents: a plain launch reads nothing before the kernel
// before it has ended.
inline Pace pace_of(int R, int share, int per_sm) {
  if (!dependent_launch_enabled()) return {0, 0};
  const double bytes = double(kGemvWarps) * R * std::min(kPreloadBlocks * kStride, share) * 16;
  return {static_cast<int>(bytes / kPaceRate * cycles_a_ns()), per_sm * sm_count()};
}

// Blocks of `kernel` an SM holds (its registers and barriers decide), asked once per instantiation.
template <typename Kernel>
int blocks_an_sm(Kernel kernel) {
  int per_sm = 0;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvThreads, 0) == cudaSuccess ? per_sm : 1;
}
#endif

template <typename T, int M, int R, int S, int B>
void launch_bounded(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int n, int k, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kGemvWarps / S * R;
  const dim3 grid((n + kRowsPerBlock - 1) / kRowsPerBlock);
  auto kernel = dense_gemv_kernel<T, M, R, S, B>;
#ifdef USE_ROCM
  const Pace pace{0, 0};
#else
  static const int per_sm = blocks_an_sm(kernel);
  const Share first = share_of<S>(k / 8, 0);
  const Pace pace = pace_of(R, first.end - first.begin, per_sm);
#endif
  launch_dependent(kernel, grid, dim3(kGemvThreads), 0, stream, out, x, x_stride, w, bias, n, k, pace);
}

template <typename T, int M, int R, int S>
void launch_split(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int n, int k, cudaStream_t stream) {
  if constexpr (M == 1 && R == 1) {  // four blocks an SM (B = 4) instead of the three its registers allow
    launch_bounded<T, M, R, S, 4>(out, x, x_stride, w, bias, n, k, stream);
  } else {
    launch_bounded<T, M, R, S, 1>(out, x, x_stride, w, bias, n, k, stream);
  }
}

template <typename T, int M, int R>
void launch_rows(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int n, int k, int split,
                 cudaStream_t stream) {
  switch (split_k(n, k / 8, split)) {
    case 4: launch_split<T, M, R, 4>(out, x, x_stride, w, bias, n, k, stream); break;
    case 2: launch_split<T, M, R, 2>(out, x, x_stride, w, bias, n, k, stream); break;
    default: launch_split<T, M, R, 1>(out, x, x_stride, w, bias, n, k, stream); break;
  }
}

// Two rows a warp share each x load; a layer of few rows keeps one a warp, so that more warps stream.
template <typename T, int M>
void launch_tokens(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int n, int k, int split,
                   int rows, cudaStream_t stream) {
  if (rows_per_warp(n, rows) == 2) {
    launch_rows<T, M, 2>(out, x, x_stride, w, bias, n, k, split, stream);
  } else {
    launch_rows<T, M, 1>(out, x, x_stride, w, bias, n, k, split, stream);
  }
}

}  // namespace

void launch_dense_gemv(DType dtype, void* out, const void* x, int64_t x_stride, const void* weight, const void* bias,
                       int m, int n, int k, int split, int rows, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      auto* o = static_cast<T*>(out);
      const auto* xp = static_cast<const T*>(x);
      const auto* w = static_cast<const T*>(weight);
      const auto* b = static_cast<const T*>(bias);
      switch (m) {
        case 1: launch_tokens<T, 1>(o, xp, x_stride, w, b, n, k, split, rows, stream); break;
        case 2: launch_tokens<T, 2>(o, xp, x_stride, w, b, n, k, split, rows, stream); break;
        case 3: launch_tokens<T, 3>(o, xp, x_stride, w, b, n, k, split, rows, stream); break;
        default: launch_tokens<T, 4>(o, xp, x_stride, w, b, n, k, split, rows, stream); break;
      }
    }
  });
}

}  // namespace pagoda
