// Portability layer between CUDA and HIP, so pagoda-platform-rocm can hipify these kernels.
// Everything vendor-specific (warp size, shuffles, fast math intrinsics) goes through here.
#pragma once

#ifdef USE_ROCM
#include <hip/hip_runtime.h>
#define PAGODA_WARP_SIZE 64
#define PAGODA_SHFL_XOR(value, mask) __shfl_xor((value), (mask))
#else
#include <cuda_runtime.h>
#define PAGODA_WARP_SIZE 32
#define PAGODA_SHFL_XOR(value, mask) __shfl_xor_sync(0xffffffffu, (value), (mask))
#endif

#define PAGODA_INLINE __device__ __forceinline__

namespace pagoda {

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

}  // namespace pagoda
