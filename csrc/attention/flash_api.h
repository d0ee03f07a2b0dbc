// Host launchers of Pagoda's FlashAttention-style kernels (no torch here: the .cu files build with
// plain nvcc; flash_bindings.cpp checks the tensors and fills FlashParams).
//
// The KV cache of one layer is [2, num_blocks, block_size, num_kv_heads, head_size] (head_size
// contiguous); a sequence's key j lives in block block_tables[seq][j / block_size], row
// j % block_size. Tokens of all sequences are packed: sequence s owns query tokens
// query_start_loc[s] .. query_start_loc[s + 1], the last query_len of its seq_lens[s] positions;
// the first num_decodes sequences are decodes (one query token, token index == sequence index).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagoda {
namespace flash {

enum class DType { kHalf, kBFloat16 };

struct FlashParams {
  const void* query;  // [num_tokens, num_heads, head_size]
  int64_t q_stride_token, q_stride_head;  // elements
  void* out;  // [num_tokens, num_heads, head_size]
  int64_t o_stride_token, o_stride_head;
  const void* k_cache;  // kv_cache[0]
  const void* v_cache;  // kv_cache[1]
  int64_t kv_stride_block, kv_stride_token, kv_stride_head;  // elements, shared by K and V
  const int* block_tables;  // [num_seqs, max_blocks]
  int64_t bt_stride;
  const int* query_start_loc;  // [num_seqs + 1]
  const int* seq_lens;  // [num_seqs]
  int num_heads, num_kv_heads, head_size, block_size;
  float scale_log2;  // softmax scale * log2(e): scores are exponentiated in base 2
  int window;  // sliding window (key j visible to query p iff p - window < j <= p); 0: none
  // decode only: split-KV partial results, [num_decodes, num_heads, num_splits, head_size] fp32
  // and [num_decodes, num_heads, num_splits] fp32 (log2-sum-exp); unused when num_splits == 1
  int num_splits;
  float* part_out;
  float* part_lse;
};

// Head sizes the kernels are instantiated for.
bool supports_head_size(int head_size);

// Query heads one decode CTA handles (all share one K/V read): the largest of 8/4/2/1 dividing
// num_heads / num_kv_heads. The decode grid is (num_decodes, num_heads / heads_per_cta, num_splits).
int decode_heads_per_cta(int num_heads, int num_kv_heads);

// Attention of sequences [0, num_decodes) (one query token each); with num_splits > 1 also
// launches the reduction. Returns the launch error, if any.
cudaError_t launch_decode(const FlashParams& p, int num_decodes, DType dtype, cudaStream_t stream);

// Query rows per prefill CTA (the grid bound below uses it).
constexpr int kPrefillBlockM = 64;

// Attention of sequences [first_seq, num_seqs): grid (num_query_tokens / kPrefillBlockM + number
// of those sequences, num_heads), an upper bound on their query blocks; each CTA finds its
// (sequence, block) on the device, so nothing here depends on the lengths' values.
cudaError_t launch_prefill(const FlashParams& p, int first_seq, int num_seqs, int num_query_tokens, DType dtype,
                           cudaStream_t stream);

}  // namespace flash
}  // namespace pagoda
