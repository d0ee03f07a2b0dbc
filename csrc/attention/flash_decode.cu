// Paged decode attention on tensor cores (mma.sync m16n8k16, sm_80+), GQA-aware, with split-KV.
//
// A program (128 threads, 4 warps) owns one sequence, one kv head, up to 16 of the (query token, q head)
// rows that share it (the rows of one m16 fragment, token-major; more rows take several programs) and
// one of `num_splits` slices of the context: every K/V byte is read once for all the q heads of a kv
// head. A decode has one query token; a short query (a verify step's k + 1 tokens, DecodeRange's
// query_p at most) is causal within itself, so the keys of its last tokens are masked row by row.
// Within the slice, warp w takes the 16-key tiles w, w + 4, w + 8, ...; each warp streams its tiles
// through its own STAGES-deep cp.async ring in shared memory (no block-wide barrier in the loop) and
// keeps its own running max, sum and fp32 output rows. At the end the four
// warps are merged through shared memory. With one split the program writes the output; otherwise
// it writes its normalised fp32 partial output and log2-sum-exp, and flash_decode_reduce_kernel
// combines the splits with weights 2^(lse_s - max lse).
//
// An FP8 cache (kFp8) is copied a chunk of 8 bytes at a time into the same tiles and widened to T in
// place by the lane that copied it (flash_common.cuh), k_scale folded into the softmax scale, v_scale
// into the output.
//
// The slice bounds come from seq_lens on the device, so any num_splits is correct; the launch
// shape depends on (num_decodes, num_splits) only: CUDA-graph safe, no host synchronisation.
#include <algorithm>
#include <type_traits>

#include "flash_attention.h"

#include "flash_common.cuh"

