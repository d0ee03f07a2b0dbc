// The low-latency all-reduce kernels (protocol in ll_all_reduce.h): push every 8 bytes of this rank's
// partial sums with a flag into each peer's buffer, then sum the lines that arrive in one's own; alone,
// or fused with the residual add and RMSNorm that follow a row-parallel layer.
#include <algorithm>

#include "dependent_launch.h"
#include "ll_all_reduce.h"
#include "rms_norm.cuh"
#include "../vec.cuh"

namespace pagoda {
namespace {

constexpr int kLLThreads = 128;   // small blocks: a decode step's message spreads over many SMs
constexpr int kLLMaxBlocks = 512;  // all resident at once on the GPUs this runs on; larger messages loop
constexpr int kLLNormThreads = 1024;  // at most, per block (one row) of the fused variant, as fused_add_rms_norm

// Rank p's buffer (p < kLLMaxRanks; constant indices after unrolling keep `buffers` in parameter space).
PAGODA_INLINE void* buffer_of(const LLGroup& g, int p) {
  void* found = g.buffers[0];
#pragma unroll
  for (int q = 1; q < kLLMaxRanks; ++q) {
    if (q == p) found = g.buffers[q];
  }
  return found;
}

PAGODA_INLINE uint4* line_at(void* buffer, const LLGroup& g, uint32_t epoch, int sender, int64_t line) {
  const int64_t region = static_cast<int64_t>(epoch & 1) * g.world_size + sender;
  return static_cast<uint4*>(buffer) + region * g.max_lines + line;
}

// One 16-byte store: the 8 data bytes, each half with the flag (each 8-byte half lands whole).
PAGODA_INLINE void push_line(uint4* dst, uint2 data, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(data.x), "r"(flag),
               "r"(data.y), "r"(flag)
               : "memory");
}

// Polls a line of one's own buffer until both halves carry `flag`; returns its 8 data bytes.
PAGODA_INLINE uint2 await_line(const uint4* src, uint32_t flag) {
  uint32_t lo, lo_flag, hi, hi_flag;
  do {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(lo), "=r"(lo_flag), "=r"(hi), "=r"(hi_flag)
                 : "l"(src)
                 : "memory");
  } while (lo_flag != flag || hi_flag != flag);
  return make_uint2(lo, hi);
}

// The N elements of T held in `bits` (8 or 16 bytes), in registers (no local-memory round trip).
template <typename T, int N, typename Bits>
PAGODA_INLINE Vec<T, N> bit_cast_vec(const Bits& bits) {
  static_assert(sizeof(Bits) == sizeof(Vec<T, N>), "sizes differ");
  return *reinterpret_cast<const Vec<T, N>*>(&bits);
}

// Called by every thread after its pushes, before it polls: once the block's threads have all read the
// call's epoch, thread 0 counts the block in; the last block to arrive publishes the epoch for the next
// call (which reads it only after this one ended) while every block goes on polling, so the count's
// round trip overlaps the wait for the peers' lines instead of ending the call.
PAGODA_INLINE void arrive(const LLGroup& g, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&g.state[1], 1u) == gridDim.x - 1) {
    g.state[1] = 0;
    g.state[0] = epoch;
  }
}

template <typename T>
__global__ void __launch_bounds__(kLLThreads) ll_all_reduce_kernel(T* __restrict__ x, int64_t lines,
                                                                   const LLGroup g) {
  constexpr int kPerLine = 8 / sizeof(T);
  wait_for_prior_grids();  // x comes from the kernel before; so does state[0] (the last call's end)
  const uint32_t epoch = *static_cast<volatile uint32_t*>(g.state) + 1;
  allow_dependents_to_start();
  uint2* data = reinterpret_cast<uint2*>(x);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = first; i < lines; i += stride) {
    const uint2 mine = data[i];
#pragma unroll
    for (int p = 0; p < kLLMaxRanks; ++p) {
      if (p < g.world_size && p != g.rank) push_line(line_at(buffer_of(g, p), g, epoch, g.rank, i), mine, epoch);
    }
  }
  arrive(g, epoch);
  void* own = buffer_of(g, g.rank);
  for (int64_t i = first; i < lines; i += stride) {
    float acc[kPerLine];
#pragma unroll
    for (int j = 0; j < kPerLine; ++j) acc[j] = -0.0f;  // -0 + v is v for every v (+0 included)
#pragma unroll
    for (int p = 0; p < kLLMaxRanks; ++p) {
      if (p >= g.world_size) break;
      const uint2 part = p == g.rank ? data[i] : await_line(line_at(own, g, epoch, p, i), epoch);
      const auto values = bit_cast_vec<T, kPerLine>(part);
#pragma unroll
      for (int j = 0; j < kPerLine; ++j) acc[j] += to_float(values.val[j]);
    }
    Vec<T, kPerLine> sums;
#pragma unroll
    for (int j = 0; j < kPerLine; ++j) sums.val[j] = from_float<T>(acc[j]);
    data[i] = *reinterpret_cast<const uint2*>(&sums);
  }
}

