// The low-latency all-reduce kernel (protocol in ll_all_reduce.h): push every 8 bytes of this rank's
// partial sums with a flag into each peer's buffer, then sum the lines that arrive in one's own.
#include <algorithm>
#include <cstring>

#include "dependent_launch.h"
#include "ll_all_reduce.h"

namespace pagoda {
namespace {

constexpr int kLLThreads = 128;   // small blocks: a decode step's message spreads over many SMs
constexpr int kLLMaxBlocks = 512;  // all resident at once on the GPUs this runs on; larger messages loop

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

// The last block to finish publishes the epoch for the next call (every thread has read it by then).
PAGODA_INLINE void end_call(const LLGroup& g, uint32_t epoch) {
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
  void* own = buffer_of(g, g.rank);
  for (int64_t i = first; i < lines; i += stride) {
    float acc[kPerLine];
#pragma unroll
    for (int p = 0; p < kLLMaxRanks; ++p) {
      if (p >= g.world_size) break;
      const uint2 part = p == g.rank ? data[i] : await_line(line_at(own, g, epoch, p, i), epoch);
      T values[kPerLine];
      memcpy(values, &part, sizeof(part));
#pragma unroll
      for (int j = 0; j < kPerLine; ++j) acc[j] = p == 0 ? to_float(values[j]) : acc[j] + to_float(values[j]);
    }
    T sums[kPerLine];
#pragma unroll
    for (int j = 0; j < kPerLine; ++j) sums[j] = from_float<T>(acc[j]);
    uint2 out;
    memcpy(&out, sums, sizeof(out));
    data[i] = out;
  }
  end_call(g, epoch);
}

}  // namespace

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