namespace pagoda {
namespace flash {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / kWarpSize;
constexpr int kDecodeKeys = 16;  // keys per warp tile (the k of one P V product)
constexpr int kDecodeRows = 16;  // q heads per program (the m of the fragments)

template <int D, int STAGES>
struct DecodeTile {
  // shared memory per program: D 64 (3 stages): 50 KiB; 128: 100 KiB with 3 stages (sm_90), 68 KiB with 2
  // (A100: two per SM; fits the 99 KiB of sm_86/sm_89); 256 (2 stages): 136 KiB (sm_80/sm_90 only: check())
  static constexpr int kStages = STAGES;
  static constexpr int kStageElems = 2 * kDecodeKeys * D;  // K then V tile
  static constexpr int kRingBytes = kDecodeWarps * kStages * kStageElems * 2;
  static constexpr int kMergeBytes = kDecodeWarps * kDecodeRows * (D + 2) * 4;  // fp32 rows, max, sum
  static constexpr int kSmemBytes = kDecodeRows * D * 2 + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes);
};

// A lane's share of a 16-key K and V tile: rows r0 + pass * kRowStep (r0 = lane / kChunks), 16-byte
// chunk c = lane % kChunks of each row.
template <int D>
struct TileLane {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowStep = kWarpSize / kChunks;
  static constexpr int kPasses = kDecodeKeys / kRowStep;
  int r0, c;
  PAGODA_INLINE explicit TileLane(int lane) : r0(lane / kChunks), c(lane % kChunks) {}
};

// cp.async this lane's share of the 16-key K and V tile at key0 (zeros from key_hi on). A tile
// within one cache block (every tile when the block size is a multiple of 16 and the slice starts
// 16-aligned) reads the block table once and steps rows by the token stride; otherwise each row
// finds its block. Offsets are in cache elements (kElem bytes each: 1 for an FP8 cache, whose chunks
// land in the first half of their slots; widen_kv_tile then fills the slots).
template <int D, bool kFp8>
PAGODA_INLINE void load_kv_tile(uint16_t* stage, const char* k_base, const char* v_base,
                                const int32_t* bt_row, int key0, int key_hi, const FastDiv& block,
                                int64_t stride_block, int64_t stride_token, const TileLane<D>& t) {
  using L = TileLane<D>;
  constexpr int kElem = kFp8 ? 1 : 2;
  uint16_t* k_tile = stage;
  uint16_t* v_tile = stage + kDecodeKeys * D;
  const uint32_t page_index = block.div(static_cast<uint32_t>(key0));
  const int in_page = key0 - static_cast<int>(page_index * block.divisor);
  if (in_page + kDecodeKeys <= static_cast<int>(block.divisor)) {
    // every row of the tile is inside this cache block, so rows past key_hi are mapped addresses too
    const int64_t row0 = static_cast<int64_t>(__ldg(bt_row + page_index)) * stride_block +
                         static_cast<int64_t>(in_page + t.r0) * stride_token + t.c * 8;
    const char* k_src = k_base + row0 * kElem;
    const char* v_src = v_base + row0 * kElem;
    const int64_t step = L::kRowStep * stride_token * kElem;
#pragma unroll
    for (int pass = 0; pass < L::kPasses; ++pass) {
      const int r = t.r0 + pass * L::kRowStep;
      const bool valid = key0 + r < key_hi;
      cp_async_chunk<kFp8>(k_tile + swizzle<D>(r, t.c), k_src + pass * step, valid);
      cp_async_chunk<kFp8>(v_tile + swizzle<D>(r, t.c), v_src + pass * step, valid);
    }
    return;
  }
#pragma unroll
  for (int pass = 0; pass < L::kPasses; ++pass) {
    const int r = t.r0 + pass * L::kRowStep;
    const bool valid = key0 + r < key_hi;
    const int64_t row = valid ? paged_row(bt_row, key0 + r, block, stride_block, stride_token) + t.c * 8 : 0;
    cp_async_chunk<kFp8>(k_tile + swizzle<D>(r, t.c), k_base + row * kElem, valid);
    cp_async_chunk<kFp8>(v_tile + swizzle<D>(r, t.c), v_base + row * kElem, valid);
  }
}

// In place: this lane's FP8 chunks of a K and V tile (its copies complete) widened to T.
template <typename T, int D>
PAGODA_INLINE void widen_kv_tile(uint16_t* stage, const TileLane<D>& t, KVFormat format) {
  using L = TileLane<D>;
#pragma unroll
  for (int pass = 0; pass < L::kPasses; ++pass) {
    const int r = t.r0 + pass * L::kRowStep;
    widen_fp8_chunk<T>(stage + swizzle<D>(r, t.c), format);
    widen_fp8_chunk<T>(stage + kDecodeKeys * D + swizzle<D>(r, t.c), format);
  }
}

template <typename T, int D, int STAGES, bool kFp8>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_decode_kernel(FlashAttentionArgs p, DecodeRange range, FastDiv block_div, int num_splits,
                        float* part_out, float* part_lse) {
#if PAGODA_FLASH_ENABLED
  using Tile = DecodeTile<D, STAGES>;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* s_q = smem;  // [16, D]
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  uint16_t* ring = smem + kDecodeRows * D + warp * STAGES * Tile::kStageElems;
  wait_for_prior_grids();  // launched as a programmatic dependent (dependent_launch.h)

  // x = (sequence, row block), row blocks adjacent: the programs that read the same keys run together
  // (their second reads hit L2); y = kv head
  const int group = p.num_heads / p.num_kv_heads;
  const int row_blocks = (range.query_p * group + kDecodeRows - 1) / kDecodeRows;
  const int seq = range.seq_lo + static_cast<int>(blockIdx.x) / row_blocks;
  const int kv_head = blockIdx.y;
  // row f of the sequence's query: token f / group, q head f % group of this kv head
  const int first_row = (static_cast<int>(blockIdx.x) % row_blocks) * kDecodeRows;
  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int rows = min(q_len * group - first_row, kDecodeRows);  // <= 0: a row block past this query
  const int split = blockIdx.z;

  const int seq_len = p.seq_lens[seq];
  const int first_pos = seq_len - q_len;  // the first query token's position; keys up to it are seen by every row
  const int lo = p.window > 0 ? max(first_pos + 1 - p.window, 0) : 0;
  const int per_split = ((seq_len - lo + num_splits - 1) / num_splits + 63) / 64 * 64;
  const int key_lo = lo + split * per_split;
  const int key_hi = min(key_lo + per_split, seq_len);
  const int num_tiles = key_hi > key_lo ? (key_hi - key_lo + kDecodeKeys - 1) / kDecodeKeys : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kDecodeWarps - 1) / kDecodeWarps : 0;