// One thread's 16 bytes of this rank's row (two lines), summed with every peer's in rank order in fp32.
template <typename T, int V>
PAGODA_INLINE void sum_chunk(const LLGroup& g, void* own, uint32_t epoch, uint4 mine, int64_t line, float (&acc)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = -0.0f;  // -0 + v is v for every v (+0 included)
#pragma unroll
  for (int p = 0; p < kLLMaxRanks; ++p) {
    if (p >= g.world_size) break;
    uint4 part = mine;
    if (p != g.rank) {
      const uint2 lo = await_line(line_at(own, g, epoch, p, line), epoch);
      const uint2 hi = await_line(line_at(own, g, epoch, p, line + 1), epoch);
      part = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
    const auto values = bit_cast_vec<T, V>(part);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += to_float(values.val[j]);
  }
}

// Block b owns row b of x/residual [num_tokens, hidden]; thread i its 16-byte chunks i, i + blockDim, ...
// (C at most; lines 2c and 2c + 1 of chunk c), held in registers from the first read to the last write:
// the weights are requested before the wait, x and the residual together right after it, and nothing
// is read twice. Rounding and the order of the sums of squares follow the unfused sequence (an all-reduce
// into the dtype, then kernels/layernorm.cu's fused_add_rms_norm with the same block size), so at two
// ranks the result is bit for bit the unfused one.
template <typename T, int C>
__global__ void __launch_bounds__(kLLNormThreads) ll_all_reduce_add_rms_norm_kernel(
    T* __restrict__ x, T* __restrict__ residual, const T* __restrict__ weight, int hidden, float eps,
    const LLGroup g) {
  constexpr int V = 16 / sizeof(T);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const int64_t first_line = base * static_cast<int64_t>(sizeof(T)) / 8;
  const int chunks = hidden / V;
  uint4* row = reinterpret_cast<uint4*>(x + base);
  Vec<T, V> w[C], res[C];
  uint4 mine[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c < chunks) w[j] = bit_cast_vec<T, V>(load_before_wait(weight + c * V));  // written by no kernel
  }
  wait_for_prior_grids();  // x (partial sums), residual and state[0] come from kernels before
  const uint32_t epoch = *static_cast<volatile uint32_t*>(g.state) + 1;
  allow_dependents_to_start();  // the next kernel (a GEMV) may request its first weights now
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= chunks) break;
    mine[j] = row[c];
    res[j] = load_vec<T, V>(residual + base + c * V);
#pragma unroll
    for (int p = 0; p < kLLMaxRanks; ++p) {
      if (p < g.world_size && p != g.rank) {
        uint4* dst = line_at(buffer_of(g, p), g, epoch, g.rank, first_line + 2 * c);
        push_line(dst, make_uint2(mine[j].x, mine[j].y), epoch);
        push_line(dst + 1, make_uint2(mine[j].z, mine[j].w), epoch);
      }
    }
  }
  arrive(g, epoch);
  void* own = buffer_of(g, g.rank);
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= chunks) break;
    float acc[V];
    sum_chunk<T, V>(g, own, epoch, mine[j], first_line + 2 * c, acc);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      res[j].val[e] = from_float<T>(to_float(from_float<T>(acc[e])) + to_float(res[j].val[e]));
      const float f = to_float(res[j].val[e]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / hidden + eps);
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= chunks) break;
    store_vec<T, V>(residual + base + c * V, res[j]);
    store_vec<T, V>(x + base + c * V, rms_normed(res[j], w[j], inv_rms));
  }
}

}  // namespace

void launch_ll_all_reduce_add_rms_norm(DType dtype, void* x, void* residual, const void* weight, int64_t num_tokens,
                                       int hidden, float eps, const LLGroup& group, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int chunks = hidden / (16 / static_cast<int>(sizeof(T)));
    const int threads = warp_threads(chunks, kLLNormThreads);
    static_assert(kLLNormMaxRowBytes == 2 * 16 * kLLNormThreads, "rows of up to two chunks a thread");
    const auto kernel = chunks <= kLLNormThreads ? ll_all_reduce_add_rms_norm_kernel<T, 1>
                                                 : ll_all_reduce_add_rms_norm_kernel<T, 2>;
    launch_dependent(kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(threads), 0,
                     stream, static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), hidden,
                     eps, group);
  });
}

void launch_ll_all_reduce(DType dtype, void* x, int64_t numel, const LLGroup& group, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t lines = numel * static_cast<int64_t>(sizeof(T)) / 8;
    const int blocks = static_cast<int>(std::min<int64_t>(kLLMaxBlocks, (lines + kLLThreads - 1) / kLLThreads));
    launch_dependent(ll_all_reduce_kernel<T>, dim3(blocks), dim3(kLLThreads), 0, stream, static_cast<T*>(x), lines,
                     group);
  });
}

}  // namespace pagoda
