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

// kv_cache [2, num_blocks, block_size, num_kv_heads, head_size]; key/value [num_tokens, num_kv_heads,
// head_size] (token and head strides free); slot_mapping [num_tokens] int64, negative slots skipped.
void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping);

// AWQ int4 GEMV for 1..8 tokens: x [m, K] fp16/bf16 (row stride free) @ dequant(W) -> [m, N] in x's dtype;
// qweight int32 [K, N/8], qzeros int32 [K/group, N/8] (AutoAWQ nibble order), scales fp16 [K/group, N].
at::Tensor awq_gemv(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                    const at::Tensor& scales, int64_t group_size);
