// The host entry points of the csrc kernels (bound to Python in bindings.cpp).
#pragma once

#include <torch/types.h>

// out[t] = weight * rms_norm(input[t]); input [num_tokens, hidden] (row stride free), out contiguous.
void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps);

// In place: residual <- input + residual, input <- weight * rms_norm(residual). Both contiguous.
void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps);

// In place on query [num_tokens, num_heads * head_size] and key [num_tokens, num_kv_heads * head_size]
// (row strides free); cos_sin_cache [max_position, rot_dim]: cos half then sin half.
void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key, int64_t head_size,
                      const at::Tensor& cos_sin_cache, bool is_neox);

// out [num_tokens, d] = silu(input[:, :d]) * input[:, d:]; input [num_tokens, 2 * d] (row stride free).
void silu_and_mul(at::Tensor& out, const at::Tensor& input);

// out [num_tokens, hidden] (contiguous): row ids[t] - start of weight [rows, hidden] (contiguous) where
// 0 <= ids[t] - start < rows, else zeros; ids int64 [num_tokens] (a vocab-parallel rank's share of the embedding).
void masked_embedding(at::Tensor& out, const at::Tensor& ids, const at::Tensor& weight, int64_t start);

// out [m, n] = x [m, k] @ weight^T (+ bias) for 1..4 tokens of a dense layer (weight [n, k], nn.Linear's
// layout), fp16/bf16, rows 16-byte aligned; the sum in fp32, rounded once. split: warps sharing each
// row's k (1, 2 or 4; for tests and benchmarks), 0 for the kernel's rule.
at::Tensor dense_gemv(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                      int64_t split, int64_t rows);

// kv_cache [2, num_blocks, block_size, num_kv_heads, head_size]; key/value [num_tokens, num_kv_heads,
// head_size] (token and head strides free); slot_mapping [num_tokens] int64, negative slots skipped.
void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping);

#ifndef USE_ROCM  // kernels/cache_fp8.cu uses cuda_fp8.h (nvidia_only in manifest.txt)
// The same into an FP8 cache (float8_e4m3fn or float8_e5m2): key / k_scale and value / v_scale saturated to
// the format's largest finite value, rounded to nearest even; k_scale, v_scale one-element float32 CUDA tensors.
void reshape_and_cache_fp8(const at::Tensor& key, const at::Tensor& value, at::Tensor& kv_cache,
                           const at::Tensor& slot_mapping, const at::Tensor& k_scale, const at::Tensor& v_scale);
#endif

// AWQ int4 GEMV for 1..8 tokens: x [m, K] fp16/bf16 (row stride free) @ dequant(W) -> [m, N] in x's dtype;
// qweight int32 [K, N/8], qzeros int32 [K/group, N/8] (AutoAWQ nibble order), scales fp16 [K/group, N].
at::Tensor awq_gemv(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                    const at::Tensor& scales, int64_t group_size);

#ifndef USE_ROCM  // kernels/awq_tiles.cu uses mma.sync (nvidia_only in manifest.txt)
// AWQ int4 in the tiles layout (pagoda_quant_awq.tiles.repack) on tensor cores, any number of tokens:
// x [m, K] fp16/bf16 (rows 16-byte aligned) -> [m, N]; weights int32 [N/64, K/16, 32, 4], scales
// [K/group, N/64, 8, 8] in x's dtype, zeros int32 [K/group, N/64, 8], locks int32 [N/64] (zeros, left
// zero). split_k 0: the kernel's own plan; > 0 forces the number of K splits.
at::Tensor awq_tiles_gemm(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& scales,
                          const at::Tensor& zeros, at::Tensor& locks, int64_t group_size, int64_t split_k);
// The tiles dequantized to W [K, N] in the scales' dtype (for the dense-matmul path of large batches).
at::Tensor awq_tiles_dequantize(const at::Tensor& weights, const at::Tensor& scales, const at::Tensor& zeros,
                                int64_t group_size);
// (m16 tiles per block, K splits) that awq_tiles_gemm uses for this shape on `device`.
std::vector<int64_t> awq_tiles_plan(int64_t m, int64_t n, int64_t k, int64_t group_size, int64_t split_k,
                                    int64_t device);
#endif

#ifndef USE_ROCM  // csrc/attention uses mma.sync and cp.async (nvidia_only in manifest.txt)
// Paged attention (flash kernels, fp16/bf16, head sizes 64/128/256): decodes are sequences
// [0, num_decodes) (one query token each, split-KV over num_splits slices with fp32 scratch part_out
// [num_decodes, num_heads, num_splits, head_size] and part_lse [.., num_splits] when num_splits > 1),
// then prefills; or, with short_query_len > 0 (every sequence has at most that many query tokens: a
// verify step), all sequences on the decode kernel, the scratch then [num_tokens, ...]. query/out [num_tokens, num_heads, head_size]; kv_cache [2, num_blocks, block_size,
// num_kv_heads, head_size]; block_tables [num_seqs, max_blocks], query_start_loc [num_seqs + 1] and
// seq_lens [num_seqs] int32; window 0: none. An FP8 kv_cache (float8_e4m3fn / float8_e5m2) holds key / k_scale
// and value / v_scale (one-element float32 tensors, required then). No host synchronisation.
void flash_attention(at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache,
                     const at::Tensor& block_tables, const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
                     int64_t num_decodes, double scale, int64_t window, int64_t num_splits,
                     const c10::optional<at::Tensor>& part_out, const c10::optional<at::Tensor>& part_lse,
                     int64_t short_query_len, const c10::optional<at::Tensor>& k_scale,
                     const c10::optional<at::Tensor>& v_scale);
// Decode programs resident per SM on `device` for this head size and dtype (0: unknown).
int64_t flash_decode_programs_per_sm(int64_t head_size, bool half, int64_t device);
#endif

#ifndef USE_ROCM  // kernels/ll_all_reduce.cu uses PTX volatile 16-byte stores and loads (nvidia_only in manifest.txt)
// Low-latency all-reduce over peer memory, in place on contiguous x (at most max_bytes, a multiple of
// 8 bytes): peers is a host int64 tensor [world_size] of each rank's symmetric buffer as mapped here,
// state a zeroed device int32 [2] owned by this rank. Every rank calls it with the same shapes in the
// same order.
void ll_all_reduce(at::Tensor& x, const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t max_bytes);
// Fused with the residual add and RMSNorm after it, in place on contiguous [num_tokens, hidden] (rows of a
// multiple of 16 bytes, 16-byte aligned): residual += sum of x over the ranks; x = rms_norm(residual) *
// weight, rounded as fused_add_rms_norm after an all-reduce.
void ll_all_reduce_add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps,
                                const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t max_bytes);
// Bytes of one rank's buffer for messages up to max_bytes on world_size ranks.
int64_t ll_all_reduce_buffer_bytes(int64_t max_bytes, int64_t world_size);
#endif
