// RMSNorm and fused residual-add + RMSNorm: one block per token, fp32 accumulation,
// 16-byte vector loads when the row allows them. Rounding follows layers/ops.py:
// the normalised value is rounded to the dtype before the weight multiplies it.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"
#include "rms_norm.cuh"

namespace pagoda {

template <typename T, int VEC>
__global__ void rms_norm_kernel(T* __restrict__ out,          // [num_tokens, hidden]
                                const T* __restrict__ input,  // [num_tokens, input_stride]
                                const T* __restrict__ weight,  // [hidden]
                                int64_t input_stride, int hidden, float eps) {
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h)
  const T* x = input + blockIdx.x * input_stride;
  T* y = out + blockIdx.x * static_cast<int64_t>(hidden);
  const int num_vecs = hidden / VEC;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
    const Vec<T, VEC> v = load_vec<T, VEC>(x + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = to_float(v.val[j]);
      sum += f * f;
    }
  }
  store_rms_normed_row<T, VEC>(y, x, weight, num_vecs, rsqrtf(block_sum(sum) / hidden + eps));
}

// residual <- input + residual (rounded to T); input <- weight * rms_norm(residual).
// Each thread re-reads only the elements it wrote, so no barrier is needed between passes.
template <typename T, int VEC>
__global__ void fused_add_rms_norm_kernel(T* __restrict__ input,     // [num_tokens, hidden]
                                          T* __restrict__ residual,  // [num_tokens, hidden]
                                          const T* __restrict__ weight, int hidden, float eps) {
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h)
  const int64_t row = blockIdx.x * static_cast<int64_t>(hidden);
  T* x = input + row;
  T* res = residual + row;
  const int num_vecs = hidden / VEC;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
    const Vec<T, VEC> a = load_vec<T, VEC>(x + i * VEC);
    Vec<T, VEC> b = load_vec<T, VEC>(res + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      b.val[j] = from_float<T>(to_float(a.val[j]) + to_float(b.val[j]));
      const float f = to_float(b.val[j]);
      sum += f * f;
    }
    store_vec<T, VEC>(res + i * VEC, b);
  }
  store_rms_normed_row<T, VEC>(x, res, weight, num_vecs, rsqrtf(block_sum(sum) / hidden + eps));
}

void launch_rms_norm(DType dtype, void* out, const void* input, const void* weight, int64_t input_stride,
                     int64_t num_tokens, int hidden, float eps, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = hidden % V == 0 && input_stride % V == 0 && aligned16(input) && aligned16(weight) &&
                     aligned16(out);
    const int width = vec ? V : 1;
    const auto kernel = vec ? rms_norm_kernel<T, V> : rms_norm_kernel<T, 1>;
    const dim3 grid(static_cast<unsigned>(num_tokens)), block(warp_threads(hidden / width, 1024));
    launch_dependent(kernel, grid, block, 0, stream, static_cast<T*>(out), static_cast<const T*>(input),
                     static_cast<const T*>(weight), input_stride, hidden, eps);
  });
}

void launch_fused_add_rms_norm(DType dtype, void* input, void* residual, const void* weight, int64_t num_tokens,
                               int hidden, float eps, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = hidden % V == 0 && aligned16(input) && aligned16(residual) && aligned16(weight);
    const int width = vec ? V : 1;
    const auto kernel = vec ? fused_add_rms_norm_kernel<T, V> : fused_add_rms_norm_kernel<T, 1>;
    const dim3 grid(static_cast<unsigned>(num_tokens)), block(warp_threads(hidden / width, 1024));
    launch_dependent(kernel, grid, block, 0, stream, static_cast<T*>(input), static_cast<T*>(residual),
                     static_cast<const T*>(weight), hidden, eps);
  });
}

}  // namespace pagoda
