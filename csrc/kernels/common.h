// Host-side helpers of the kernel layer (torch-free): the dtype tag the torch layer passes in,
// dispatch on it, alignment and launch-shape helpers.
#pragma once

#include <cstdint>

#include "../compat.h"

namespace pagoda {

// The element types every kernel here supports; the torch layer maps at::ScalarType onto it.
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the storage type of dtype (float, half_t or bf16_t).
template <typename Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat16: return fn(TypeTag<half_t>{});
    case DType::kBFloat16: return fn(TypeTag<bf16_t>{});
  }
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

// n rounded up to whole warps, at most cap threads.
inline int warp_threads(int n, int cap) {
  const int rounded = (n + PAGODA_WARP_SIZE - 1) / PAGODA_WARP_SIZE * PAGODA_WARP_SIZE;
  return rounded < cap ? rounded : cap;
}

}  // namespace pagoda
