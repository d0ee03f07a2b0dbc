// silu(gate) * up of one element, rounded as torch does: silu(gate) to the dtype, then the product. Shared by
// the SiLU-and-mul kernel and the dense GEMV's gated epilogue, so that the two give the same bits.
#pragma once

#include "../vec.cuh"

namespace pagoda {

template <typename T>
PAGODA_INLINE T silu_mul(T gate, T up) {
  const float g = to_float(gate);
  const T silu = from_float<T>(g / (1.0f + expf(-g)));
  return from_float<T>(to_float(silu) * to_float(up));
}

}  // namespace pagoda
