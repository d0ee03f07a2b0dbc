// Paged prefill attention (FlashAttention-2 algorithm) on tensor cores: mma.sync m16n8k16, sm_80+.
//
// A program (128 threads, 4 warps) owns 64 query tokens of one sequence and one q head; warp w owns
// rows 16w..16w+15. It walks the keys of its sequence up to its last query position in tiles of
// BN keys, read straight from the paged cache through the block table (cached prefix and this
// step's keys alike: the KV write runs first), keeping per row the running max, the sum and the
// fp32 output in registers (online softmax, log2 domain). Shared memory holds Q [64, D], one K tile
// and one V tile [BN, D] (swizzled, see flash_common.cuh); the V tile loads while Q K^T runs and the
// next K tile while P V runs (cp.async). Tiles that reach past the tile's first query position (or
// the sliding window) are masked; keys past the sequence are zero-filled.
//
// Grid: x = num_prefill_tokens / 64 + num_prefills (an upper bound on the query blocks of all
// prefills; each program finds its (sequence, block) by binary search over query_start_loc and
// programs past their sequence's end return), heaviest (last) blocks first; y = q head.
#include <algorithm>

#include "flash_attention.h"
#include "flash_common.cuh"

namespace pagoda {
namespace flash {

constexpr int kPrefillThreads = 128;
constexpr int kPrefillBlockM = kFlashPrefillBlockM;  // 4 warps x 16 rows

template <int D>
struct PrefillTile {
  static constexpr int kBlockN = D <= 128 ? 64 : 32;  // keys per step (registers: S tile + O rows)
  static constexpr bool kQInRegisters = D <= 128;    // else reread Q fragments from shared memory
  static constexpr int kSmemBytes = (kPrefillBlockM + 2 * kBlockN) * D * 2;
};

// (sequence, query block within it) of program `pid`: block i of sequence s is program
// (qsl[s] - qsl[seq_lo]) / 64 + (s - seq_lo) + i.
PAGODA_INLINE void find_query_block(const int32_t* qsl, int pid, int seq_lo, int seq_hi, int& seq, int& block) {
  const int base = qsl[seq_lo];
  int lo = seq_lo, hi = seq_hi;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    const int first = (qsl[mid] - base) / kPrefillBlockM + mid - seq_lo;
    if (first <= pid) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  seq = lo;
  block = pid - ((qsl[lo] - base) / kPrefillBlockM + lo - seq_lo);
}

// cp.async a [ROWS, D] tile: row r comes from base + src_row(r) (zeros where src_row(r) < 0).
template <int D, int ROWS, typename RowFn>
PAGODA_INLINE void load_tile(uint16_t* tile, const uint16_t* base, RowFn src_row) {
  constexpr int kChunks = D / 8;
  static_assert(ROWS * kChunks % kPrefillThreads == 0, "whole passes of the block");
#pragma unroll
  for (int pass = 0; pass < ROWS * kChunks / kPrefillThreads; ++pass) {
    const int i = threadIdx.x + pass * kPrefillThreads;
    const int r = i / kChunks, c = i % kChunks;
    const int64_t offset = src_row(r);
    cp_async16(tile + swizzle<D>(r, c), offset >= 0 ? base + offset + c * 8 : base, offset >= 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kPrefillThreads)
    flash_prefill_kernel(FlashAttentionArgs p, int seq_lo, int seq_hi) {
#if PAGODA_FLASH_ENABLED
  using Tile = PrefillTile<D>;
  constexpr int BN = Tile::kBlockN, BM = kPrefillBlockM;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* s_q = smem;            // [BM, D]
  uint16_t* s_k = s_q + BM * D;    // [BN, D]
  uint16_t* s_v = s_k + BN * D;    // [BN, D]

  int seq, block;
  find_query_block(p.query_start_loc, gridDim.x - 1 - blockIdx.x, seq_lo, seq_hi, seq, block);
  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int m0 = block * BM;
  if (m0 >= q_len) return;  // the whole program: no barrier is skipped by some threads only
  const int head = blockIdx.y;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int seq_len = p.seq_lens[seq];
  const int first_pos = seq_len - q_len + m0;                   // position of query row 0
  const int last_pos = seq_len - q_len + min(m0 + BM, q_len) - 1;
  const int key_hi = last_pos + 1;                                // keys [key_lo, key_hi)
  const int key_lo = p.window > 0 ? max(first_pos - p.window + 1, 0) / BN * BN : 0;
  const int num_tiles = (key_hi - key_lo + BN - 1) / BN;

  const auto* q_base = static_cast<const uint16_t*>(p.query) + head * p.q_stride_head;
  const auto* k_base = static_cast<const uint16_t*>(p.k_cache) + kv_head * p.cache_stride_head;
  const auto* v_base = static_cast<const uint16_t*>(p.v_cache) + kv_head * p.cache_stride_head;
  const int32_t* bt_row = p.block_tables + seq * p.block_table_stride;
  const int64_t q_stride = p.q_stride_token, stride_block = p.cache_stride_block, stride_token = p.cache_stride_token;
  const int block_size = p.block_size;
  auto q_row = [=](int r) -> int64_t { return m0 + r < q_len ? (q_start + m0 + r) * q_stride : -1; };
  auto kv_row = [=](int key0) {
    return [=](int r) -> int64_t {
      const int pos = key0 + r;
      return pos < key_hi ? paged_row(bt_row, pos, block_size, stride_block, stride_token) : -1;
    };
  };

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row0 = 16 * warp;                                // this warp's first row in the tile
  const int pos0 = first_pos + row0 + lane / 4;              // query position of fragment row g
  const float scale = p.scale * kLog2e;

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  uint32_t q_frag[Tile::kQInRegisters ? D / 16 : 1][4];

  load_tile<D, BM>(s_q, q_base, q_row);
  load_tile<D, BN>(s_k, k_base, kv_row(key_lo));
  cp_async_commit();

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int key0 = key_lo + tile * BN;
    cp_async_wait<0>();  // K (and Q) of this tile
    __syncthreads();
    load_tile<D, BN>(s_v, v_base, kv_row(key0));  // overlaps Q K^T
    cp_async_commit();
    if constexpr (Tile::kQInRegisters) {
      if (tile == 0) {
#pragma unroll
        for (int k = 0; k < D / 16; ++k) load_a<D>(q_frag[k], s_q, row0, k, lane);
      }
    }

    float s[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t a[4];
      if constexpr (Tile::kQInRegisters) {
        a[0] = q_frag[k][0], a[1] = q_frag[k][1], a[2] = q_frag[k][2], a[3] = q_frag[k][3];
      } else {
        load_a<D>(a, s_q, row0, k, lane);
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) qk_step<T, D>(s[2 * np], s[2 * np + 1], a, s_k, 16 * np, k, lane);
    }

    // causal (and window) mask only where some key of the tile is invisible to some row
    const bool masked = key0 + BN - 1 > first_pos || (p.window > 0 && key0 <= last_pos - p.window);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * scale;
        if (masked) {
          const int key = key0 + 8 * nt + 2 * (lane % 4) + (e & 1);
          const int pos = pos0 + 8 * (e >> 1);
          const bool visible = key <= pos && (p.window <= 0 || key > pos - p.window);
          x = visible ? x : -INFINITY;
        }
        s[nt][e] = x;
      }
    }
    online_softmax<BN, D>(s, m, l, o);
    uint32_t prob[BN / 16][4];
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) probs_to_a<T>(s[2 * kp], s[2 * kp + 1], prob[kp]);

