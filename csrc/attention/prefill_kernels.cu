// Paged prefill attention (prompts, and chunks after a cached prefix) on tensor cores.
//
// FlashAttention-2 scheme: a CTA of 4 warps takes 64 query tokens of one query head (16 rows per
// warp) and walks the keys of its sequence in blocks of kBlockN, keeping an fp32 online softmax
// (running max and sum per row, in base 2) and the fp32 output accumulator in registers. Scores
// S = Q K^T and the update O += P V run as mma.sync m16n8k16 (16-bit inputs, fp32 accumulators);
// P never leaves registers (the S accumulator layout is the A-operand layout of the P V product).
// K and V blocks are gathered through the block table with cp.async into a two-stage shared-memory
// ring (the next block loads while this one is computed); rows are padded by 8 elements so the
// ldmatrix reads are free of bank conflicts. Keys past the context are zero-filled, never read.
// Only blocks that cross the causal diagonal (or any block, with a sliding window) are masked.
//
// Grid (num_query_tokens / 64 + num_sequences, num_heads): an upper bound on the query blocks;
// each CTA finds its (sequence, block) by binary search over query_start_loc on the device, and
// spare CTAs return at once.
#include "flash_api.h"
#include "flash_primitives.cuh"

namespace pagoda {
namespace flash {
namespace {

template <int HEAD>
struct PrefillShape {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = kPrefillBlockM;  // query rows per CTA, 16 per warp
  static constexpr int kBlockN = HEAD <= 128 ? 64 : 32;  // keys per step (registers and shared memory)
  static constexpr int kStride = HEAD + 8;  // padded shared-memory row, in elements (272 bytes for 128)
  static constexpr int kChunks = HEAD / 8;  // 16-byte chunks per row
  static constexpr int kTileElems = kBlockN * kStride;  // one K or V stage
  static constexpr int kSmemBytes = (kBlockM * kStride + 4 * kTileElems) * 2;  // Q + 2 stages of K and V
  static_assert(kBlockM == 16 * kWarps, "one mma row tile per warp");
};

// (sequence, query block within it) of CTA `pid`; block b of sequence s is CTA
// (qsl[s] - qsl[first]) / kBlockM + (s - first) + b (a strictly increasing start per sequence).
FLASH_INLINE void find_query_block(const int* qsl, int pid, int first, int last, int& seq, int& block) {
  const int base = qsl[first];
  int lo = first, hi = last;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if ((qsl[mid] - base) / kPrefillBlockM + (mid - first) <= pid) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  seq = lo;
  block = pid - ((qsl[lo] - base) / kPrefillBlockM + (lo - first));
}

// Q rows [row0, row0 + rows) of `head` into sQ [kBlockM][kStride]; rows past `rows` are zeros.
template <typename T, int HEAD>
FLASH_INLINE void load_q_tile(T* sQ, const FlashParams& p, int64_t token0, int rows, int head) {
  using Shape = PrefillShape<HEAD>;
  const T* q = static_cast<const T*>(p.query);
  for (int c = threadIdx.x; c < Shape::kBlockM * Shape::kChunks; c += Shape::kThreads) {
    const int r = c / Shape::kChunks, col = (c % Shape::kChunks) * 8;
    const bool valid = r < rows;
    const T* src = valid ? q + (token0 + r) * p.q_stride_token + head * p.q_stride_head + col : q;
    cp_async_16(sQ + r * Shape::kStride + col, src, valid);
  }
}

// Keys [n0, n0 + kBlockN) of kv head `kvh` into sK / sV [kBlockN][kStride], gathered through the
// block table; keys at or past key_hi are zeros.
template <typename T, int HEAD>
FLASH_INLINE void load_kv_tile(T* sK, T* sV, const FlashParams& p, const int* bt, int kvh, int n0, int key_hi) {
  using Shape = PrefillShape<HEAD>;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  for (int c = threadIdx.x; c < Shape::kBlockN * Shape::kChunks; c += Shape::kThreads) {
    const int r = c / Shape::kChunks, col = (c % Shape::kChunks) * 8;
    const int j = n0 + r;
    const bool valid = j < key_hi;
    int64_t off = 0;
    if (valid) {
      off = static_cast<int64_t>(bt[j / p.block_size]) * p.kv_stride_block +
            static_cast<int64_t>(j % p.block_size) * p.kv_stride_token + static_cast<int64_t>(kvh) * p.kv_stride_head + col;
    }
    cp_async_16(sK + r * Shape::kStride + col, k_cache + off, valid);
    cp_async_16(sV + r * Shape::kStride + col, v_cache + off, valid);
  }
}

// s[kBlockN / 8][4] = Q (this warp's 16 rows, in registers) x K^T (one stage in shared memory).
template <typename T, int HEAD>
FLASH_INLINE void warp_scores(float (&s)[PrefillShape<HEAD>::kBlockN / 8][4], const uint32_t (&qf)[HEAD / 16][4],
                              const T* sK, int lane) {
  using Shape = PrefillShape<HEAD>;
#pragma unroll
  for (int nb = 0; nb < Shape::kBlockN / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
  // lanes 0-7: keys 0-7 dims 0-7, 8-15: keys 0-7 dims 8-15, 16-23: keys 8-15 dims 0-7, 24-31: keys 8-15 dims 8-15
  const int row = (lane & 7) + ((lane >> 4) << 3), col = ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int np = 0; np < Shape::kBlockN / 16; ++np) {
#pragma unroll
    for (int kk = 0; kk < HEAD / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, sK + (np * 16 + row) * Shape::kStride + kk * 16 + col);
      mma_16816<T>(s[2 * np], qf[kk], b[0], b[1]);
      mma_16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }
}

// o[HEAD / 8][4] += P (this warp's probabilities, in the score layout) x V (one stage).
template <typename T, int HEAD>
FLASH_INLINE void warp_accumulate(float (&o)[HEAD / 8][4], const float (&s)[PrefillShape<HEAD>::kBlockN / 8][4],
                                  const T* sV, int lane) {
  using Shape = PrefillShape<HEAD>;
  // transposed loads: lanes 0-7 keys 0-7 dims 0-7, 8-15 keys 8-15 dims 0-7, 16-23 keys 0-7 dims 8-15, 24-31 keys 8-15 dims 8-15
  const int row = (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 8;
#pragma unroll
  for (int ks = 0; ks < Shape::kBlockN / 16; ++ks) {
    const uint32_t a[4] = {pack2<T>(s[2 * ks][0], s[2 * ks][1]), pack2<T>(s[2 * ks][2], s[2 * ks][3]),
                           pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]), pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
    for (int dp = 0; dp < HEAD / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, sV + (ks * 16 + row) * Shape::kStride + dp * 16 + col);
      mma_16816<T>(o[2 * dp], a, b[0], b[1]);
      mma_16816<T>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Scale scores to log2 units and hide keys a row must not see (after its position, outside the
// window, past the context). Element e of block nb: row g + 8 (e / 2), key n0 + 8 nb + 2t + e % 2.
template <int HEAD>
FLASH_INLINE void mask_scores(float (&s)[PrefillShape<HEAD>::kBlockN / 8][4], const FlashParams& p, bool masked,
                              int n0, int qpos_g, int key_hi, int lane) {
#pragma unroll
  for (int nb = 0; nb < PrefillShape<HEAD>::kBlockN / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = n0 + nb * 8 + 2 * (lane % 4) + (e & 1);
      const int qpos = qpos_g + 8 * (e >> 1);
      const bool visible = !masked || (j <= qpos && j < key_hi && (p.window <= 0 || j > qpos - p.window));
      s[nb][e] = visible ? s[nb][e] * p.scale_log2 : kNegInf;
    }
  }
}

// Online softmax step for this thread's two rows (g, g + 8): scores become probabilities
// 2^(s - m), the running sums (this thread's share of the row) and the accumulator are rescaled.
template <int HEAD>
FLASH_INLINE void softmax_step(float (&s)[PrefillShape<HEAD>::kBlockN / 8][4], float (&o)[HEAD / 8][4], float (&m)[2],
                               float (&l)[2]) {
  constexpr int kNB = PrefillShape<HEAD>::kBlockN / 8;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m[r];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
    mx = quad_max(mx);  // the 4 lanes of a quad hold one row
    const float m_use = mx == kNegInf ? 0.f : mx;  // nothing visible yet: keep everything at 0
    const float alpha = exp2_approx(m[r] - m_use);
    m[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      s[nb][2 * r] = exp2_approx(s[nb][2 * r] - m_use);
      s[nb][2 * r + 1] = exp2_approx(s[nb][2 * r + 1] - m_use);
      sum += s[nb][2 * r] + s[nb][2 * r + 1];
    }
    l[r] = l[r] * alpha + sum;
#pragma unroll
    for (int db = 0; db < HEAD / 8; ++db) {
      o[db][2 * r] *= alpha;
      o[db][2 * r + 1] *= alpha;
    }
  }
}

// Normalise and store this thread's part of the warp's 16 rows (rows past `rows` are not stored).
template <typename T, int HEAD>
FLASH_INLINE void store_rows(const FlashParams& p, const float (&o)[HEAD / 8][4], const float (&l)[2], int64_t token0,
                             int rows, int head, int warp_row, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(l[r]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int row = warp_row + lane / 4 + 8 * r;
    if (row >= rows) continue;
    T* dst = static_cast<T*>(p.out) + (token0 + row) * p.o_stride_token + head * p.o_stride_head + 2 * (lane % 4);
#pragma unroll
    for (int db = 0; db < HEAD / 8; ++db) {
      *reinterpret_cast<uint32_t*>(dst + db * 8) = pack2<T>(o[db][2 * r] * inv, o[db][2 * r + 1] * inv);
    }
  }
}

template <typename T, int HEAD>
__global__ void __launch_bounds__(PrefillShape<HEAD>::kThreads) prefill_kernel(const FlashParams p, int first_seq,
                                                                              int last_seq) {
  using Shape = PrefillShape<HEAD>;
  extern __shared__ uint4 smem[];  // 16-byte aligned
  T* sQ = reinterpret_cast<T*>(smem);  // [kBlockM][kStride]
  T* sK = sQ + Shape::kBlockM * Shape::kStride;  // 2 stages of [kBlockN][kStride]
  T* sV = sK + 2 * Shape::kTileElems;

  int seq, block;
  find_query_block(p.query_start_loc, blockIdx.x, first_seq, last_seq, seq, block);
  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int num_blocks = (q_len + Shape::kBlockM - 1) / Shape::kBlockM;
  if (block >= num_blocks) return;  // a spare CTA of the upper-bound grid (uniform over the CTA)
  const int m0 = (num_blocks - 1 - block) * Shape::kBlockM;  // causal: the longest rows start first
  const int head = blockIdx.y;
  const int kvh = head / (p.num_heads / p.num_kv_heads);
  const int rows = min(Shape::kBlockM, q_len - m0);
  const int first_qpos = p.seq_lens[seq] - q_len + m0;  // the cached prefix comes first
  const int key_hi = first_qpos + rows;  // keys after the tile's last query are never visible
  const int key_lo = p.window > 0 ? max(0, first_qpos - p.window + 1) / Shape::kBlockN * Shape::kBlockN : 0;
  const int num_steps = (key_hi - key_lo + Shape::kBlockN - 1) / Shape::kBlockN;
  const int* bt = p.block_tables + static_cast<int64_t>(seq) * p.bt_stride;
  const int64_t token0 = static_cast<int64_t>(q_start) + m0;

  load_q_tile<T, HEAD>(sQ, p, token0, rows, head);
  cp_async_commit();
  load_kv_tile<T, HEAD>(sK, sV, p, bt, kvh, key_lo, key_hi);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qpos_g = first_qpos + warp * 16 + lane / 4;  // this thread's first row; the other is + 8
  uint32_t qf[HEAD / 16][4];  // this warp's Q rows as mma A fragments
  float o[HEAD / 8][4];
#pragma unroll
  for (int db = 0; db < HEAD / 8; ++db) o[db][0] = o[db][1] = o[db][2] = o[db][3] = 0.f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

  for (int step = 0; step < num_steps; ++step) {
    const int stage = step & 1;
    const int n0 = key_lo + step * Shape::kBlockN;
    if (step + 1 < num_steps) {  // prefetch the next block into the other stage (freed by the last barrier)
      load_kv_tile<T, HEAD>(sK + (stage ^ 1) * Shape::kTileElems, sV + (stage ^ 1) * Shape::kTileElems, p, bt, kvh,
                            n0 + Shape::kBlockN, key_hi);
    }
    cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning this block
    cp_async_wait<1>();
    __syncthreads();
    if (step == 0) {
#pragma unroll
      for (int kk = 0; kk < HEAD / 16; ++kk) {
        ldmatrix_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * Shape::kStride + kk * 16 + (lane >> 4) * 8);
      }
    }
    float s[Shape::kBlockN / 8][4];
    warp_scores<T, HEAD>(s, qf, sK + stage * Shape::kTileElems, lane);
    const bool masked = n0 + Shape::kBlockN - 1 > first_qpos || p.window > 0;
    mask_scores<HEAD>(s, p, masked, n0, qpos_g, key_hi, lane);
    softmax_step<HEAD>(s, o, m, l);
    warp_accumulate<T, HEAD>(o, s, sV + stage * Shape::kTileElems, lane);
    __syncthreads();  // the prefetch issued at step + 1 overwrites this stage
  }
  store_rows<T, HEAD>(p, o, l, token0, rows, head, warp * 16, lane);
}

template <typename T, int HEAD>
cudaError_t launch_prefill_head(const FlashParams& p, int first_seq, int num_seqs, int num_query_tokens,
                                cudaStream_t stream) {
  using Shape = PrefillShape<HEAD>;
  const auto kernel = prefill_kernel<T, HEAD>;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(num_query_tokens / Shape::kBlockM + (num_seqs - first_seq), p.num_heads);
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p, first_seq, num_seqs);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_prefill_typed(const FlashParams& p, int first_seq, int num_seqs, int num_query_tokens,
                                 cudaStream_t stream) {
  switch (p.head_size) {
    case 64: return launch_prefill_head<T, 64>(p, first_seq, num_seqs, num_query_tokens, stream);
    case 128: return launch_prefill_head<T, 128>(p, first_seq, num_seqs, num_query_tokens, stream);
    case 256: return launch_prefill_head<T, 256>(p, first_seq, num_seqs, num_query_tokens, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_prefill(const FlashParams& p, int first_seq, int num_seqs, int num_query_tokens, DType dtype,
                           cudaStream_t stream) {
  if (num_seqs <= first_seq || num_query_tokens <= 0) return cudaSuccess;
  return dtype == DType::kHalf ? launch_prefill_typed<__half>(p, first_seq, num_seqs, num_query_tokens, stream)
                               : launch_prefill_typed<__nv_bfloat16>(p, first_seq, num_seqs, num_query_tokens, stream);
}

}  // namespace flash
}  // namespace pagoda
