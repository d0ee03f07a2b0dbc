// FP8 (e4m3 / e5m2) conversions of the FP8 KV cache (torch-free, NVIDIA only: cuda_fp8.h; its
// conversions are single instructions from sm_89 on and exact emulations before).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "../compat.h"
#include "common.h"

namespace pagoda {

PAGODA_INLINE __nv_fp8_interpretation_t fp8_interpretation(KVFormat format) {
  return format == KVFormat::kE5M2 ? __NV_E5M2 : __NV_E4M3;
}

// (lo / scale, hi / scale) saturated to the format's largest finite value and rounded to nearest even, as
// torch's (x.float() / scale).clamp(-max, max).to(fp8): two FP8 bytes, `lo` in the low one.
PAGODA_INLINE uint16_t float2_to_fp8x2(float lo, float hi, float scale, KVFormat format) {
  const float2 v = make_float2(__fdiv_rn(lo, scale), __fdiv_rn(hi, scale));
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, fp8_interpretation(format)));
}

// Two FP8 values (the low byte first) as two halves: exact (every FP8 value is a half).
PAGODA_INLINE __half2 fp8x2_to_half2(uint32_t two, KVFormat format) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), fp8_interpretation(format));
  return __half2(raw);
}

template <typename T>
PAGODA_INLINE uint32_t fp8x2_to(uint32_t two, KVFormat format);

template <>
PAGODA_INLINE uint32_t fp8x2_to<half_t>(uint32_t two, KVFormat format) {
  __half2 h = fp8x2_to_half2(two, format);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <>
PAGODA_INLINE uint32_t fp8x2_to<bf16_t>(uint32_t two, KVFormat format) {  // exact: every FP8 value is a bfloat16
  __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(fp8x2_to_half2(two, format)));
  return *reinterpret_cast<uint32_t*>(&b);
}

// Eight FP8 values (8 bytes, the first in the lowest byte) as eight T (16 bytes, the same order).
template <typename T>
PAGODA_INLINE uint4 fp8x8_to(uint2 eight, KVFormat format) {
  return make_uint4(fp8x2_to<T>(eight.x & 0xffffu, format), fp8x2_to<T>(eight.x >> 16, format),
                    fp8x2_to<T>(eight.y & 0xffffu, format), fp8x2_to<T>(eight.y >> 16, format));
}

}  // namespace pagoda
