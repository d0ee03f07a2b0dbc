// reshape_and_cache: copy this step's keys and values into their paged slots, one block per token.
// kv_cache is [2, num_blocks, block_size, num_kv_heads, head_size], contiguous; a slot is
// block * block_size + offset, so a token's row starts at slot * num_kv_heads * head_size.
#include "dispatch.h"
#include "ops.h"
#include "vec.cuh"

namespace pagoda {

struct KVStrides {
  int64_t key_token, key_head, value_token, value_head;
};

template <typename T, int VEC>
__global__ void reshape_and_cache_kernel(const T* __restrict__ key,    // [num_tokens, num_kv_heads, head_size]
                                         const T* __restrict__ value,  // [num_tokens, num_kv_heads, head_size]
                                         T* __restrict__ kv_cache, const int64_t* __restrict__ slot_mapping,
                                         KVStrides s, int64_t value_offset, int num_kv_heads, int head_size) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // padding token
  const int row = num_kv_heads * head_size;
  T* key_dst = kv_cache + slot * row;
  T* value_dst = key_dst + value_offset;
  for (int i = threadIdx.x * VEC; i < row; i += blockDim.x * VEC) {
    const int head = i / head_size;
    const int d = i % head_size;
    store_vec<T, VEC>(key_dst + i, load_vec<T, VEC>(key + token * s.key_token + head * s.key_head + d));
    store_vec<T, VEC>(value_dst + i, load_vec<T, VEC>(value + token * s.value_token + head * s.value_head + d));
  }
}

}  // namespace pagoda

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
  const int64_t num_tokens = key.size(0);
  const int num_kv_heads = static_cast<int>(key.size(1));
  const int head_size = static_cast<int>(key.size(2));
  if (num_tokens == 0) return;
  const KVStrides strides{key.stride(0), key.stride(1), value.stride(0), value.stride(1)};
  const c10::cuda::OptionalCUDAGuard guard(key.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  PAGODA_DISPATCH_FLOATING(key.scalar_type(), "reshape_and_cache", [&] {
    constexpr int V = kVecWidth<scalar_t>;
    const bool vec = head_size % V == 0 && strides.key_token % V == 0 && strides.key_head % V == 0 &&
                     strides.value_token % V == 0 && strides.value_head % V == 0 && aligned16(key.data_ptr()) &&
                     aligned16(value.data_ptr()) && aligned16(kv_cache.data_ptr());
    const int width = vec ? V : 1;
    const int threads = std::min(512, (num_kv_heads * head_size / width + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE *
                                          PAGODA_WARP_SIZE);
    const auto kernel = vec ? reshape_and_cache_kernel<scalar_t, V> : reshape_and_cache_kernel<scalar_t, 1>;
    kernel<<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
        key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(), kv_cache.data_ptr<scalar_t>(),
        slot_mapping.data_ptr<int64_t>(), strides, kv_cache.stride(0), num_kv_heads, head_size);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
