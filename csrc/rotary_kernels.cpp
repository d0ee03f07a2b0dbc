// Torch layer of the rotary embedding: tensor checks, then the kernel layer (kernels/rotary.cu).
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

void rotary_embedding(const at::Tensor& positions, at::Tensor& query, at::Tensor& key, int64_t head_size,
                      const at::Tensor& cos_sin_cache, bool is_neox) {
  using namespace pagoda;
  check_cuda(query, "query");
  check_last_dim_contiguous(query, "query");
  check_last_dim_contiguous(key, "key");
  TORCH_CHECK(query.dim() == 2 && key.dim() == 2, "rotary_embedding: query and key must be [num_tokens, heads * head_size]");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous(), "rotary_embedding: positions must be int64");
  TORCH_CHECK(positions.numel() == query.size(0) && key.size(0) == query.size(0), "rotary_embedding: token counts differ");
  TORCH_CHECK(query.size(1) % head_size == 0 && key.size(1) % head_size == 0, "rotary_embedding: head_size must divide");
  TORCH_CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.is_contiguous() && cos_sin_cache.size(1) % 2 == 0 &&
                  cos_sin_cache.size(1) <= head_size,
              "rotary_embedding: cos_sin_cache must be contiguous [max_position, rot_dim], rot_dim even, <= head_size");
  TORCH_CHECK(key.scalar_type() == query.scalar_type(), "rotary_embedding: query and key must share a dtype");
  const bool float_cache = cos_sin_cache.scalar_type() == at::kFloat;
  TORCH_CHECK(float_cache || cos_sin_cache.scalar_type() == query.scalar_type(),
              "rotary_embedding: cos_sin_cache must be float32 or the dtype of query");
  const DType dtype = kernel_dtype(query, "rotary_embedding");
  if (positions.numel() == 0) return;
  const RotaryShape shape{positions.numel(),
                          query.stride(0),
                          key.stride(0),
                          static_cast<int>(cos_sin_cache.size(1)),
                          static_cast<int>(query.size(1) / head_size),
                          static_cast<int>(key.size(1) / head_size),
                          static_cast<int>(head_size)};
  const c10::cuda::OptionalCUDAGuard guard(query.device());
  launch_rotary_embedding(dtype, float_cache, positions.data_ptr<int64_t>(), query.data_ptr(), key.data_ptr(),
                          cos_sin_cache.data_ptr(), shape, is_neox, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
