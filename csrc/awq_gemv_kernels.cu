// AWQ int4 GEMV for few tokens (M = 1..8) on CUDA cores: out[M, N] = x[M, K] @ dequant(W)[K, N].
//
// W is in AutoAWQ's GEMM layout, read as it is: qweight int32 [K, N/8] (column j of each eight at
// bit 4 * (j/2 + 4 * (j%2))), qzeros int32 [K/G, N/8] packed alike, scales fp16 [K/G, N];
// W[k, n] = (q - z) * s. A block owns 64 output columns (8 packed words per row) and chunks of 512
// rows of K: 32 rows side by side (lanes 8 apart in a warp, then warps), 16 rows per thread, whose
// 16 words are loaded at once. A word's eight values are turned into floats without conversions:
// OR-ing a masked nibble into the mantissa of 2^23 and subtracting 2^23 gives the nibble times the
// power of two of its bit offset, which the per-group scale absorbs (exactly). Partial sums are
// reduced by shuffles and shared memory; blocks that split K add them with fp32 atomics.
#include <cuda_fp16.h>

#include <algorithm>

#include "dispatch.h"
#include "ops.h"
#include "vec.cuh"

namespace pagoda {

constexpr int kAwqThreads = 256;
constexpr int kAwqRowsPerThread = 16;
constexpr int kAwqRowLanes = 32;                                   // rows processed side by side
constexpr int kAwqChunk = kAwqRowsPerThread * kAwqRowLanes;        // 512 rows of K per pass
constexpr int kAwqBlockCols = 64;                                  // output columns per block (8 words)
constexpr int kAwqWarps = kAwqThreads / 32;

// float(bits) for a masked nibble `bits` (< 2^20): 2^23 | bits, minus 2^23, both exact.
PAGODA_INLINE float nibble_value(uint32_t bits) { return __uint_as_float(bits | 0x4B000000u) - 8388608.0f; }

// The eight values of one word in column order, column t still multiplied by 1 / kColumnScale[t].
PAGODA_INLINE void unpack_scaled(uint32_t q, float (&v)[8]) {
  const uint32_t hi = q >> 12;  // bits 20, 24, 28 (columns 3, 5, 7) move to 8, 12, 16
  v[0] = nibble_value(q & 0xFu);
  v[1] = nibble_value(q & 0xF0000u);
  v[2] = nibble_value(q & 0xF0u);
  v[3] = nibble_value(hi & 0xF00u);
  v[4] = nibble_value(q & 0xF00u);
  v[5] = nibble_value(hi & 0xF000u);
  v[6] = nibble_value(q & 0xF000u);
  v[7] = nibble_value(hi & 0xF0000u);
}

// 2^-offset of each column's value as unpack_scaled leaves it.
PAGODA_INLINE float column_scale(int t) {
  constexpr float kScale[8] = {1.0f, 1.0f / 65536, 1.0f / 16, 1.0f / 256, 1.0f / 256, 1.0f / 4096, 1.0f / 4096,
                               1.0f / 65536};
  return kScale[t];
}

// Column t of a word sits at bit kShift[t] (zero points are unpacked plainly: one word per group).
PAGODA_INLINE int column_shift(int t) { return 4 * ((t >> 1) + 4 * (t & 1)); }

// Per group and column: w = v * scaled + offset, with scaled = s * 2^-offset and offset = -z * s.
PAGODA_INLINE void load_group(const uint32_t* qzeros, const __half* scales, int64_t g, int p, int n_packed,
                              float (&scaled)[8], float (&offset)[8]) {
  const uint32_t z = __ldg(qzeros + g * n_packed + p);
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(scales + g * n_packed * 8) + p);  // 8 fp16
  const __half* s = reinterpret_cast<const __half*>(&raw);
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const float st = __half2float(s[t]);
    scaled[t] = st * column_scale(t);
    offset[t] = -static_cast<float>((z >> column_shift(t)) & 0xFu) * st;
  }
}

// Sums the 32 row lanes of each column (the 4 of a warp by shuffles, then the 8 warps through shared
// memory) and stores the block's [m, 64] result, or adds it atomically to out_acc when K is split.
template <typename T, int M>
PAGODA_INLINE void reduce_and_store(float (&acc)[M][8], float (&partial)[kAwqWarps][M][kAwqBlockCols], int lane,
                                    int warp, int c, int m, int N, float* out_acc, T* out) {
#pragma unroll
  for (int row = 0; row < M; ++row)
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      acc[row][t] += PAGODA_SHFL_XOR(acc[row][t], 8);
      acc[row][t] += PAGODA_SHFL_XOR(acc[row][t], 16);
    }
  if (lane < 8) {
#pragma unroll
    for (int row = 0; row < M; ++row)
#pragma unroll
      for (int t = 0; t < 8; ++t) partial[warp][row][c * 8 + t] = acc[row][t];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < M * kAwqBlockCols; idx += kAwqThreads) {
    const int row = idx / kAwqBlockCols, col = idx % kAwqBlockCols;
    const int n = blockIdx.x * kAwqBlockCols + col;
    if (row >= m || n >= N) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kAwqWarps; ++w) sum += partial[w][row][col];
    if (out_acc != nullptr) {
      atomicAdd(out_acc + static_cast<int64_t>(row) * N + n, sum);
    } else {
      out[static_cast<int64_t>(row) * N + n] = from_float<T>(sum);
    }
  }
}

