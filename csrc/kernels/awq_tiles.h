// AWQ int4 weights in the "tiles" layout (pagoda_quant_awq/tiles.py): a tensor-core GEMM for any
// number of tokens and a dequantize-to-dense kernel. Torch-free (raw pointers, a DType, a stream).
//
// Layout (repacked once at load from AutoAWQ's GEMM format): weights uint32 [n/64, k/16, 32, 4]:
// strip (64 output columns), step (16 inputs), lane, word: the 16 bytes one lane needs for the
// A fragments of four m16n8k16 MMAs (word w: columns 16w..16w+15). The inputs of each pair of steps
// are permuted (MMA input k = 2t + h + 8r of step s is input 8t + 4s + 2r + h of the pair) so that a
// lane's B fragments of both steps are 8 contiguous activations. scales [k/g, n/64, 8, 8] in the
// activation dtype (group, strip, groupID, j: column 8j + groupID); zeros uint32 [k/g, n/64, 8]
// (nibble j: that column's zero point).
#pragma once

#include <cstdint>

#include "common.h"

namespace pagoda {

constexpr int kAwqTileStrip = 64;  // output columns per warp
constexpr int kAwqTileStep = 16;   // inputs per MMA step
constexpr int kAwqTilePair = 32;   // inputs per permuted pair of steps (groups are whole pairs)

struct AwqTilesGemm {
  const void* x;            // [m, k] fp16/bf16; rows x_stride elements apart; 16-byte aligned rows
  int64_t x_stride;
  const uint32_t* weights;  // [n/64, k/16, 32, 4]
  const void* scales;       // [k/g, n/64, 8, 8], x's dtype
  const uint32_t* zeros;    // [k/g, n/64, 8]
  void* out;                // [m, n] contiguous, x's dtype
  float* partials;          // [split, m, n] fp32 scratch when split > 1, else unused
  int* locks;               // [n/64] arrival counters: zero on entry, left zero on exit
  int m, n, k, group;
};

// How one call is cut: 8-token tiles per block (1, 2 or 4) and the number of K splits.
struct AwqTilesPlan {
  int token_tiles;
  int split;
};

// The plan for an [m, k] x [k, n] product on `sms` SMs; split_override > 0 forces the split
// (clamped to what the shape allows).
AwqTilesPlan plan_awq_tiles_gemm(int m, int n, int k, int group, int sms, int split_override);

// out = x @ W. dtype: kFloat16 or kBFloat16. group: 32, 64 or 128.
void launch_awq_tiles_gemm(DType dtype, const AwqTilesGemm& p, AwqTilesPlan plan, cudaStream_t stream);

// w [k, n] contiguous (dtype) = the dequantized weights, as the GEMM computes them.
void launch_awq_tiles_dequantize(DType dtype, const uint32_t* weights, const void* scales, const uint32_t* zeros,
                                 void* w, int n, int k, int group, cudaStream_t stream);

}  // namespace pagoda