  allow_dependents_to_start();  // the split reduction (or the next kernel) may be scheduled now; it waits for this grid
  if (rows <= 0) return;  // every row past the query (a shorter query than query_p)
  // Q rows of this program (zeros for rows past the query), then the first tiles of each warp
  const auto* q_base = static_cast<const uint16_t*>(p.query) + kv_head * group * p.q_stride_head;
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int pass = 0; pass < kDecodeRows * kChunks / kDecodeThreads; ++pass) {
    const int i = threadIdx.x + pass * kDecodeThreads;
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows;
    const int f = first_row + r;
    const int64_t offset = static_cast<int64_t>(q_start + f / group) * p.q_stride_token + (f % group) * p.q_stride_head;
    cp_async16(s_q + swizzle<D>(r, c), q_base + (valid ? offset + c * 8 : 0), valid);
  }
  cp_async_commit();

  constexpr int kElem = kFp8 ? 1 : 2;  // bytes of a cache element
  const char* k_base = static_cast<const char*>(p.k_cache) + kv_head * p.cache_stride_head * kElem;
  const char* v_base = static_cast<const char*>(p.v_cache) + kv_head * p.cache_stride_head * kElem;
  const int32_t* bt_row = p.block_tables + seq * p.block_table_stride;
  auto tile_key0 = [&](int i) { return key_lo + (warp + i * kDecodeWarps) * kDecodeKeys; };
  const TileLane<D> tile_lane(lane);
  auto issue = [&](int i) {
    if (i < my_tiles) {
      load_kv_tile<D, kFp8>(ring + (i % STAGES) * Tile::kStageElems, k_base, v_base, bt_row, tile_key0(i), key_hi,
                            block_div, p.cache_stride_block, p.cache_stride_token, tile_lane);
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
  };
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) issue(i);
  cp_async_wait<STAGES - 1>();  // Q (the oldest group)
  __syncthreads();

  constexpr bool kQInRegisters = D <= 128;
  uint32_t q_frag[kQInRegisters ? D / 16 : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) load_a<D>(q_frag[k], s_q, 0, k, lane);
  }
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m: scaled (log2 domain)
  const float2 kv_scale = kv_scales<kFp8>(p.k_scale, p.v_scale);  // FP8: folded into the scores and the output
  const float scale = p.scale * kLog2e * kv_scale.x;
  int row_pos[2];  // the positions of this lane's rows' query tokens (lane / 4 and lane / 4 + 8)
#pragma unroll
  for (int half = 0; half < 2; ++half) row_pos[half] = first_pos + (first_row + lane / 4 + 8 * half) / group;
  // tiles every row sees whole: below key_hi and the first token's position + 1, and (window) from the
  // last token's first visible key on; only the others are masked key by key
  const int seen_hi = min(key_hi, first_pos + 1);
  const int seen_lo = p.window > 0 ? seq_len - p.window : 0;

  for (int i = 0; i < my_tiles; ++i) {
    __syncwarp();  // every lane is done with the stage the next issue overwrites
    issue(i + STAGES - 1);
    cp_async_wait<STAGES - 1>();  // tile i
    if constexpr (kFp8) widen_kv_tile<T, D>(ring + (i % STAGES) * Tile::kStageElems, tile_lane, p.kv_format);
    __syncwarp();
    const uint16_t* k_tile = ring + (i % STAGES) * Tile::kStageElems;
    const uint16_t* v_tile = k_tile + kDecodeKeys * D;

    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t a[4];
      if constexpr (kQInRegisters) {
        a[0] = q_frag[k][0], a[1] = q_frag[k][1], a[2] = q_frag[k][2], a[3] = q_frag[k][3];
      } else {
        load_a<D>(a, s_q, 0, k, lane);
      }
      qk_step<T, D>(s[0], s[1], a, k_tile, 0, k, lane);
    }
    const int key0 = tile_key0(i);
    float alpha[2];
    if (key0 + kDecodeKeys <= seen_hi && key0 >= seen_lo) {
      softmax_update<kDecodeKeys, false>(s, m, l, alpha, scale);
    } else {  // the slice's last tile (keys from key_hi on), or keys past a row's token or before its window
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * nt + 2 * (lane % 4) + (e & 1), pos = row_pos[e >> 1];
          if (key >= key_hi || key > pos || (p.window > 0 && key <= pos - p.window)) s[nt][e] = -INFINITY;
        }
      }
      softmax_update<kDecodeKeys, true>(s, m, l, alpha, scale);
    }
    rescale_output<D>(o, alpha);
    uint32_t prob[4];
    probs_to_a<T>(s[0], s[1], prob);
    pv_step<T, D>(o, prob, v_tile, 0, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // the rings are reused below

  // merge the warps: each writes its rows (fp32), max and sum; then every thread combines columns
  float* merge_o = reinterpret_cast<float*>(smem + kDecodeRows * D);  // [warps][16][D]
  float* merge_m = merge_o + kDecodeWarps * kDecodeRows * D;          // [warps][16]
  float* merge_l = merge_m + kDecodeWarps * kDecodeRows;              // [warps][16]
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = lane / 4 + 8 * half;
    const float sum = quad_sum(l[half]);
    float* row = merge_o + (warp * kDecodeRows + r) * D + 2 * (lane % 4);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<float2*>(row + 8 * dt) = make_float2(o[dt][2 * half], o[dt][2 * half + 1]);
    }
    if (lane % 4 == 0) {
      merge_m[warp * kDecodeRows + r] = m[half];
      merge_l[warp * kDecodeRows + r] = sum;
    }
  }
  __syncthreads();

  constexpr int kQuads = kDecodeRows * D / 4;
