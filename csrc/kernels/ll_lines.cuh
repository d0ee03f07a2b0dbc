// Where a low-latency all-reduce's lines live (protocol in ll_all_reduce.h), for the kernels that push
// them: the all-reduce kernels, and the dense GEMV that sends a row-parallel layer's sums as it computes
// them (kernels/dense_gemv.cu). Device code without vendor instructions.
#pragma once

#include "ll_all_reduce.h"

namespace pagoda {

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

// The epoch of the call that sums what the kernel reads or writes now (after waiting for the kernel before).
PAGODA_INLINE uint32_t next_epoch(const LLGroup& g) { return *static_cast<volatile uint32_t*>(g.state) + 1; }

// Half `half` of message line `line` (its data bytes 4 * half .. 4 * half + 3) with the epoch's flag, into
// every peer's buffer: one 8-byte store each, which lands whole.
PAGODA_INLINE void push_half_line(const LLGroup& g, uint32_t epoch, int64_t line, int half, uint32_t data) {
  const unsigned long long bits = static_cast<unsigned long long>(epoch) << 32 | data;
#pragma unroll
  for (int p = 0; p < kLLMaxRanks; ++p) {
    if (p < g.world_size && p != g.rank) {
      auto* dst = reinterpret_cast<volatile unsigned long long*>(line_at(buffer_of(g, p), g, epoch, g.rank, line));
      dst[half] = bits;
    }
  }
}

}  // namespace pagoda