    cp_async_wait<0>();  // V of this tile; and every warp is done reading K
    __syncthreads();
    if (tile + 1 < num_tiles) {
      load_tile<D, BN>(s_k, k_base, kv_row(key0 + BN));  // overlaps P V
      cp_async_commit();
    }
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) pv_step<T, D>(o, prob[kp], s_v, 16 * kp, lane);
  }

  // normalise, stage this warp's 16 rows in its own rows of s_q (no other warp reads them), store
  // 16-byte chunks
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(l[half]);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int r = row0 + lane / 4 + 8 * half;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const uint32_t packed = pack2<T>(o[dt][2 * half] * inv, o[dt][2 * half + 1] * inv);
      *reinterpret_cast<uint32_t*>(s_q + swizzle<D>(r, dt) + 2 * (lane % 4)) = packed;
    }
  }
  __syncwarp();
  auto* o_base = static_cast<uint16_t*>(p.out) + head * p.o_stride_head;
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += kWarpSize) {
    const int r = row0 + i / kChunks, c = i % kChunks;
    if (m0 + r < q_len) {
      const int64_t token = q_start + m0 + r;
      *reinterpret_cast<uint4*>(o_base + token * p.o_stride_token + c * 8) =
          *reinterpret_cast<const uint4*>(s_q + swizzle<D>(r, c));
    }
  }
#else
  __trap();  // built for an architecture without mma.sync bf16/cp.async: check() refuses < sm_80
#endif
}

template <typename T, int D>
void launch_prefill(const FlashAttentionArgs& args, int seq_lo, int seq_hi, int64_t num_tokens, cudaStream_t stream) {
  const int bytes = PrefillTile<D>::kSmemBytes;
  auto kernel = flash_prefill_kernel<T, D>;
  allow_shared_memory<flash_prefill_kernel<T, D>>(bytes);
  const dim3 grid(static_cast<unsigned>(num_tokens / kPrefillBlockM + (seq_hi - seq_lo)), args.num_heads);
  kernel<<<grid, kPrefillThreads, bytes, stream>>>(args, seq_lo, seq_hi);
}

template <typename T>
void launch_prefill_head(const FlashAttentionArgs& args, int seq_lo, int seq_hi, int64_t num_tokens,
                         cudaStream_t stream) {
  switch (args.head_size) {
    case 64: return launch_prefill<T, 64>(args, seq_lo, seq_hi, num_tokens, stream);
    case 128: return launch_prefill<T, 128>(args, seq_lo, seq_hi, num_tokens, stream);
#ifndef PAGODA_FLASH_MINIMAL  // CI's compile check builds one head size
    case 256: return launch_prefill<T, 256>(args, seq_lo, seq_hi, num_tokens, stream);
#endif
    default: return;  // the torch layer checks flash_supports_head_size first
  }
}

}  // namespace flash

bool flash_supports_head_size(int head_size) { return head_size == 64 || head_size == 128 || head_size == 256; }

void launch_flash_prefill(DType dtype, const FlashAttentionArgs& args, int num_decodes, int num_seqs,
                          int64_t num_prefill_tokens, cudaStream_t stream) {
  if (num_seqs <= num_decodes || num_prefill_tokens <= 0) return;
  if (dtype == DType::kBFloat16) {
    flash::launch_prefill_head<bf16_t>(args, num_decodes, num_seqs, num_prefill_tokens, stream);
  } else if (dtype == DType::kFloat16) {
    flash::launch_prefill_head<half_t>(args, num_decodes, num_seqs, num_prefill_tokens, stream);
  }
}

}  // namespace pagoda
