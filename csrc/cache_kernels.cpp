// Torch layer of the paged KV-cache write: tensor checks, then the kernel layer (kernels/cache.cu).
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

void reshape_and_cache(const at::Tensor& key, const at::Tensor& value, at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping) {
  using namespace pagoda;
  check_cuda(key, "key");
  check_last_dim_contiguous(key, "key");
  check_last_dim_contiguous(value, "value");
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), "reshape_and_cache: key and value must be [num_tokens, num_kv_heads, head_size]");
  TORCH_CHECK(kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.is_contiguous() &&
                  kv_cache.size(3) == key.size(1) && kv_cache.size(4) == key.size(2),
              "reshape_and_cache: kv_cache must be contiguous [2, num_blocks, block_size, num_kv_heads, head_size]");
  TORCH_CHECK(key.scalar_type() == kv_cache.scalar_type() && value.scalar_type() == kv_cache.scalar_type(),
              "reshape_and_cache: key, value and kv_cache must share a dtype");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.is_contiguous() &&
                  slot_mapping.numel() == key.size(0),
              "reshape_and_cache: slot_mapping must be int64 [num_tokens]");
  const DType dtype = kernel_dtype(key, "reshape_and_cache");
  if (key.size(0) == 0) return;
  const KVStrides strides{key.stride(0), key.stride(1), value.stride(0), value.stride(1)};
  const c10::cuda::OptionalCUDAGuard guard(key.device());
  launch_reshape_and_cache(dtype, key.data_ptr(), value.data_ptr(), kv_cache.data_ptr(),
                           slot_mapping.data_ptr<int64_t>(), strides, kv_cache.stride(0), key.size(0),
                           static_cast<int>(key.size(1)), static_cast<int>(key.size(2)),
                           c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

#ifndef USE_ROCM  // kernels/cache_fp8.cu uses cuda_fp8.h (nvidia_only in manifest.txt)
void reshape_and_cache_fp8(const at::Tensor& key, const at::Tensor& value, at::Tensor& kv_cache,
                           const at::Tensor& slot_mapping, const at::Tensor& k_scale, const at::Tensor& v_scale) {
  using namespace pagoda;
  check_cuda(key, "key");
  check_last_dim_contiguous(key, "key");
  check_last_dim_contiguous(value, "value");
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(), "reshape_and_cache_fp8: key and value must be [num_tokens, num_kv_heads, head_size]");
  TORCH_CHECK(kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.is_contiguous() &&
                  kv_cache.size(3) == key.size(1) && kv_cache.size(4) == key.size(2),
              "reshape_and_cache_fp8: kv_cache must be contiguous [2, num_blocks, block_size, num_kv_heads, head_size]");
  const auto cache_type = kv_cache.scalar_type();
  TORCH_CHECK(cache_type == at::kFloat8_e4m3fn || cache_type == at::kFloat8_e5m2,
              "reshape_and_cache_fp8: kv_cache must be float8_e4m3fn or float8_e5m2, not ", cache_type);
  TORCH_CHECK(key.scalar_type() == value.scalar_type(), "reshape_and_cache_fp8: key and value must share a dtype");
  TORCH_CHECK(key.size(2) % 2 == 0 && key.stride(0) % 2 == 0 && key.stride(1) % 2 == 0 && value.stride(0) % 2 == 0 &&
                  value.stride(1) % 2 == 0,
              "reshape_and_cache_fp8: head_size and the key/value strides must be even");
  for (const at::Tensor* scale : {&k_scale, &v_scale}) {
    TORCH_CHECK(scale->is_cuda() && scale->scalar_type() == at::kFloat && scale->numel() == 1,
                "reshape_and_cache_fp8: k_scale and v_scale must be one-element float32 CUDA tensors");
  }
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.is_contiguous() &&
                  slot_mapping.numel() == key.size(0),
              "reshape_and_cache_fp8: slot_mapping must be int64 [num_tokens]");
  const DType dtype = kernel_dtype(key, "reshape_and_cache_fp8");
  if (key.size(0) == 0) return;
  const KVStrides strides{key.stride(0), key.stride(1), value.stride(0), value.stride(1)};
  const KVFormat format = cache_type == at::kFloat8_e5m2 ? KVFormat::kE5M2 : KVFormat::kE4M3;
  const c10::cuda::OptionalCUDAGuard guard(key.device());
  launch_reshape_and_cache_fp8(dtype, format, key.data_ptr(), value.data_ptr(), kv_cache.data_ptr(),
                               slot_mapping.data_ptr<int64_t>(), strides, kv_cache.stride(0), key.size(0),
                               static_cast<int>(key.size(1)), static_cast<int>(key.size(2)),
                               k_scale.data_ptr<float>(), v_scale.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
#endif
