// SiLU-and-mul: out = silu(gate) * up over [num_tokens, 2 * d] inputs. Grid (num_tokens, chunks):
// a row is spread over several blocks, so a decode step of a few tokens still uses many SMs.
// Rounding follows torch: silu(gate) is rounded to the dtype, then the product is.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

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
  start_as_dependent();  // launched as a programmatic dependent (dependent_launch.h)
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

void launch_silu_and_mul(DType dtype, void* out, const void* input, int64_t input_stride, int64_t num_tokens, int d,
                         cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = d % V == 0 && input_stride % V == 0 && aligned16(input) && aligned16(out);
    const int vecs = d / (vec ? V : 1);
    const int threads = warp_threads(vecs, 256);
    const int chunks = (vecs + threads - 1) / threads;
    const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(chunks < 64 ? chunks : 64));
    const auto kernel = vec ? silu_and_mul_kernel<T, V> : silu_and_mul_kernel<T, 1>;
    launch_dependent(kernel, grid, dim3(threads), 0, stream, static_cast<T*>(out), static_cast<const T*>(input),
                     input_stride, d);
  });
}

}  // namespace pagoda