#pragma unroll
  for (int pass = 0; pass < kQuads / kDecodeThreads; ++pass) {
    const int i = threadIdx.x + pass * kDecodeThreads;
    const int r = i / (D / 4), c = (i % (D / 4)) * 4;
    if (r >= rows) continue;
    float row_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) row_max = fmaxf(row_max, merge_m[w * kDecodeRows + r]);
    const float base = row_max == -INFINITY ? 0.0f : row_max;
    float sum = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float weight = exp2f(merge_m[w * kDecodeRows + r] - base);  // 0 for a warp that saw nothing
      const float4 part = *reinterpret_cast<const float4*>(merge_o + (w * kDecodeRows + r) * D + c);
      sum += weight * merge_l[w * kDecodeRows + r];
      acc.x += weight * part.x, acc.y += weight * part.y, acc.z += weight * part.z, acc.w += weight * part.w;
    }
    const float inv = sum > 0.0f ? kv_scale.y / sum : 0.0f;
    const int f = first_row + r, token = q_start + f / group, head = kv_head * group + f % group;
    if (num_splits == 1) {
      uint2 packed;
      packed.x = pack2<T>(acc.x * inv, acc.y * inv);
      packed.y = pack2<T>(acc.z * inv, acc.w * inv);
      auto* out = static_cast<uint16_t*>(p.out) + token * p.o_stride_token + head * p.o_stride_head + c;
      *reinterpret_cast<uint2*>(out) = packed;
    } else {
      const int64_t slot = (static_cast<int64_t>(token - range.token_lo) * p.num_heads + head) * num_splits + split;
      *reinterpret_cast<float4*>(part_out + slot * D + c) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (c == 0) part_lse[slot] = sum > 0.0f ? row_max + log2f(sum) : -INFINITY;
    }
  }
#else
  __trap();  // built for an architecture without mma.sync bf16/cp.async: check() refuses < sm_80
#endif
}

// out[seq, head] = sum_s w_s * part_out[s] / sum_s w_s, w_s = 2^(lse_s - max lse). One program of 128
// threads per (sequence, q head): D / 4 threads, one per 4 columns, times 128 / (D / 4) split groups. Group g
// takes splits g, g + groups, ... eight at a time, all their loads in flight, with a running max; shared memory
// merges the groups (H200, 32 splits: 2.9 us; one group of D / 4 threads, eight loads in flight: 4.4 us).
constexpr int kReduceThreads = 128;

