// Host-side helpers of the kernel layer (torch-free): the dtype tag the torch layer passes in,
// dispatch on it, alignment and launch-shape helpers, the dynamic shared-memory opt-in.
#pragma once

#include <cstdint>

#include "../compat.h"

namespace pagoda {

// The element types every kernel here supports; the torch layer maps at::ScalarType onto it.
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// How a paged KV cache stores keys and values: in the model's dtype, or scaled to an FP8 format
// (x / scale, saturated, nearest even; read back as stored * scale). FP8 kernels are NVIDIA-only.
enum class KVFormat : int { kModel = 0, kE4M3 = 1, kE5M2 = 2 };

template <typename T>
struct TypeTag {
  using type = T;
};

#ifdef PAGODA_DEVICE_CODE  // the storage types exist for device compilers only (compat.h)
// Calls fn(TypeTag<T>{}) with T the storage type of dtype (float, half_t or bf16_t).
template <typename Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat16: return fn(TypeTag<half_t>{});
    case DType::kBFloat16: return fn(TypeTag<bf16_t>{});
  }
}
#endif

inline bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

// n rounded up to whole warps, at most cap threads.
inline int warp_threads(int n, int cap) {
  const int rounded = (n + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE * PAGODA_WARP_SIZE;
  return rounded < cap ? rounded : cap;
}

// Dynamic shared memory above 48 KiB needs an opt-in per kernel and device: done at the first launch
// (an eager one: the engine and the tests warm up before capturing graphs), not on every launch.
// The kernel is a template argument so that each instantiation keeps its own flags (every
// instantiation has the same function-pointer type: keyed by type, the first opt-in hid the rest).
template <auto Kernel>
void allow_shared_memory(int bytes) {
  if (bytes <= 48 * 1024) return;
  static bool done[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;  // the launch then reports the error
  if (device < 64 && !done[device]) {
    (void)cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    done[device] = true;
  }
}

}  // namespace pagoda
