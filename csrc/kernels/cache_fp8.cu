// reshape_and_cache into an FP8 cache: this step's keys and values divided by the layer's scales,
// saturated and rounded to e4m3 or e5m2 (kernels/fp8.cuh), one block per token. The cache is
// [2, num_blocks, block_size, num_kv_heads, head_size] of bytes, contiguous, as cache.cu's.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "fp8.cuh"
#include "launch.h"

namespace pagoda {

template <typename T, int VEC>
__global__ void reshape_and_cache_fp8_kernel(const T* __restrict__ key,    // [num_tokens, num_kv_heads, head_size]
                                             const T* __restrict__ value,  // [num_tokens, num_kv_heads, head_size]
                                             uint8_t* __restrict__ kv_cache, const int64_t* __restrict__ slot_mapping,
                                             KVStrides s, int64_t value_offset, int num_kv_heads, int head_size,
                                             const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                             KVFormat format) {
  static_assert(VEC % 2 == 0, "pairs of values convert together");
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h); the scales come after
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // padding token
  const int row = num_kv_heads * head_size;
  uint8_t* key_dst = kv_cache + slot * row;
  uint8_t* value_dst = key_dst + value_offset;
  const float ks = *k_scale, vs = *v_scale;
  for (int i = threadIdx.x * VEC; i < row; i += blockDim.x * VEC) {
    const int head = i / head_size, d = i % head_size;
    const Vec<T, VEC> k = load_vec<T, VEC>(key + token * s.key_token + head * s.key_head + d);
    const Vec<T, VEC> v = load_vec<T, VEC>(value + token * s.value_token + head * s.value_head + d);
    Vec<uint16_t, VEC / 2> k8, v8;
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
      k8.val[j] = float2_to_fp8x2(to_float(k.val[2 * j]), to_float(k.val[2 * j + 1]), ks, format);
      v8.val[j] = float2_to_fp8x2(to_float(v.val[2 * j]), to_float(v.val[2 * j + 1]), vs, format);
    }
    store_vec<uint16_t, VEC / 2>(reinterpret_cast<uint16_t*>(key_dst + i), k8);
    store_vec<uint16_t, VEC / 2>(reinterpret_cast<uint16_t*>(value_dst + i), v8);
  }
}

void launch_reshape_and_cache_fp8(DType dtype, KVFormat format, const void* key, const void* value, void* kv_cache,
                                  const int64_t* slot_mapping, KVStrides s, int64_t value_offset, int64_t num_tokens,
                                  int num_kv_heads, int head_size, const float* k_scale, const float* v_scale,
                                  cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T> >= 2 ? kVecWidth<T> : 2;  // 8 of 16-bit T (16 bytes in, 8 out), 4 of float
    const bool vec = head_size % V == 0 && s.key_token % V == 0 && s.key_head % V == 0 && s.value_token % V == 0 &&
                     s.value_head % V == 0 && aligned16(key) && aligned16(value) && aligned16(kv_cache);
    const int width = vec ? V : 2;
    const int threads = warp_threads(num_kv_heads * head_size / width, 512);
    const auto kernel = vec ? reshape_and_cache_fp8_kernel<T, V> : reshape_and_cache_fp8_kernel<T, 2>;
    launch_dependent(kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(threads), 0, stream,
        static_cast<const T*>(key), static_cast<const T*>(value), static_cast<uint8_t*>(kv_cache), slot_mapping, s,
        value_offset, num_kv_heads, head_size, k_scale, v_scale, format);
  });
}

}  // namespace pagoda