template <typename T, int D>
__global__ void __launch_bounds__(kReduceThreads)
    flash_decode_reduce_kernel(FlashAttentionArgs p, int token_lo, int num_splits, const float* part_out,
                               const float* part_lse) {
  constexpr int kCols = D / 4, kGroups = kReduceThreads / kCols, kBatch = 8;
  static_assert(kReduceThreads % kCols == 0, "a split group is a whole number of column threads");
  __shared__ float s_max[kGroups], s_sum[kGroups];
  __shared__ float4 s_acc[kGroups][kCols];
  start_as_dependent_trigger_first();  // a dependent of the decode kernel: its partials are complete after this
  const int row = blockIdx.x, head = blockIdx.y;  // query token token_lo + row
  const int col = threadIdx.x % kCols, grp = threadIdx.x / kCols;
  const int64_t first = (static_cast<int64_t>(row) * p.num_heads + head) * num_splits;
  float row_max = -INFINITY, sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = grp; s0 < num_splits; s0 += kGroups * kBatch) {
    float lse[kBatch];
    float4 part[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int split = s0 + j * kGroups;
      const bool valid = split < num_splits;
      lse[j] = valid ? __ldcg(part_lse + first + split) : -INFINITY;
      part[j] = valid ? __ldcg(reinterpret_cast<const float4*>(part_out + (first + split) * D) + col)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float batch_max = row_max;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) batch_max = fmaxf(batch_max, lse[j]);
    if (batch_max == -INFINITY) continue;  // only empty splits so far (lse = -inf): nothing to add
    const float alpha = exp2f(row_max - batch_max);  // 0 while row_max is -inf (the sums are 0 then)
    row_max = batch_max;
    sum *= alpha;
    acc.x *= alpha, acc.y *= alpha, acc.z *= alpha, acc.w *= alpha;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float weight = exp2f(lse[j] - row_max);  // 0 for an empty split
      sum += weight;
      acc.x += weight * part[j].x, acc.y += weight * part[j].y, acc.z += weight * part[j].z,
          acc.w += weight * part[j].w;
    }
  }
  if (col == 0) s_max[grp] = row_max, s_sum[grp] = sum;
  s_acc[grp][col] = acc;
  __syncthreads();
  if (grp != 0) return;
  float total_max = -INFINITY;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) total_max = fmaxf(total_max, s_max[g]);
  const float base = total_max == -INFINITY ? 0.0f : total_max;
  float total = 0.0f;
  float4 out4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const float weight = exp2f(s_max[g] - base);  // 0 for a group that saw only empty splits
    const float4 a = s_acc[g][col];
    total += weight * s_sum[g];
    out4.x += weight * a.x, out4.y += weight * a.y, out4.z += weight * a.z, out4.w += weight * a.w;
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  T* out = static_cast<T*>(p.out) + (token_lo + row) * p.o_stride_token + head * p.o_stride_head + col * 4;
  out[0] = from_float<T>(out4.x * inv);
  out[1] = from_float<T>(out4.y * inv);
  out[2] = from_float<T>(out4.z * inv);
  out[3] = from_float<T>(out4.w * inv);
}

// Ring stages per warp: 3 at head 64; at head 128, 3 where two such programs (100 KiB each) fit an SM
// (sm_90: 228 KiB), else 2 (A100's 164 KiB would hold one, sm_86/sm_89's 100 KiB one); 2 at head 256.
// Checked once per device. Calls fn(std::integral_constant<int, stages>{}).
template <int D, typename Fn>
auto with_decode_stages(Fn&& fn) {
  using Three = std::integral_constant<int, 3>;
  using Two = std::integral_constant<int, 2>;
  if constexpr (D <= 64) {
    return fn(Three{});
  } else if constexpr (D == 128) {
    static int known[64] = {};  // 0 unknown, 1 no, 2 yes
    int device = 0, per_sm = 0;
    cudaGetDevice(&device);
    if (device < 64 && known[device] == 0) {
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
      constexpr int kReservedPerBlock = 1024;  // the runtime's share of each block's shared memory
      known[device] = per_sm >= 2 * (DecodeTile<D, 3>::kSmemBytes + kReservedPerBlock) ? 2 : 1;
    }
    return device < 64 && known[device] == 2 ? fn(Three{}) : fn(Two{});
  } else {
    return fn(Two{});
  }
}

