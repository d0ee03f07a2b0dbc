// The output pass every RMSNorm kernel here shares, with the rounding of layers/ops.py: the
// normalised value is rounded to the dtype before the weight multiplies it. Torch-free.
#pragma once

#include "../vec.cuh"

namespace pagoda {

// weight * (v * inv_rms), rounded as above, for one vector of a row.
template <typename T, int VEC>
PAGODA_INLINE Vec<T, VEC> rms_normed(const Vec<T, VEC>& v, const Vec<T, VEC>& w, float inv_rms) {
  Vec<T, VEC> r;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const T normed = from_float<T>(to_float(v.val[j]) * inv_rms);
    r.val[j] = from_float<T>(to_float(w.val[j]) * to_float(normed));
  }
  return r;
}

// out[i] = weight[i] * (x[i] * inv_rms) for one row of num_vecs vectors, the block's threads striding it.
template <typename T, int VEC>
PAGODA_INLINE void store_rms_normed_row(T* out, const T* x, const T* weight, int num_vecs, float inv_rms) {
  for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
    const Vec<T, VEC> v = load_vec<T, VEC>(x + i * VEC), w = load_vec<T, VEC>(weight + i * VEC);
    store_vec<T, VEC>(out + i * VEC, rms_normed(v, w, inv_rms));
  }
}

}  // namespace pagoda
