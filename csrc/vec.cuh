// Vectors of N scalars moved as one aligned load/store, plus float conversions for the dtypes.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "compat.h"

namespace pagoda {

// N elements of T; with N * sizeof(T) == 16 a load is one 128-bit transaction.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T val[N];
};

template <typename T, int N>
PAGODA_INLINE Vec<T, N> load_vec(const T* ptr) {
  return *reinterpret_cast<const Vec<T, N>*>(ptr);
}

template <typename T, int N>
PAGODA_INLINE void store_vec(T* ptr, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(ptr) = v;
}

template <typename T>
PAGODA_INLINE float to_float(T x) {
  return static_cast<float>(x);
}

template <typename T>
PAGODA_INLINE T from_float(float x) {
  return static_cast<T>(x);  // round to nearest even for half and bfloat16
}

// Elements per 16-byte vector for T.
template <typename T>
constexpr int kVecWidth = 16 / sizeof(T);

}  // namespace pagoda
