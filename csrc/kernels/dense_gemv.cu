// Dense GEMV for decode steps of a few tokens: out [M, n] = x [M, k] @ w^T (+ bias), w [n, k] row major
// (nn.Linear's layout), fp32 sums, M <= kDenseGemvMaxTokens. Streaming the weights is the whole cost:
// one warp per R output rows over all of k, lane l reading 16-byte chunks l, l + 32, ... of each row,
// kBlock chunks of each row in flight while the block before them is multiplied (x, a few KiB shared by
// every warp, comes from L1). Launched as a programmatic dependent (dependent_launch.h): the first
// block of weights is requested before the wait, so a layer's weights stream while the kernel before
// it finishes. Rounding: the sum in fp32, plus the bias in fp32, rounded once to T (as cuBLAS does).
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

namespace pagoda {

namespace {

constexpr int kGemvThreads = 256;
constexpr int kBlock = 4;  // 16-byte chunks of each row per lane in flight

template <typename T, int R>
struct RowBlock {
  Vec<T, 8> chunk[R][kBlock];
};

// A 16-byte chunk of weights, each read once: past L1 on NVIDIA GPUs (x stays there), plain elsewhere.
template <typename T>
PAGODA_INLINE Vec<T, 8> load_once(const Vec<T, 8>* ptr) {
#if defined(__CUDA_ARCH__) && !defined(USE_ROCM)
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  Vec<T, 8> out;
  memcpy(&out, &v, sizeof(out));
  return out;
#else
  return *ptr;
#endif
}

// Chunks base + u * warp size + lane of each of the warp's rows (a chunk past the row rereads its last:
// loaded, never used).
template <typename T, int R>
PAGODA_INLINE void load_block(RowBlock<T, R>& dst, const Vec<T, 8>* const (&rows)[R], int base, int chunks, int lane) {
#pragma unroll
  for (int u = 0; u < kBlock; ++u) {
    const int c = min(base + u * PAGODA_WARP_SIZE + lane, chunks - 1);
#pragma unroll
    for (int r = 0; r < R; ++r) dst.chunk[r][u] = load_once<T>(rows[r] + c);
  }
}

template <typename T, int M, int R>
PAGODA_INLINE void multiply_block(float (&acc)[M][R], const RowBlock<T, R>& w, const T* x, int64_t x_stride,
                                  int base, int chunks, int lane) {
#pragma unroll
  for (int u = 0; u < kBlock; ++u) {
    const int c = base + u * PAGODA_WARP_SIZE + lane;
    if (c >= chunks) break;  // the chunks of a lane rise with u
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) wf[r][e] = to_float(w.chunk[r][u].val[e]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const Vec<T, 8> xv = load_vec<T, 8>(x + m * x_stride + static_cast<int64_t>(c) * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xf = to_float(xv.val[e]);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] += xf * wf[r][e];
      }
    }
  }
}

template <typename T, int M, int R>
__global__ void __launch_bounds__(kGemvThreads) dense_gemv_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                  int64_t x_stride, const T* __restrict__ w,
                                                                  const T* __restrict__ bias, int n, int k) {
  const int lane = threadIdx.x % PAGODA_WARP_SIZE, warp = threadIdx.x / PAGODA_WARP_SIZE;
  const int row0 = (blockIdx.x * (kGemvThreads / PAGODA_WARP_SIZE) + warp) * R;
  const int chunks = k / 8;
  const Vec<T, 8>* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const Vec<T, 8>*>(w + static_cast<int64_t>(min(row0 + r, n - 1)) * k);
  RowBlock<T, R> cur, next;
  load_block<T, R>(cur, rows, 0, chunks, lane);  // weights: written by no kernel, read before the wait
  start_as_dependent();
  float acc[M][R] = {};
  constexpr int kStride = kBlock * PAGODA_WARP_SIZE;  // chunks per block of a row
  for (int base = 0; base < chunks; base += kStride) {
    load_block<T, R>(next, rows, base + kStride, chunks, lane);  // past the row: its last chunk, unused
    multiply_block<T, M, R>(acc, cur, x, x_stride, base, chunks, lane);
    cur = next;
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float sum = warp_sum(acc[m][r]);
      const int row = row0 + r;
      if (lane == m * R + r && row < n) {
        out[static_cast<int64_t>(m) * n + row] = from_float<T>(bias == nullptr ? sum : sum + to_float(bias[row]));
      }
    }
}

// Rows per warp: PAGODA_GEMV_ROWS=1 or 2 forces it (for timing both), else 2 from 16384 rows on.
inline int rows_per_warp(int n) {
  static const int forced = [] {
    const char* value = std::getenv("PAGODA_GEMV_ROWS");
    return value == nullptr ? 0 : std::atoi(value);
  }();
  return forced == 1 || forced == 2 ? forced : n >= 16384 ? 2 : 1;
}

template <typename T, int M>
void launch_rows(T* out, const T* x, int64_t x_stride, const T* w, const T* bias, int n, int k, cudaStream_t stream) {
  constexpr int kWarps = kGemvThreads / PAGODA_WARP_SIZE;
  // two rows a warp share each x load; a layer of few rows keeps one a warp, so that more warps stream
  if (rows_per_warp(n) == 2) {
    const dim3 grid((n + 2 * kWarps - 1) / (2 * kWarps));
    launch_dependent(dense_gemv_kernel<T, M, 2>, grid, dim3(kGemvThreads), 0, stream, out, x, x_stride, w, bias, n, k);
  } else {
    const dim3 grid((n + kWarps - 1) / kWarps);
    launch_dependent(dense_gemv_kernel<T, M, 1>, grid, dim3(kGemvThreads), 0, stream, out, x, x_stride, w, bias, n, k);
  }
}

}  // namespace

void launch_dense_gemv(DType dtype, void* out, const void* x, int64_t x_stride, const void* weight, const void* bias,
                       int m, int n, int k, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2) {
      auto* o = static_cast<T*>(out);
      const auto* xp = static_cast<const T*>(x);
      const auto* w = static_cast<const T*>(weight);
      const auto* b = static_cast<const T*>(bias);
      switch (m) {
        case 1: launch_rows<T, 1>(o, xp, x_stride, w, b, n, k, stream); break;
        case 2: launch_rows<T, 2>(o, xp, x_stride, w, b, n, k, stream); break;
        case 3: launch_rows<T, 3>(o, xp, x_stride, w, b, n, k, stream); break;
        default: launch_rows<T, 4>(o, xp, x_stride, w, b, n, k, stream); break;
      }
    }
  });
}

}  // namespace pagoda
