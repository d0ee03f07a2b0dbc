// Device building blocks of the flash kernels: 16-bit float packing, base-2 exponent, warp
// reductions, and (sm80+) the tensor-core instructions as inline PTX: mma.sync m16n8k16 with fp32
// accumulators, ldmatrix and cp.async. NVIDIA only (ROCm would need its own MFMA path).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#define FLASH_INLINE __device__ __forceinline__

namespace pagoda {
namespace flash {

constexpr float kNegInf = -__builtin_inff();

// ---- 16-bit floats: two values packed in one 32-bit register (the mma operand format) ----

template <typename T>
struct Half2;
template <>
struct Half2<__half> {
  using type = __half2;
};
template <>
struct Half2<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

template <typename T>
FLASH_INLINE uint32_t pack2(float lo, float hi);
template <>
FLASH_INLINE uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
FLASH_INLINE uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <typename T>
FLASH_INLINE float2 unpack2(uint32_t bits);
template <>
FLASH_INLINE float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<__half2*>(&bits));
}
template <>
FLASH_INLINE float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}

template <typename T>
FLASH_INLINE float to_float(T x);
template <>
FLASH_INLINE float to_float<__half>(__half x) {
  return __half2float(x);
}
template <>
FLASH_INLINE float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
FLASH_INLINE T from_float(float x);
template <>
FLASH_INLINE __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
FLASH_INLINE __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// 2^x with the hardware approximation (2 ulp); 2^-inf = 0.
FLASH_INLINE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- warp reductions over groups of LANES consecutive lanes (LANES a power of two <= 32) ----

template <int LANES>
FLASH_INLINE float group_sum(float v) {
#pragma unroll
  for (int mask = LANES / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
  return v;
}

// Max and sum over the 4 lanes of a quad (the lanes that share an mma accumulator row).
FLASH_INLINE float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
FLASH_INLINE float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- tensor cores (sm80+) ----
// Built for an older architecture (a wide TORCH_CUDA_ARCH_LIST), these trap instead: the backend's
// check() refuses GPUs below compute capability 8.0, so they are never reached.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FLASH_HAS_SM80 0
#else
#define FLASH_HAS_SM80 1
#endif

FLASH_INLINE uint32_t smem_addr(const void* ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }

// d[16x8] += a[16x16] (row-major) * b[16x8] (col-major), 16-bit inputs, fp32 accumulators.
// Fragments (g = lane / 4, t = lane % 4): a0 (row g, k 2t..2t+1), a1 (row g+8), a2 (row g, k 2t+8..),
// a3 (row g+8, k 2t+8..); b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g); d0,d1 (row g, cols 2t, 2t+1),
// d2,d3 (row g+8, cols 2t, 2t+1).
template <typename T>
FLASH_INLINE void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
FLASH_INLINE void mma_16816<__half>(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if FLASH_HAS_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}
template <>
FLASH_INLINE void mma_16816<__nv_bfloat16>(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if FLASH_HAS_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// Four 8x8 16-bit matrices from shared memory; lane i gives the address of row i % 8 of matrix
// i / 8 and receives, of each matrix m, r[m] = (row lane / 4, cols 2 (lane % 4), +1).
FLASH_INLINE void ldmatrix_x4(uint32_t r[4], const void* smem_row) {
#if FLASH_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
#else
  __trap();
#endif
}
// The same, each matrix transposed: r[m] = (rows 2 (lane % 4), +1 of col lane / 4).
FLASH_INLINE void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row) {
#if FLASH_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
#else
  __trap();
#endif
}

// 16 bytes global -> shared without passing through registers; valid == false writes 16 zero
// bytes and reads nothing (src must still be a mapped address).
FLASH_INLINE void cp_async_16(void* smem, const void* gmem, bool valid) {
#if FLASH_HAS_SM80
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
#else
  __trap();
#endif
}
FLASH_INLINE void cp_async_commit() {
#if FLASH_HAS_SM80
  asm volatile("cp.async.commit_group;\n" ::);
#else
  __trap();
#endif
}
// Wait until at most N committed groups of this thread are still in flight.
template <int N>
FLASH_INLINE void cp_async_wait() {
#if FLASH_HAS_SM80
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

}  // namespace flash
}  // namespace pagoda
