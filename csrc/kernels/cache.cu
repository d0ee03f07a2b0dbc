// reshape_and_cache: copy this step's keys and values into their paged slots, one block per token.
// kv_cache is [2, num_blocks, block_size, num_kv_heads, head_size], contiguous; a slot is
// block * block_size + offset, so a token's row starts at slot * num_kv_heads * head_size.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

namespace pagoda {

template <typename T, int VEC>
__global__ void reshape_and_cache_kernel(const T* __restrict__ key,    // [num_tokens, num_kv_heads, head_size]
                                         const T* __restrict__ value,  // [num_tokens, num_kv_heads, head_size]
                                         T* __restrict__ kv_cache, const int64_t* __restrict__ slot_mapping,
                                         KVStrides s, int64_t value_offset, int num_kv_heads, int head_size) {
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h)
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

void launch_reshape_and_cache(DType dtype, const void* key, const void* value, void* kv_cache,
                              const int64_t* slot_mapping, KVStrides s, int64_t value_offset,
                              int64_t num_tokens, int num_kv_heads, int head_size, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = head_size % V == 0 && s.key_token % V == 0 && s.key_head % V == 0 && s.value_token % V == 0 &&
                     s.value_head % V == 0 && aligned16(key) && aligned16(value) && aligned16(kv_cache);
    const int width = vec ? V : 1;
    const int threads = warp_threads(num_kv_heads * head_size / width, 512);
    const auto kernel = vec ? reshape_and_cache_kernel<T, V> : reshape_and_cache_kernel<T, 1>;
    launch_dependent(kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(threads), 0, stream,
        static_cast<const T*>(key), static_cast<const T*>(value), static_cast<T*>(kv_cache), slot_mapping, s,
        value_offset, num_kv_heads, head_size);
  });
}

}  // namespace pagoda
