// Portability layer between CUDA and HIP, so pagoda-platform-rocm can hipify these kernels.
// Everything vendor-specific (warp size, shuffles, half/bfloat16 types) goes through here.
// Torch-free: the kernel layer (kernels/) compiles with nvcc or hipcc alone. The torch layer
// (*_kernels.cpp, host compiler) sees only the host parts: the stream type, the warp size.
#pragma once

#if defined(__CUDACC__) || defined(__HIP__)
#define PAGODA_DEVICE_CODE 1
#endif

#if defined(USE_ROCM) && !defined(PAGODA_DEVICE_CODE)
#include <hip/hip_runtime_api.h>  // the host API alone (hipStream_t)
#define PAGODA_WARP_SIZE 64
#elif defined(USE_ROCM)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#if __has_include(<hip/hip_bf16.h>)  // newer ROCm: the CUDA-like __hip_bfloat16
#include <hip/hip_bf16.h>
#define PAGODA_HIP_BF16 1
#else  // older ROCm (e.g. Debian's 5.2): the struct hip_bfloat16, which rounds to nearest even
#include <hip/hip_bfloat16.h>
#endif
#define PAGODA_WARP_SIZE 64  // CDNA wavefronts (gfx9xx); the ROCm platform builds for those only
#define PAGODA_SHFL_XOR(value, mask) __shfl_xor((value), (mask))
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define PAGODA_WARP_SIZE 32
#define PAGODA_SHFL_XOR(value, mask) __shfl_xor_sync(0xffffffffu, (value), (mask))
#endif

#define PAGODA_INLINE __device__ __forceinline__

namespace pagoda {

#ifdef PAGODA_DEVICE_CODE

// The 16-bit storage types of the kernels (same bits as torch's at::Half and at::BFloat16).
using half_t = __half;
#if !defined(USE_ROCM)
using bf16_t = __nv_bfloat16;
#elif defined(PAGODA_HIP_BF16)
using bf16_t = __hip_bfloat16;
#else
using bf16_t = hip_bfloat16;
#endif

// float <-> storage conversions; rounding to nearest even, as torch does.
PAGODA_INLINE float to_float(float x) { return x; }
PAGODA_INLINE float to_float(half_t x) { return __half2float(x); }
#if defined(USE_ROCM) && !defined(PAGODA_HIP_BF16)
PAGODA_INLINE float to_float(bf16_t x) { return static_cast<float>(x); }
#else
PAGODA_INLINE float to_float(bf16_t x) { return __bfloat162float(x); }
#endif

template <typename T>
PAGODA_INLINE T from_float(float x) {
  return static_cast<T>(x);
}
template <>
PAGODA_INLINE half_t from_float<half_t>(float x) {
  return __float2half(x);  // round to nearest even (CUDA and HIP)
}
#if defined(USE_ROCM) && !defined(PAGODA_HIP_BF16)
template <>
PAGODA_INLINE bf16_t from_float<bf16_t>(float x) {
  return bf16_t(x);
}
#else
template <>
PAGODA_INLINE bf16_t from_float<bf16_t>(float x) {
  return __float2bfloat16(x);  // round to nearest even (CUDA and HIP)
}
#endif

// Sum over the lanes of one warp (every lane gets the total).
PAGODA_INLINE float warp_sum(float value) {
#pragma unroll
  for (int mask = PAGODA_WARP_SIZE / 2; mask > 0; mask >>= 1) {
    value += PAGODA_SHFL_XOR(value, mask);
  }
  return value;
}

// Sum over all threads of the block (every thread gets the total). blockDim.x <= 1024.
PAGODA_INLINE float block_sum(float value) {
  __shared__ float partial[1024 / PAGODA_WARP_SIZE];
  const int lane = threadIdx.x % PAGODA_WARP_SIZE;
  const int warp = threadIdx.x / PAGODA_WARP_SIZE;
  const int num_warps = (blockDim.x + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE;
  value = warp_sum(value);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = lane < num_warps ? partial[lane] : 0.0f;
  return warp_sum(value);
}

#endif  // PAGODA_DEVICE_CODE

}  // namespace pagoda