template <typename T, int M, int G>
__global__ void __launch_bounds__(kAwqThreads) awq_gemv_kernel(
    const T* __restrict__ x, int64_t x_stride,    // [m, K], rows x_stride apart
    const uint32_t* __restrict__ qweight,         // [K, N/8]
    const uint32_t* __restrict__ qzeros,          // [K/G, N/8]
    const __half* __restrict__ scales,            // [K/G, N]
    float* __restrict__ out_acc,                  // [m, N] fp32, atomics (split K), or nullptr
    T* __restrict__ out,                          // [m, N] (no split), or nullptr
    int m, int K, int N, int chunks_per_block) {
  constexpr int kRowsPerGroup = G / kAwqRowLanes;  // a thread's consecutive rows within one group
  __shared__ float xs[M][kAwqChunk];
  __shared__ float partial[kAwqWarps][M][kAwqBlockCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = lane & 7;                  // word within the block's eight
  const int r = warp * 4 + (lane >> 3);    // row lane 0..31
  const int n_packed = N / 8;
  const int p = blockIdx.x * 8 + c;
  const bool col_ok = p < n_packed;
  float acc[M][8];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[i][t] = 0.0f;
  const int k_begin = blockIdx.y * chunks_per_block * kAwqChunk;
  const int k_end = min(K, k_begin + chunks_per_block * kAwqChunk);
  for (int k0 = k_begin; k0 < k_end; k0 += kAwqChunk) {
    uint32_t q[kAwqRowsPerThread];  // all of this thread's words of the chunk in flight at once
#pragma unroll
    for (int i = 0; i < kAwqRowsPerThread; ++i) {
      const int k = k0 + r + kAwqRowLanes * i;
      q[i] = (col_ok && k < K) ? __ldg(qweight + static_cast<int64_t>(k) * n_packed + p) : 0u;
    }
    __syncthreads();  // the previous chunk's xs reads are done
    for (int idx = threadIdx.x; idx < M * kAwqChunk; idx += kAwqThreads) {
      const int row = idx / kAwqChunk, k = k0 + idx % kAwqChunk;
      xs[row][idx % kAwqChunk] = (row < m && k < K) ? to_float(x[row * x_stride + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int gi = 0; gi < kAwqRowsPerThread / kRowsPerGroup; ++gi) {
      const int first = k0 + kAwqRowLanes * kRowsPerGroup * gi;  // this group's first row (all lanes)
      if (first >= K) break;
      float scaled[8], offset[8];
      if (col_ok) {
        load_group(qzeros, scales, first / G, p, n_packed, scaled, offset);
      } else {
#pragma unroll
        for (int t = 0; t < 8; ++t) scaled[t] = offset[t] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kRowsPerGroup; ++j) {
        const int i = gi * kRowsPerGroup + j;
        float w[8];
        unpack_scaled(q[i], w);
#pragma unroll
        for (int t = 0; t < 8; ++t) w[t] = fmaf(w[t], scaled[t], offset[t]);
#pragma unroll
        for (int row = 0; row < M; ++row) {
          const float xv = xs[row][r + kAwqRowLanes * i];
#pragma unroll
          for (int t = 0; t < 8; ++t) acc[row][t] = fmaf(xv, w[t], acc[row][t]);
        }
      }
    }
  }
  reduce_and_store<T, M>(acc, partial, lane, warp, c, m, N, out_acc, out);
}

template <typename T, int M>
void launch_awq_gemv(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                     const at::Tensor& scales, float* out_acc, T* out, int group, dim3 grid, int chunks_per_block,
                     cudaStream_t stream) {
  const int m = static_cast<int>(x.size(0)), K = static_cast<int>(x.size(1)), N = static_cast<int>(scales.size(1));
  const auto* xp = reinterpret_cast<const T*>(x.data_ptr());
  const auto* qw = reinterpret_cast<const uint32_t*>(qweight.data_ptr<int32_t>());
  const auto* qz = reinterpret_cast<const uint32_t*>(qzeros.data_ptr<int32_t>());
  const auto* sc = reinterpret_cast<const __half*>(scales.data_ptr<at::Half>());
#define PAGODA_AWQ_LAUNCH(G)                                                                                \
  awq_gemv_kernel<T, M, G><<<grid, kAwqThreads, 0, stream>>>(xp, x.stride(0), qw, qz, sc, out_acc, out, m, K, N, \
                                                             chunks_per_block)
  if (group == 32) {
    PAGODA_AWQ_LAUNCH(32);
  } else if (group == 64) {
    PAGODA_AWQ_LAUNCH(64);
  } else {
    PAGODA_AWQ_LAUNCH(128);
  }
#undef PAGODA_AWQ_LAUNCH
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void dispatch_awq_rows(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                       const at::Tensor& scales, float* out_acc, T* out, int group, dim3 grid, int chunks_per_block,
                       cudaStream_t stream) {
  const int64_t m = x.size(0);
  if (m <= 1) {
    launch_awq_gemv<T, 1>(x, qweight, qzeros, scales, out_acc, out, group, grid, chunks_per_block, stream);
  } else if (m <= 2) {
    launch_awq_gemv<T, 2>(x, qweight, qzeros, scales, out_acc, out, group, grid, chunks_per_block, stream);
  } else if (m <= 4) {
    launch_awq_gemv<T, 4>(x, qweight, qzeros, scales, out_acc, out, group, grid, chunks_per_block, stream);
  } else {
    launch_awq_gemv<T, 8>(x, qweight, qzeros, scales, out_acc, out, group, grid, chunks_per_block, stream);
  }
}

void check_awq_inputs(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                      const at::Tensor& scales, int64_t group) {
  check_cuda(x, "x");
  check_last_dim_contiguous(x, "x");
  TORCH_CHECK(x.dim() == 2 && x.size(0) >= 1 && x.size(0) <= 8, "awq_gemv: x must be [m, K] with 1 <= m <= 8");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, "awq_gemv: x must be fp16 or bf16");
  TORCH_CHECK(group == 32 || group == 64 || group == 128, "awq_gemv: group_size must be 32, 64 or 128");
  const int64_t K = x.size(1), N = scales.size(1);
  TORCH_CHECK(K % group == 0 && N % 8 == 0, "awq_gemv: K must be a multiple of the group size, N of 8");
  TORCH_CHECK(qweight.is_contiguous() && qweight.scalar_type() == at::kInt && qweight.size(0) == K &&
                  qweight.size(1) == N / 8, "awq_gemv: qweight must be contiguous int32 [K, N/8]");
  TORCH_CHECK(qzeros.is_contiguous() && qzeros.scalar_type() == at::kInt && qzeros.size(0) == K / group &&
                  qzeros.size(1) == N / 8, "awq_gemv: qzeros must be contiguous int32 [K/group, N/8]");
  TORCH_CHECK(scales.is_contiguous() && scales.scalar_type() == at::kHalf && scales.size(0) == K / group &&
                  aligned16(scales.data_ptr()), "awq_gemv: scales must be contiguous fp16 [K/group, N], 16-byte aligned");
  TORCH_CHECK(qweight.device() == x.device() && qzeros.device() == x.device() && scales.device() == x.device(),
              "awq_gemv: all tensors must be on x's device");
}

}  // namespace pagoda

at::Tensor awq_gemv(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& qzeros,
                    const at::Tensor& scales, int64_t group_size) {
  using namespace pagoda;
  check_awq_inputs(x, qweight, qzeros, scales, group_size);
  const int64_t m = x.size(0), K = x.size(1), N = scales.size(1);
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Split K over blocks only as far as it takes to give every SM about three blocks.
  const int col_blocks = static_cast<int>((N + kAwqBlockCols - 1) / kAwqBlockCols);
  const int chunks = static_cast<int>((K + kAwqChunk - 1) / kAwqChunk);
  const int sms = sm_count(x.get_device());
  const int wanted = std::max(1, std::min(chunks, (3 * sms + col_blocks - 1) / col_blocks));
  const int chunks_per_block = (chunks + wanted - 1) / wanted;
  const int splits = (chunks + chunks_per_block - 1) / chunks_per_block;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
  at::Tensor out = at::empty({m, N}, x.options());
  at::Tensor acc = splits > 1 ? at::zeros({m, N}, x.options().dtype(at::kFloat)) : at::Tensor();
  float* acc_ptr = splits > 1 ? acc.data_ptr<float>() : nullptr;
  if (x.scalar_type() == at::kHalf) {
    auto* o = splits > 1 ? nullptr : reinterpret_cast<half_t*>(out.data_ptr());
    dispatch_awq_rows<half_t>(x, qweight, qzeros, scales, acc_ptr, o, static_cast<int>(group_size), grid,
                                 chunks_per_block, stream);
  } else {
    auto* o = splits > 1 ? nullptr : reinterpret_cast<bf16_t*>(out.data_ptr());
    dispatch_awq_rows<bf16_t>(x, qweight, qzeros, scales, acc_ptr, o, static_cast<int>(group_size), grid,
                                     chunks_per_block, stream);
  }
  if (splits > 1) out.copy_(acc);
  return out;
}
