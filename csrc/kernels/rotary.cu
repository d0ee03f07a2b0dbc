// Rotary position embedding applied in place to q and k, one block per token.
// Pairs are (j, j + rot_dim/2) in neox style and (2j, 2j + 1) in gpt-j style; cos_sin_cache
// rows are [cos(0..rot_dim/2), sin(0..rot_dim/2)], in float32 or the dtype of q/k.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

namespace pagoda {

template <typename T, typename C, bool NEOX>
PAGODA_INLINE void rotate_pair(T* __restrict__ head, const C* __restrict__ cos, const C* __restrict__ sin,
                               int j, int embed_dim) {
  const int xi = NEOX ? j : 2 * j;
  const int yi = NEOX ? j + embed_dim : 2 * j + 1;
  const float c = to_float(cos[j]);
  const float s = to_float(sin[j]);
  const float x = to_float(head[xi]);
  const float y = to_float(head[yi]);
  head[xi] = from_float<T>(x * c - y * s);
  head[yi] = from_float<T>(y * c + x * s);
}

template <typename T, typename C, bool NEOX>
__global__ void rotary_kernel(const int64_t* __restrict__ positions,  // [num_tokens]
                              T* __restrict__ query,                  // [num_tokens, q_stride]
                              T* __restrict__ key,                    // [num_tokens, k_stride]
                              const C* __restrict__ cos_sin_cache,    // [max_position, rot_dim]
                              RotaryShape s) {
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h)
  const int64_t token = blockIdx.x;
  const C* cos = cos_sin_cache + positions[token] * s.rot_dim;
  const int embed_dim = s.rot_dim / 2;
  const C* sin = cos + embed_dim;
  T* q = query + token * s.q_stride;
  for (int i = threadIdx.x; i < s.num_heads * embed_dim; i += blockDim.x) {
    rotate_pair<T, C, NEOX>(q + (i / embed_dim) * s.head_size, cos, sin, i % embed_dim, embed_dim);
  }
  T* k = key + token * s.k_stride;
  for (int i = threadIdx.x; i < s.num_kv_heads * embed_dim; i += blockDim.x) {
    rotate_pair<T, C, NEOX>(k + (i / embed_dim) * s.head_size, cos, sin, i % embed_dim, embed_dim);
  }
}

template <typename T, typename C>
void launch_rotary(const int64_t* positions, void* query, void* key, const void* cache, RotaryShape s, bool is_neox,
                   cudaStream_t stream) {
  const int heads = s.num_heads > s.num_kv_heads ? s.num_heads : s.num_kv_heads;
  const int threads = heads * s.rot_dim / 2 < 512 ? heads * s.rot_dim / 2 : 512;
  const auto kernel = is_neox ? rotary_kernel<T, C, true> : rotary_kernel<T, C, false>;
  launch_dependent(kernel, dim3(static_cast<unsigned>(s.num_tokens)), dim3(threads), 0, stream,
      positions, static_cast<T*>(query), static_cast<T*>(key), static_cast<const C*>(cache), s);
}

void launch_rotary_embedding(DType dtype, bool float_cache, const int64_t* positions, void* query, void* key,
                             const void* cos_sin_cache, RotaryShape shape, bool is_neox, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (float_cache) {
      launch_rotary<T, float>(positions, query, key, cos_sin_cache, shape, is_neox, stream);
    } else {
      launch_rotary<T, T>(positions, query, key, cos_sin_cache, shape, is_neox, stream);
    }
  });
}

}  // namespace pagoda
