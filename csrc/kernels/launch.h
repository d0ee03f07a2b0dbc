// The kernel layer's entry points: raw pointers, a DType and a stream; no torch headers, so these
// files compile with nvcc or hipcc alone. The torch layer (*_kernels.cpp) checks tensors and calls them.
// Pointers to half/bfloat16 data point at half_t/bf16_t (the same bits as at::Half/at::BFloat16).
#pragma once

#include <cstdint>

#include "common.h"

namespace pagoda {

// out [num_tokens, hidden] contiguous = weight * rms_norm(input); input rows are input_stride apart.
void launch_rms_norm(DType dtype, void* out, const void* input, const void* weight, int64_t input_stride,
                     int64_t num_tokens, int hidden, float eps, cudaStream_t stream);

// In place on contiguous [num_tokens, hidden]: residual <- input + residual; input <- weight * rms_norm(residual).
void launch_fused_add_rms_norm(DType dtype, void* input, void* residual, const void* weight, int64_t num_tokens,
                               int hidden, float eps, cudaStream_t stream);

// In place on query [num_tokens, q_stride] and key [num_tokens, k_stride]; cos_sin_cache
// [max_position, rot_dim] is float32 (float_cache) or dtype.
struct RotaryShape {
  int64_t num_tokens, q_stride, k_stride;
  int rot_dim, num_heads, num_kv_heads, head_size;
};
void launch_rotary_embedding(DType dtype, bool float_cache, const int64_t* positions, void* query, void* key,
                             const void* cos_sin_cache, RotaryShape shape, bool is_neox, cudaStream_t stream);

// out [num_tokens, d] contiguous = silu(input[:, :d]) * input[:, d:]; input rows are input_stride apart.
void launch_silu_and_mul(DType dtype, void* out, const void* input, int64_t input_stride, int64_t num_tokens, int d,
                         cudaStream_t stream);

// out [num_tokens, hidden] contiguous: row t = weight [rows, hidden] (contiguous) row ids[t] - start where
// 0 <= ids[t] - start < rows, else zeros; copied bit for bit.
void launch_masked_embedding(DType dtype, void* out, const int64_t* ids, const void* weight, int64_t start,
                             int64_t rows, int64_t num_tokens, int hidden, cudaStream_t stream);

// out [m, n] contiguous = x [m, k] (rows x_stride apart) @ weight^T (+ bias [n] when not null); weight
// [n, k] contiguous; fp16/bf16 only (fp32 does nothing), 1 <= m <= kDenseGemvMaxTokens, k % 8 == 0 and
// every row 16-byte aligned. split: warps sharing each row's k (1, 2 or 4), 0 for the kernel's rule; rows: weight
// rows a warp (1 or 2; the same sums either way, only the speed differs), 0 for the kernel's rule.
constexpr int kDenseGemvMaxTokens = 4;
void launch_dense_gemv(DType dtype, void* out, const void* x, int64_t x_stride, const void* weight, const void* bias,
                       int m, int n, int k, int split, int rows, cudaStream_t stream);

// key/value [num_tokens, num_kv_heads, head_size] (strides in elements) into the contiguous cache
// [2, num_blocks, block_size, num_kv_heads, head_size]; value_offset = elements from key to value half.
struct KVStrides {
  int64_t key_token, key_head, value_token, value_head;
};
void launch_reshape_and_cache(DType dtype, const void* key, const void* value, void* kv_cache,
                              const int64_t* slot_mapping, KVStrides strides, int64_t value_offset,
                              int64_t num_tokens, int num_kv_heads, int head_size, cudaStream_t stream);

// The same into an FP8 cache of bytes (kernels/cache_fp8.cu, NVIDIA only): x / scale saturated and rounded
// to `format`; k_scale and v_scale are float32 scalars on the device. head_size and the strides even.
void launch_reshape_and_cache_fp8(DType dtype, KVFormat format, const void* key, const void* value, void* kv_cache,
                                  const int64_t* slot_mapping, KVStrides strides, int64_t value_offset,
                                  int64_t num_tokens, int num_kv_heads, int head_size, const float* k_scale,
                                  const float* v_scale, cudaStream_t stream);

}  // namespace pagoda
