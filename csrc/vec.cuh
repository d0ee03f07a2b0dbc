// Vectors of N scalars moved as one aligned load/store (torch-free; conversions are in compat.h).
#pragma once

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

// Elements per 16-byte vector for T.
template <typename T>
constexpr int kVecWidth = 16 / sizeof(T);

}  // namespace pagoda