template <typename T, int D, int STAGES, bool kFp8>
void launch_decode_stages(const FlashAttentionArgs& args, const DecodeRange& range, int num_splits, float* part_out,
                          float* part_lse, cudaStream_t stream) {
  const int bytes = DecodeTile<D, STAGES>::kSmemBytes;
  auto kernel = flash_decode_kernel<T, D, STAGES, kFp8>;
  allow_shared_memory<flash_decode_kernel<T, D, STAGES, kFp8>>(bytes);
  const int rows = range.query_p * (args.num_heads / args.num_kv_heads);  // (token, q head) rows a kv head
  const dim3 grid(range.num_seqs * ((rows + kDecodeRows - 1) / kDecodeRows), args.num_kv_heads, num_splits);
  const FastDiv block_div(static_cast<uint32_t>(args.block_size > 0 ? args.block_size : 1));
  launch_dependent(kernel, grid, dim3(kDecodeThreads), bytes, stream, args, range, block_div, num_splits, part_out,
                   part_lse);
  if (num_splits > 1) {
    const auto* out = static_cast<const float*>(part_out);
    const auto* lse = static_cast<const float*>(part_lse);
    launch_dependent(flash_decode_reduce_kernel<T, D>, dim3(range.num_tokens, args.num_heads), dim3(kReduceThreads), 0,
                     stream, args, range.token_lo, num_splits, out, lse);
  }
}

template <typename T, int D, bool kFp8>
void launch_decode(const FlashAttentionArgs& args, const DecodeRange& range, int num_splits, float* part_out,
                   float* part_lse, cudaStream_t stream) {
  with_decode_stages<D>([&](auto stages) {
    launch_decode_stages<T, D, decltype(stages)::value, kFp8>(args, range, num_splits, part_out, part_lse, stream);
  });
}

template <typename T, bool kFp8>
void launch_decode_head(const FlashAttentionArgs& args, const DecodeRange& range, int num_splits, float* part_out,
                        float* part_lse, cudaStream_t stream) {
  switch (args.head_size) {
    case 64: return launch_decode<T, 64, kFp8>(args, range, num_splits, part_out, part_lse, stream);
    case 128: return launch_decode<T, 128, kFp8>(args, range, num_splits, part_out, part_lse, stream);
#ifndef PAGODA_FLASH_MINIMAL  // CI's compile check builds fewer head sizes
    case 256: return launch_decode<T, 256, kFp8>(args, range, num_splits, part_out, part_lse, stream);
#endif
    default: return;  // the torch layer checks flash_supports_head_size first
  }
}

template <typename T, int D, int STAGES>
int programs_per_sm_stages() {  // an FP8 cache's kernel has the same shared memory and launch shape
  allow_shared_memory<flash_decode_kernel<T, D, STAGES, false>>(DecodeTile<D, STAGES>::kSmemBytes);
  int programs = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&programs, flash_decode_kernel<T, D, STAGES, false>, kDecodeThreads,
                                                    DecodeTile<D, STAGES>::kSmemBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return programs;
}

template <typename T, int D>
int programs_per_sm() {
  return with_decode_stages<D>([](auto stages) { return programs_per_sm_stages<T, D, decltype(stages)::value>(); });
}

template <typename T>
int programs_per_sm_of_head(int head_size) {
  switch (head_size) {
    case 64: return programs_per_sm<T, 64>();
    case 128: return programs_per_sm<T, 128>();
#ifndef PAGODA_FLASH_MINIMAL
    case 256: return programs_per_sm<T, 256>();
#endif
    default: return 0;
  }
}

}  // namespace flash

int flash_decode_programs_per_sm(DType dtype, int head_size) {
  return dtype == DType::kFloat16 ? flash::programs_per_sm_of_head<half_t>(head_size)
                                  : flash::programs_per_sm_of_head<bf16_t>(head_size);
}

void launch_flash_decode(DType dtype, const FlashAttentionArgs& args, const DecodeRange& range, int num_splits,
                         float* part_out, float* part_lse, cudaStream_t stream) {
  if (range.num_seqs <= 0 || range.num_tokens <= 0) return;
  const bool fp8 = args.kv_format != KVFormat::kModel;
  if (dtype == DType::kBFloat16) {
    fp8 ? flash::launch_decode_head<bf16_t, true>(args, range, num_splits, part_out, part_lse, stream)
        : flash::launch_decode_head<bf16_t, false>(args, range, num_splits, part_out, part_lse, stream);
  } else if (dtype == DType::kFloat16) {
    fp8 ? flash::launch_decode_head<half_t, true>(args, range, num_splits, part_out, part_lse, stream)
        : flash::launch_decode_head<half_t, false>(args, range, num_splits, part_out, part_lse, stream);
  }
}

}  // namespace pagoda
