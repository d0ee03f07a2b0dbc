// SiLU-and-mul: out = silu(gate) * up over [num_tokens, 2 * d] inputs. Grid (num_tokens, chunks):
// a row is spread over several blocks, so a decode step of a few tokens still uses many SMs.
// Rounding follows torch: silu(gate) is rounded to the dtype, then the product is.
#include "dispatch.h"
#include "ops.h"
#include "vec.cuh"

namespace pagoda {

template <typename T>
PAGODA_INLINE T silu_mul(T gate, T up) {
  const float g = to_float(gate);
  const T silu = from_float<T>(g / (1.0f + expf(-g)));
  return from_float<T>(to_float(silu) * to_float(up));
}

template <typename T, int VEC>
__global__ void silu_and_mul_kernel(T* __restrict__ out,          // [num_tokens, d]
                                    const T* __restrict__ input,  // [num_tokens, input_stride], gate then up
                                    int64_t input_stride, int d) {
  const T* gate = input + blockIdx.x * input_stride;
  const T* up = gate + d;
  T* y = out + blockIdx.x * static_cast<int64_t>(d);
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < d / VEC; i += blockDim.x * gridDim.y) {
    const Vec<T, VEC> g = load_vec<T, VEC>(gate + i * VEC);
    const Vec<T, VEC> u = load_vec<T, VEC>(up + i * VEC);
    Vec<T, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; ++j) r.val[j] = silu_mul(g.val[j], u.val[j]);
    store_vec<T, VEC>(y + i * VEC, r);
  }
}

}  // namespace pagoda

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  using namespace pagoda;
  check_cuda(input, "input");
  check_last_dim_contiguous(input, "input");
  TORCH_CHECK(input.dim() == 2 && input.size(1) % 2 == 0, "silu_and_mul: input must be [num_tokens, 2 * d]");
  const int64_t num_tokens = input.size(0);
  const int d = static_cast<int>(input.size(1) / 2);
  TORCH_CHECK(out.is_contiguous() && out.size(0) == num_tokens && out.size(1) == d, "silu_and_mul: out must be [num_tokens, d]");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "silu_and_mul: out and input must share a dtype");
  if (num_tokens == 0 || d == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  PAGODA_DISPATCH_FLOATING(input.scalar_type(), "silu_and_mul", [&] {
    constexpr int V = kVecWidth<scalar_t>;
    const bool vec = d % V == 0 && input.stride(0) % V == 0 && aligned16(input.data_ptr()) && aligned16(out.data_ptr());
    const int width = vec ? V : 1;
    const int vecs = d / width;
    const int threads = std::min(256, (vecs + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE * PAGODA_WARP_SIZE);
    const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(std::min(64, (vecs + threads - 1) / threads)));
    const auto kernel = vec ? silu_and_mul_kernel<scalar_t, V> : silu_and_mul_kernel<scalar_t, 1>;
    kernel<<<grid, threads, 0, stream>>>(out.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), input.stride(0), d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
