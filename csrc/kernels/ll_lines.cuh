// The lines of the low-latency all-reduce (protocol in ll_all_reduce.h) as the kernels that push them see
// them: kernels/ll_all_reduce.cu's sums, and kernels/dense_gemv.cu's GEMV that pushes its output as it
// goes (launch_dense_gemv_pushing). NVIDIA only (PTX volatile 16-byte stores).
#pragma once

#include <cstdint>

#include "../compat.h"
#include "ll_all_reduce.h"

namespace pagoda {

// Rank p's buffer (p < kLLMaxRanks; constant indices after unrolling keep `buffers` in parameter space).
PAGODA_INLINE void* ll_buffer_of(const LLGroup& g, int p) {
  void* found = g.buffers[0];
#pragma unroll
  for (int q = 1; q < kLLMaxRanks; ++q) {
    if (q == p) found = g.buffers[q];
  }
  return found;
}

PAGODA_INLINE uint4* ll_line_at(void* buffer, const LLGroup& g, uint32_t epoch, int sender, int64_t line) {
  const int64_t region = static_cast<int64_t>(epoch & 1) * g.world_size + sender;
  return static_cast<uint4*>(buffer) + region * g.max_lines + line;
}

// The epoch of the call now due: read after waiting for the kernels before (the last call's end set it).
PAGODA_INLINE uint32_t ll_epoch(const LLGroup& g) { return *static_cast<volatile uint32_t*>(g.state) + 1; }

// One 16-byte store: the 8 data bytes, each half with the flag (each 8-byte half lands whole).
PAGODA_INLINE void ll_push_line(uint4* dst, uint2 data, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(data.x), "r"(flag),
               "r"(data.y), "r"(flag)
               : "memory");
}

// Line `line` of this rank's message (its 8 bytes `data`) into region (epoch % 2, rank) of every peer.
PAGODA_INLINE void ll_push_to_peers(const LLGroup& g, uint32_t epoch, int64_t line, uint2 data) {
#pragma unroll
  for (int p = 0; p < kLLMaxRanks; ++p) {
    if (p < g.world_size && p != g.rank) ll_push_line(ll_line_at(ll_buffer_of(g, p), g, epoch, g.rank, line), data, epoch);
  }
}

}  // namespace pagoda
