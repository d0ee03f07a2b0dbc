// Rotary position embedding applied in place to q and k, one block per token.
// Pairs are (j, j + rot_dim/2) in neox style and (2j, 2j + 1) in gpt-j style; cos_sin_cache
// rows are [cos(0..rot_dim/2), sin(0..rot_dim/2)], in float32 or the dtype of q/k.
#include "dispatch.h"
#include "ops.h"
#include "vec.cuh"

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
                              int64_t q_stride, int64_t k_stride, int rot_dim, int num_heads, int num_kv_heads,
                              int head_size) {
  const int64_t token = blockIdx.x;
  const C* cos = cos_sin_cache + positions[token] * rot_dim;
  const int embed_dim = rot_dim / 2;
  const C* sin = cos + embed_dim;
  T* q = query + token * q_stride;
  for (int i = threadIdx.x; i < num_heads * embed_dim; i += blockDim.x) {
    rotate_pair<T, C, NEOX>(q + (i / embed_dim) * head_size, cos, sin, i % embed_dim, embed_dim);
  }
  T* k = key + token * k_stride;
  for (int i = threadIdx.x; i < num_kv_heads * embed_dim; i += blockDim.x) {
    rotate_pair<T, C, NEOX>(k + (i / embed_dim) * head_size, cos, sin, i % embed_dim, embed_dim);
  }
}

template <typename T, typename C>
void launch_rotary(const at::Tensor& positions, at::Tensor& query, at::Tensor& key, const at::Tensor& cache,
                   int head_size, bool is_neox, cudaStream_t stream) {
  const int64_t num_tokens = positions.numel();
  const int rot_dim = static_cast<int>(cache.size(1));
  const int num_heads = static_cast<int>(query.size(1) / head_size);
  const int num_kv_heads = static_cast<int>(key.size(1) / head_size);
  const int threads = std::min(std::max(num_heads, num_kv_heads) * rot_dim / 2, 512);
  const auto kernel = is_neox ? rotary_kernel<T, C, true> : rotary_kernel<T, C, false>;
  kernel<<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      positions.data_ptr<int64_t>(), query.data_ptr<T>(), key.data_ptr<T>(), cache.data_ptr<C>(), query.stride(0),
      key.stride(0), rot_dim, num_heads, num_kv_heads, head_size);
}

}  // namespace pagoda

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
  if (positions.numel() == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(query.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  PAGODA_DISPATCH_FLOATING(query.scalar_type(), "rotary_embedding", [&] {
    if (float_cache) {
      launch_rotary<scalar_t, float>(positions, query, key, cos_sin_cache, static_cast<int>(head_size), is_neox, stream);
    } else {
      launch_rotary<scalar_t, scalar_t>(positions, query, key, cos_sin_cache, static_cast<int>(head_size), is_neox,
                                        stream);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
