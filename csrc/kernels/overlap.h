// Programmatic dependent launch (Hopper, sm_90+): a kernel started by launch_overlapped() may begin
// while the kernel before it in the stream is still running. It first does what depends on no
// earlier kernel (loads of weights), then calls wait_for_prior_grids(), which returns once every
// earlier kernel has finished and its writes are visible; only then may it read activations or
// write anything. A kernel lets its dependents begin early with allow_dependents_to_start().
// Before sm_90, on HIP, and for kernels launched plainly, both calls do nothing; CUDA graphs capture
// the programmatic edges. PAGODA_PDL=0 launches plainly (A/B measurements).
#pragma once

#include <cstdlib>
#include <cstring>

#include "common.h"

namespace pagoda {

PAGODA_INLINE void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

PAGODA_INLINE void allow_dependents_to_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#if !defined(USE_ROCM)
// An sm_90+ device, and PAGODA_PDL is not "0".
inline bool overlapped_launch_enabled() {
  const char* env = std::getenv("PAGODA_PDL");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9;
}

// kernel<<<grid, block, 0, stream>>>(args...), allowed to overlap the previous kernel's tail.
template <typename... Params, typename... Args>
void launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  if (overlapped_launch_enabled()) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...) == cudaSuccess) return;
    (void)cudaGetLastError();  // refused (driver or device): launch plainly
  }
  kernel<<<grid, block, 0, stream>>>(args...);
}
#endif

}  // namespace pagoda
