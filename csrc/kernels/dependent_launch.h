// Programmatic dependent launch (sm_90+): a kernel launched with launch_dependent() may start while the
// kernel before it in the stream still runs, once every block of that kernel has called
// allow_dependents_to_start() (or exited). Before it reads what that kernel writes, or writes what that
// kernel may still read, it calls wait_for_prior_grids(), which waits for that kernel to finish and
// flush. Reads of data no kernel writes (weights) may come first: they overlap the other kernel's tail.
// The device calls are no-ops below sm_90 and on ROCm, where every kernel launches plainly.
#pragma once

#include "../compat.h"

namespace pagoda {

PAGODA_INLINE void allow_dependents_to_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

PAGODA_INLINE void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// 16 bytes of data no kernel writes (weights), read before wait_for_prior_grids(). ptxas hoists that wait
// above every read-only load (.nc, "LDG.CONSTANT" in SASS; a plain read through a const __restrict__
// pointer compiles to one), so such a read would start only after the wait; a weak ld.global stays before
// it (tests/platforms/test_nvcc_compile.py checks the SASS order). Plain elsewhere.
PAGODA_INLINE uint4 load_before_wait(const void* ptr) {
#if defined(__CUDA_ARCH__) && !defined(USE_ROCM)
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
#else
  return *static_cast<const uint4*>(ptr);
#endif
}

// The usual start of a dependent: wait for the kernel before, then let the next one be scheduled.
PAGODA_INLINE void start_as_dependent() {
  wait_for_prior_grids();
  allow_dependents_to_start();
}

// Let the next kernel be scheduled first, then wait: its blocks become resident and read what no kernel
// writes (a GEMV's weights) while this kernel runs; it still waits before reading this kernel's output.
// Worth it before a long kernel (attention) followed by one that streams weights (the flash split
// reduction; the Triton attention kernels start the same way).
PAGODA_INLINE void start_as_dependent_trigger_first() {
  allow_dependents_to_start();
  wait_for_prior_grids();
}

#ifndef USE_ROCM
// Whether launch_dependent() sets the attribute: sm_90+ devices. Checked once per process and device.
inline bool dependent_launch_enabled() {
  static int known[64] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return false;
  if (known[device] == 0) {
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    known[device] = major >= 9 ? 2 : 1;
  }
  return known[device] == 2;
}
#endif

// Launch `kernel` as a programmatic dependent of the stream's previous kernel where enabled, plainly
// otherwise or if the driver refuses.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, int shared_bytes, cudaStream_t stream,
                      Args... args) {
#ifndef USE_ROCM
  if (dependent_launch_enabled()) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = static_cast<size_t>(shared_bytes);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...) == cudaSuccess) return;
    (void)cudaGetLastError();  // refused (driver or device): launch plainly
  }
#endif
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Params>(args)...);
}

}  // namespace pagoda
