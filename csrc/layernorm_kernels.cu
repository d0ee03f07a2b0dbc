// RMSNorm and fused residual-add + RMSNorm: one block per token, fp32 accumulation,
// 16-byte vector loads when the row allows them. Rounding follows layers/ops.py:
// the normalised value is rounded to the dtype before the weight multiplies it.
#include "dispatch.h"
#include "ops.h"
#include "vec.cuh"

namespace pagoda {

template <typename T, int VEC>
__global__ void rms_norm_kernel(T* __restrict__ out,          // [num_tokens, hidden]
                                const T* __restrict__ input,  // [num_tokens, input_stride]
                                const T* __restrict__ weight,  // [hidden]
                                int64_t input_stride, int hidden, float eps) {
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
  const float inv_rms = rsqrtf(block_sum(sum) / hidden + eps);
  for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
    const Vec<T, VEC> v = load_vec<T, VEC>(x + i * VEC);
    const Vec<T, VEC> w = load_vec<T, VEC>(weight + i * VEC);
    Vec<T, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const T normed = from_float<T>(to_float(v.val[j]) * inv_rms);
      r.val[j] = from_float<T>(to_float(w.val[j]) * to_float(normed));
    }
    store_vec<T, VEC>(y + i * VEC, r);
  }
}

// residual <- input + residual (rounded to T); input <- weight * rms_norm(residual).
// Each thread re-reads only the elements it wrote, so no barrier is needed between passes.
template <typename T, int VEC>
__global__ void fused_add_rms_norm_kernel(T* __restrict__ input,     // [num_tokens, hidden]
                                          T* __restrict__ residual,  // [num_tokens, hidden]
                                          const T* __restrict__ weight, int hidden, float eps) {
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
  const float inv_rms = rsqrtf(block_sum(sum) / hidden + eps);
  for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
    const Vec<T, VEC> b = load_vec<T, VEC>(res + i * VEC);
    const Vec<T, VEC> w = load_vec<T, VEC>(weight + i * VEC);
    Vec<T, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const T normed = from_float<T>(to_float(b.val[j]) * inv_rms);
      r.val[j] = from_float<T>(to_float(w.val[j]) * to_float(normed));
    }
    store_vec<T, VEC>(x + i * VEC, r);
  }
}

inline dim3 norm_block(int num_vecs) {
  const int threads = (num_vecs + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE * PAGODA_WARP_SIZE;
  return dim3(std::min(threads, 1024));
}

}  // namespace pagoda

void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  using namespace pagoda;
  check_cuda(input, "input");
  check_last_dim_contiguous(input, "input");
  TORCH_CHECK(input.dim() == 2 && out.is_contiguous() && out.sizes() == input.sizes(), "rms_norm: bad shapes");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == input.size(1), "rms_norm: weight must be [hidden]");
  TORCH_CHECK(out.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type(),
              "rms_norm: input, weight and out must share a dtype");
  const int64_t num_tokens = input.size(0);
  const int hidden = static_cast<int>(input.size(1));
  if (num_tokens == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  PAGODA_DISPATCH_FLOATING(input.scalar_type(), "rms_norm", [&] {
    constexpr int V = kVecWidth<scalar_t>;
    const bool vec = hidden % V == 0 && input.stride(0) % V == 0 && aligned16(input.data_ptr()) &&
                     aligned16(weight.data_ptr()) && aligned16(out.data_ptr());
    const auto launch = [&](auto kernel, int width) {
      kernel<<<static_cast<unsigned>(num_tokens), norm_block(hidden / width), 0, stream>>>(
          out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), input.stride(0),
          hidden, static_cast<float>(eps));
    };
    vec ? launch(rms_norm_kernel<scalar_t, V>, V) : launch(rms_norm_kernel<scalar_t, 1>, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  using namespace pagoda;
  check_cuda(input, "input");
  TORCH_CHECK(input.dim() == 2 && input.is_contiguous() && residual.is_contiguous() &&
                  residual.sizes() == input.sizes(),
              "fused_add_rms_norm: input and residual must be contiguous [num_tokens, hidden]");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == input.size(1), "fused_add_rms_norm: weight must be [hidden]");
  TORCH_CHECK(residual.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type(),
              "fused_add_rms_norm: input, residual and weight must share a dtype");
  const int64_t num_tokens = input.size(0);
  const int hidden = static_cast<int>(input.size(1));
  if (num_tokens == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  PAGODA_DISPATCH_FLOATING(input.scalar_type(), "fused_add_rms_norm", [&] {
    constexpr int V = kVecWidth<scalar_t>;
    const bool vec = hidden % V == 0 && aligned16(input.data_ptr()) && aligned16(residual.data_ptr()) &&
                     aligned16(weight.data_ptr());
    const auto launch = [&](auto kernel, int width) {
      kernel<<<static_cast<unsigned>(num_tokens), norm_block(hidden / width), 0, stream>>>(
          input.data_ptr<scalar_t>(), residual.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), hidden,
          static_cast<float>(eps));
    };
    vec ? launch(fused_add_rms_norm_kernel<scalar_t, V>, V) : launch(fused_add_rms_norm_kernel<scalar_t, 1>, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
