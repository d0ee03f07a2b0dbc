// Host entry points of the flash attention kernels (torch-free: raw pointers, a DType, a stream).
// The torch layer (attention_flash_kernels.cpp) checks tensors and fills these structs.
//
// Layouts (strides in elements, the last dimension contiguous, rows 16-byte aligned):
//   query / out   [num_tokens, num_heads, head_size]
//   cache halves  [num_blocks, block_size, num_kv_heads, head_size] (K at k_cache, V at v_cache), in the
//                 query's dtype or FP8 (kv_format; strides in elements of the cache, rows 8-byte aligned)
//   block_tables  [num_seqs, max_blocks] int32, query_start_loc [num_seqs + 1] int32, seq_lens [num_seqs] int32
// Sequence i owns query tokens query_start_loc[i]..query_start_loc[i+1], the last of its seq_lens[i]
// context positions (causal). The first num_decodes sequences have one query token each, at tokens
// 0..num_decodes-1.
#pragma once

#include <cstdint>

#include "../kernels/common.h"

namespace pagoda {

struct FlashAttentionArgs {
  const void* query;
  void* out;
  const void* k_cache;
  const void* v_cache;
  const int32_t* block_tables;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  int64_t q_stride_token, q_stride_head, o_stride_token, o_stride_head;
  int64_t cache_stride_block, cache_stride_token, cache_stride_head;
  int64_t block_table_stride;
  int num_heads, num_kv_heads, head_size, block_size;
  float scale;
  int window;  // sliding window in tokens (a query sees keys pos - window + 1 .. pos); 0: none
  // kModel: the cache holds the query's dtype. FP8 (e4m3/e5m2): it holds key / k_scale and value / v_scale
  // (float32 scalars on the device), widened to the query's dtype in shared memory, the scales folded into
  // the softmax scale and the output.
  KVFormat kv_format;
  const float* k_scale;
  const float* v_scale;
};

// Head sizes with compiled kernels (both entry points) and the tile sizes the Python side needs.
bool flash_supports_head_size(int head_size);
constexpr int kFlashPrefillBlockM = 128;  // query tokens per prefill program (grid size)

// Prefill / chunked prefill of sequences [num_decodes, num_seqs): grid (num_prefill_tokens / 128 +
// num_prefills, num_heads); the program of each query block is found on the device.
void launch_flash_prefill(DType dtype, const FlashAttentionArgs& args, int num_decodes, int num_seqs,
                          int64_t num_prefill_tokens, cudaStream_t stream);

// What one launch of the decode kernel covers: sequences [seq_lo, seq_lo + num_seqs), whose query tokens
// are [token_lo, token_lo + num_tokens), each sequence at most query_p of them (1: decodes; a verify
// step's k + 1: short queries, causal among themselves).
struct DecodeRange {
  int seq_lo, num_seqs, token_lo, num_tokens, query_p;
};

// Decode (or short queries) of a DecodeRange: grid (num_seqs * ceil(query_p * group / 16), num_kv_heads,
// num_splits). With num_splits > 1 each split writes fp32 partial outputs part_out [num_tokens,
// num_heads, num_splits, head_size] and log2-sum-exp part_lse [num_tokens, num_heads, num_splits],
// and a second kernel combines them. Launch shapes depend only on the range's sizes, num_splits and
// the spec: safe to capture in a CUDA graph.
void launch_flash_decode(DType dtype, const FlashAttentionArgs& args, const DecodeRange& range, int num_splits,
                         float* part_out, float* part_lse, cudaStream_t stream);

// Decode programs resident per SM of the current device (the occupancy the runtime reports for the
// kernel of this dtype and head size; 0 if unknown), for planning the split count.
int flash_decode_programs_per_sm(DType dtype, int head_size);

}  // namespace pagoda
