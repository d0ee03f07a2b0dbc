// Paged prefill attention (FlashAttention-2 algorithm) on tensor cores: mma.sync m16n8k16, sm_80+.
//
// A program owns BM = 128 query tokens of one sequence and one q head. Head 64/128: 4 warps, warp w
// owns rows 32w..32w+31 as two m16 row tiles, so every K or V fragment an ldmatrix loads feeds two
// MMAs (one per row tile); head 256: 8 warps of one row tile (two would need 256 fp32 output
// registers per thread). It walks the keys of its sequence up to its last query position in tiles
// of BN keys, read straight from the paged cache through the block table (cached prefix and this
// step's keys alike: the KV write runs first), keeping per row the running max, the sum and the
// fp32 output in registers (online softmax, log2 domain).
//
// Shared memory: Q [BM, D] (read back by ldmatrix at every k-step; registers hold S and O) and two
// stages of K and V tiles [BN, D] (swizzled, see flash_common.cuh). One barrier per key tile: after
// it, the next tile's K and V loads (cp.async) go to the other stage and run under this tile's
// products, their row addresses read from a table (RowTable) the warps fill one tile ahead. A warp
// skips the tiles none of its rows may see and masks only the tiles that the causal diagonal or the
// sliding window cut for its rows; keys past the range are zero-filled. docs/attention_flash.md counts
// the loop's instructions in SASS. An FP8 cache (kFp8) is copied 8 bytes a chunk into the same tiles and
// widened in place by the thread that copied it before the barrier that publishes the tile
// (flash_common.cuh); k_scale is folded into the softmax scale, v_scale into the output.
//
// Grid: x = num_prefill_tokens / BM + num_prefills (an upper bound on the query blocks of all
// prefills; each program finds its (sequence, block) by binary search over query_start_loc and
// programs past their sequence's end return), heaviest (last) blocks first; y = q head.
#include <algorithm>
#include <climits>

#include "flash_attention.h"
#include "flash_common.cuh"

namespace pagoda {
namespace flash {

constexpr int kPrefillBlockM = kFlashPrefillBlockM;  // query rows per program

template <int D>
struct PrefillTile {
  static constexpr int kRowTiles = D <= 128 ? 2 : 1;  // m16 row tiles per warp (registers: O is [kRowTiles][D/8][4])
  static constexpr int kWarpRows = 16 * kRowTiles;
  static constexpr int kWarps = kPrefillBlockM / kWarpRows;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kBlockN = D <= 128 ? 64 : 32;  // keys per tile (registers: S is [kRowTiles][BN/8][4])
  static constexpr int kStageElems = 2 * kBlockN * D;  // one K tile and one V tile
  static constexpr int kTableBytes = 2 * kBlockN * 8;    // two slots of key-row offsets (RowTable)
  static constexpr int kSmemBytes = (kPrefillBlockM * D + 2 * kStageElems) * 2 + kTableBytes;  // 49 / 97 / 128.5 KiB
  static constexpr int kMinBlocks = D <= 64 ? 2 : 1;    // programs per SM the registers must allow
};

// (sequence, query block within it) of program `pid`, a sequence having `pack` rows a query token: block
// i of sequence s is program (qsl[s] - qsl[seq_lo]) * pack / BM + (s - seq_lo) + i.
PAGODA_INLINE void find_query_block(const int32_t* qsl, int pid, int seq_lo, int seq_hi, int pack, int& seq,
                                    int& block) {
  const int base = qsl[seq_lo];
  int lo = seq_lo, hi = seq_hi;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    const int first = (qsl[mid] - base) * pack / kPrefillBlockM + mid - seq_lo;
    if (first <= pid) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  seq = lo;
  block = pid - ((qsl[lo] - base) * pack / kPrefillBlockM + lo - seq_lo);
}

// Where row r of a program's block lives in query and out: token token0 + (m0 + r) / pack, q head
// head0 + (m0 + r) % pack. pack 1: the program's one q head, a row a token; pack = the GQA group: the q
// heads of one kv head packed into the rows, token-major, so a short query fills the block's rows and
// each key tile is read once for the whole group.
struct RowMap {
  int token0, m0, pack, head0;
  PAGODA_INLINE int64_t offset(int r, int64_t stride_token, int64_t stride_head) const {
    const int f = m0 + r;
    return static_cast<int64_t>(token0 + f / pack) * stride_token +
           static_cast<int64_t>(head0 + f % pack) * stride_head;
  }
};

// A thread's share of a [rows, D] tile copy: passes of THREADS 16-byte chunks; in pass i it copies
// chunk `chunk` of row `row + i * kRowsPerPass`, whose swizzled offset is `at + i * kRowsPerPass * D`
// (kRowsPerPass is a multiple of 8, so the row's swizzle pattern stays the same).
template <int D, int THREADS>
struct CopyLane {
  static constexpr int kRowsPerPass = THREADS / (D / 8);
  static_assert(kRowsPerPass % 8 == 0, "the swizzle pattern repeats every 8 rows");
  int row, chunk, at;
  PAGODA_INLINE explicit CopyLane(int tid) : row(tid / (D / 8)), chunk(tid % (D / 8)), at(swizzle<D>(row, chunk)) {}
};

// threadIdx.x, re-read in the key loop as a value the compiler cannot see through: it then derives the
// lane's addresses and positions afresh each tile (a few integer instructions) instead of carrying
// them, or induction variables folded from them, across the loop in registers that head 128 lacks.
PAGODA_INLINE int opaque_thread_index() {
  int tid = threadIdx.x;
  asm volatile("" : "+r"(tid));
  return tid;
}

// cp.async the Q tile [BM, D]: rows past the block's valid rows are zero-filled.
template <int D, int THREADS>
PAGODA_INLINE void load_q_tile(uint16_t* s_q, const FlashAttentionArgs& p, const RowMap& map, int rows) {
  using Lane = CopyLane<D, THREADS>;
  const Lane t(threadIdx.x);
  const auto* query = static_cast<const uint16_t*>(p.query);
#pragma unroll
  for (int pass = 0; pass < kPrefillBlockM / Lane::kRowsPerPass; ++pass) {
    const int r = t.row + pass * Lane::kRowsPerPass;
    const bool valid = r < rows;
    const uint16_t* src = valid ? query + map.offset(r, p.q_stride_token, p.q_stride_head) + t.chunk * 8 : query;
    cp_async16(s_q + t.at + pass * Lane::kRowsPerPass * D, src, valid);
  }
}

// The keys of one sequence and kv head: its block-table row, the kv head's offset in a cache half,
// the end of the range (keys at or past key_hi are zero-filled). Strides and cache pointers are
// read from the kernel parameters where used (constant memory: no registers held in the loop).
struct KeySource {
  const int32_t* bt_row;
  int64_t head_offset;
  int key_hi;
};

// The addresses of a tile's BN key rows in the K cache half (kv head included; a V row is at the same
// distance from the V half), in shared memory: one slot per stage, written one tile ahead, so the
// copies of a tile read 16-byte table entries instead of dividing by the block size and waiting on
// the block table. A copying thread's rows are row, row + kRowsPerPass, ...: key row r sits at
// (r % kRowsPerPass) * kPasses + r / kRowsPerPass.
template <int D, int BN, int THREADS>
struct RowTable {
  static constexpr int kRowsPerPass = CopyLane<D, THREADS>::kRowsPerPass;
  static constexpr int kPasses = BN / kRowsPerPass;
  static constexpr int kPerWarp = BN / (THREADS / kWarpSize);  // rows each warp writes
  static_assert(BN % kRowsPerPass == 0 && kPasses % 2 == 0, "whole passes, read in pairs");
  static_assert(kPerWarp <= kWarpSize && BN % (THREADS / kWarpSize) == 0, "every warp writes its share");
  PAGODA_INLINE static int index(int r) { return (r % kRowsPerPass) * kPasses + r / kRowsPerPass; }
};

// Warp `warp` writes the table entries of its kPerWarp keys of the tile at key0 (the block table read
// and the division for one key per lane); keys at or past key_hi get the K half's base address (a
// mapped address: their copies read nothing and zero-fill).
template <int D, int BN, int THREADS, bool kFp8>
PAGODA_INLINE void write_key_rows(uint64_t* slot, const FlashAttentionArgs& p, const KeySource& src,
                                  const FastDiv& block, int key0, int warp, int lane) {
  using Table = RowTable<D, BN, THREADS>;
  constexpr uint64_t kElem = kFp8 ? 1 : 2;  // bytes of a cache element
  if (lane >= Table::kPerWarp) return;
  const int r = warp * Table::kPerWarp + lane, pos = key0 + r;
  uint64_t address = reinterpret_cast<uint64_t>(p.k_cache);
  if (pos < src.key_hi) {
    const int64_t row = paged_row(src.bt_row, pos, block, p.cache_stride_block, p.cache_stride_token);
    address += kElem * static_cast<uint64_t>(row + src.head_offset);
  }
  slot[Table::index(r)] = address;
}

// cp.async keys key0..key0+BN-1 into one stage: the K tile, then the V tile (row addresses from the
// table slot of this tile).
template <int D, int BN, int THREADS, bool kFp8>
PAGODA_INLINE void load_kv_stage(uint16_t* stage, const FlashAttentionArgs& p, const uint64_t* slot, int key0,
                                 int key_hi, int tid) {
  using Lane = CopyLane<D, THREADS>;
  using Table = RowTable<D, BN, THREADS>;
  const Lane t(tid);
  uint64_t rows[Table::kPasses];
  const auto* entries = reinterpret_cast<const ulonglong2*>(slot + t.row * Table::kPasses);
#pragma unroll
  for (int i = 0; i < Table::kPasses / 2; ++i) {
    const ulonglong2 pair = entries[i];
    rows[2 * i] = pair.x;
    rows[2 * i + 1] = pair.y;
  }
  const uint64_t v_minus_k = reinterpret_cast<uint64_t>(p.v_cache) - reinterpret_cast<uint64_t>(p.k_cache);
#pragma unroll
  for (int pass = 0; pass < Table::kPasses; ++pass) {
    const bool valid = key0 + t.row + pass * Lane::kRowsPerPass < key_hi;
    uint16_t* dst = stage + t.at + pass * Lane::kRowsPerPass * D;
    const uint64_t k_src = rows[pass] + t.chunk * (kFp8 ? 8 : 16);
    cp_async_chunk<kFp8>(dst, reinterpret_cast<const void*>(k_src), valid);
    cp_async_chunk<kFp8>(dst + BN * D, reinterpret_cast<const void*>(k_src + v_minus_k), valid);
  }
}

// In place: this thread's FP8 chunks of a stage's K and V tiles (its copies complete) widened to T.
template <typename T, int D, int BN, int THREADS>
PAGODA_INLINE void widen_kv_stage(uint16_t* stage, int tid, KVFormat format) {
  using Lane = CopyLane<D, THREADS>;
  const Lane t(tid);
#pragma unroll
  for (int pass = 0; pass < BN / Lane::kRowsPerPass; ++pass) {
    uint16_t* slot = stage + t.at + pass * Lane::kRowsPerPass * D;
    widen_fp8_chunk<T>(slot, format);
    widen_fp8_chunk<T>(slot + BN * D, format);
  }
}

// Shared-space byte addresses of this lane's ldmatrix row in swizzled tiles, at k-step (or dim pair)
// 0: the A fragment of rows row0.. of Q, the B fragments of keys 0..15 of the K tile of stage 0 (no
// transpose) and of its V tile (.trans). Every such row r has r % 8 == lane % 8 and chunk 2k + h
// (h = 0 or 1), stored at chunk ((2k + h) ^ r % 8) = (h ^ r % 8) ^ 2k: step k's address is the step-0
// address XOR (k << 5) bytes. The step-0 chunk is below 8, so only k's low two bits meet set bits:
// XOR ((k & 3) << 5), then add (k >> 2) * 128 bytes; rows 16 further are 32 * D bytes further, and
// tiles (stages, the V tile) start a multiple of 128 bytes further, added after the XOR. So each
// operand needs four lane addresses (kept in registers: `xor_step`), the rest is an immediate or a
// warp-uniform offset.
template <int D>
struct FragAddrs {
  uint32_t q, k, v;
  PAGODA_INLINE FragAddrs(uint32_t q_tile, uint32_t kv_tile, int row0, int lane) {
    const int i = lane >> 3;
    q = q_tile + 2 * swizzle<D>(row0 + (lane & 15), lane >> 4);      // = load_a<D>(.., row0, 0, lane)
    k = kv_tile + 2 * swizzle<D>((lane & 7) + 8 * (i >> 1), i & 1);  // = k_frag_src<D>(.., 0, 0, lane)
    v = kv_tile + 2 * swizzle<D>((lane & 7) + 8 * (i & 1), i >> 1);  // = v_frag_src<D>(.., 0, 0, lane)
  }
};

// The address of step `step`, `rows16` groups of 16 rows down, in the tile `tile_offset` bytes (a
// multiple of 128) after the one `lane_addr` (a FragAddrs member, from a 2 * D-aligned tile) points into.
template <int D>
PAGODA_INLINE uint32_t frag_addr(uint32_t lane_addr, uint32_t tile_offset, int step, int rows16) {
  return (lane_addr ^ ((step & 3) << 5)) + tile_offset + (step >> 2) * 128 + rows16 * 32 * D;
}

// S[i] = Q rows 16i.. of this warp (i < RT) @ K^T for the BN keys of the K tile at `k_offset` bytes
// from stage 0's: each K fragment feeds RT MMAs.
template <typename T, int D, int BN, int RT>
PAGODA_INLINE void tile_scores(float (&s)[RT][BN / 8][4], const FragAddrs<D>& f, uint32_t k_offset) {
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) s[i][nt][0] = s[i][nt][1] = s[i][nt][2] = s[i][nt][3] = 0.0f;
  }
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    uint32_t a[RT][4];
#pragma unroll
    for (int i = 0; i < RT; ++i) ldmatrix_x4(a[i], frag_addr<D>(f.q, 0, k, i));
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, frag_addr<D>(f.k, k_offset, k, np));
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        mma_16816<T>(s[i][2 * np], a[i], b[0], b[1]);
        mma_16816<T>(s[i][2 * np + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// o[i] += P[i] @ V for the BN keys of the V tile at `v_offset` bytes from stage 0's: each V fragment
// feeds RT MMAs.
template <typename T, int D, int BN, int RT>
PAGODA_INLINE void tile_pv(float (&o)[RT][D / 8][4], const uint32_t (&prob)[RT][BN / 16][4], const FragAddrs<D>& f,
                           uint32_t v_offset) {
#pragma unroll
  for (int kp = 0; kp < BN / 16; ++kp) {
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, frag_addr<D>(f.v, v_offset, dp, kp));
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        mma_16816<T>(o[i][2 * dp], prob[i][kp], b[0], b[1]);
        mma_16816<T>(o[i][2 * dp + 1], prob[i][kp], b[2], b[3]);
      }
    }
  }
}

// -inf where a key is invisible to the fragment's row: with d = (query position) - key, visible iff
// 0 <= d (causal) and d < window (window > 0). Element e of score tile nt of row tile i is key
// key0 + 8nt + 2t + (e & 1) of the row at position pos0 + 16i + 8(e >> 1), so d = `rel` + a constant:
// one compare against an immediate each, no per-element registers.
template <int BN, int RT>
PAGODA_INLINE void mask_scores(float (&s)[RT][BN / 8][4], int key0, int pos0, int window, int lane) {
  const int rel = pos0 - key0 - 2 * (lane % 4);
  const int rel_window = window > 0 ? rel - window : INT_MIN / 2;  // visible iff rel_window + c < 0
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 16 * i + 8 * (e >> 1) - 8 * nt - (e & 1);
        const bool visible = rel >= -c && rel_window < -c;
        s[i][nt][e] = visible ? s[i][nt][e] : -INFINITY;
      }
    }
  }
}

// The positions of a warp's fragment rows when q heads are packed into the rows: row g + 16i + 8h of
// the warp (g = lane / 4) is block row `row` + 16i + 8h, at position pos_base + (row + 16i + 8h) / pack.
struct PackedRows {
  int pos_base, row, pack;
};

// mask_scores for packed rows: each of the lane's 2 * RT rows has its own position (no immediates).
template <int BN, int RT>
PAGODA_INLINE void mask_scores_packed(float (&s)[RT][BN / 8][4], int key0, const PackedRows& r, int window, int lane) {
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pos = r.pos_base + (r.row + 16 * i + 8 * half) / r.pack;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          const int key = key0 + 8 * nt + 2 * (lane % 4) + (e & 1);
          const bool visible = key <= pos && (window <= 0 || key > pos - window);
          s[i][nt][e] = visible ? s[i][nt][e] : -INFINITY;
        }
      }
    }
  }
}

// One warp's work on one key tile (K at `k_offset` bytes from stage 0's K tile, V right after it):
// scores, mask (kMasked; rows at pos0 + row, or `packed`), online softmax, O += P V.
template <typename T, int D, int BN, int RT, bool kMasked, bool kPacked>
PAGODA_INLINE void attend_tile(float (&o)[RT][D / 8][4], float (&m)[RT][2], float (&l)[RT][2], const FragAddrs<D>& f,
                               uint32_t k_offset, int key0, int pos0, const PackedRows& packed, int window, float scale,
                               int lane) {
  float s[RT][BN / 8][4];
  tile_scores<T, D, BN, RT>(s, f, k_offset);
  if constexpr (kMasked && kPacked) mask_scores_packed<BN, RT>(s, key0, packed, window, lane);
  if constexpr (kMasked && !kPacked) mask_scores<BN, RT>(s, key0, pos0, window, lane);
  uint32_t prob[RT][BN / 16][4];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    float alpha[2];
    softmax_update<BN, kMasked>(s[i], m[i], l[i], alpha, scale);
    rescale_output<D>(o[i], alpha);
#pragma unroll
    for (int kp = 0; kp < BN / 16; ++kp) probs_to_a<T>(s[i][2 * kp], s[i][2 * kp + 1], prob[i][kp]);
  }
  tile_pv<T, D, BN, RT>(o, prob, f, k_offset + BN * D * 2);
}

// Normalise this warp's rows, stage them in its own rows of s_q (no other warp reads those), store
// 16-byte chunks of the rows below `rows` (the block's valid rows) where `map` puts them.
template <typename T, int D, int RT>
PAGODA_INLINE void store_rows(const FlashAttentionArgs& p, const RowMap& map, float (&o)[RT][D / 8][4],
                              const float (&l)[RT][2], uint16_t* s_q, int row0, int rows, int lane, float v_scale) {
  __syncwarp();  // the warp's lanes are done reading these Q rows (ldmatrix) before any lane overwrites them
#pragma unroll
  for (int i = 0; i < RT; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(l[i][half]);
      const float inv = sum > 0.0f ? v_scale / sum : 0.0f;
      const int r = row0 + 16 * i + lane / 4 + 8 * half;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const uint32_t packed = pack2<T>(o[i][dt][2 * half] * inv, o[i][dt][2 * half + 1] * inv);
        *reinterpret_cast<uint32_t*>(s_q + swizzle<D>(r, dt) + 2 * (lane % 4)) = packed;
      }
    }
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int j = lane; j < 16 * RT * kChunks; j += kWarpSize) {
    const int r = row0 + j / kChunks, c = j % kChunks;
    if (r < rows) {
      auto* out = static_cast<uint16_t*>(p.out) + map.offset(r, p.o_stride_token, p.o_stride_head) + c * 8;
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(s_q + swizzle<D>(r, c));
    }
  }
}

template <typename T, int D, bool kPacked, bool kFp8>
__global__ void __launch_bounds__(PrefillTile<D>::kThreads, PrefillTile<D>::kMinBlocks)
    flash_prefill_kernel(FlashAttentionArgs p, FastDiv block_div, int seq_lo, int seq_hi) {
#if PAGODA_FLASH_ENABLED
  using Tile = PrefillTile<D>;
  constexpr int BN = Tile::kBlockN, BM = kPrefillBlockM, RT = Tile::kRowTiles, THREADS = Tile::kThreads;
  extern __shared__ __align__(1024) uint16_t smem[];
  uint16_t* s_q = smem;             // [BM, D]
  uint16_t* s_kv = s_q + BM * D;    // 2 stages of (K [BN, D], V [BN, D])
  auto* s_rows = reinterpret_cast<uint64_t*>(s_kv + 2 * Tile::kStageElems);  // 2 slots of [BN] (RowTable)

  const int group = p.num_heads / p.num_kv_heads;
  const int pack = kPacked ? group : 1;  // rows a query token
  int seq, block;
  find_query_block(p.query_start_loc, gridDim.x - 1 - blockIdx.x, seq_lo, seq_hi, pack, seq, block);
  // equal in every thread: through a shuffle the compiler knows it, and keeps what derives from them
  // (positions, block-table row, loop bounds) in uniform registers
  seq = __shfl_sync(0xffffffffu, seq, 0);
  block = __shfl_sync(0xffffffffu, block, 0);
  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int m0 = block * BM;                                   // the block's first row
  if (m0 >= q_len * pack) return;  // the whole program: no barrier is skipped by some threads only
  const int rows = min(BM, q_len * pack - m0);                 // valid query rows of the block
  const int kv_head = kPacked ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y) / group;
  const RowMap map{q_start, m0, pack, kPacked ? kv_head * group : static_cast<int>(blockIdx.y)};
  const int seq_len = p.seq_lens[seq];
  const int pos_base = seq_len - q_len;                        // position of the sequence's first query token
  const int first_pos = pos_base + m0 / pack;                  // position of row 0
  const int key_hi = pos_base + (m0 + rows - 1) / pack + 1;    // keys [key_lo, key_hi)
  const int window = p.window;
  const int key_lo = window > 0 ? max(first_pos - window + 1, 0) / BN * BN : 0;
  const int num_tiles = (key_hi - key_lo + BN - 1) / BN;
  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpSize, 0);  // uniform, as above

  const KeySource src{p.block_tables + seq * p.block_table_stride, kv_head * p.cache_stride_head, key_hi};
  write_key_rows<D, BN, THREADS, kFp8>(s_rows, p, src, block_div, key_lo, warp, threadIdx.x % kWarpSize);
  write_key_rows<D, BN, THREADS, kFp8>(s_rows + BN, p, src, block_div, key_lo + BN, warp, threadIdx.x % kWarpSize);
  load_q_tile<D, THREADS>(s_q, p, map, rows);
  __syncthreads();  // the row table of tiles 0 and 1
  load_kv_stage<D, BN, THREADS, kFp8>(s_kv, p, s_rows, key_lo, key_hi, threadIdx.x);
  cp_async_commit();

  const int row0 = Tile::kWarpRows * warp;                     // this warp's first row in the block
  // positions of this warp's first and last valid rows (a warp past `rows` has none: sees nothing)
  const int warp_first = pos_base + (m0 + row0) / pack;
  const int warp_last = row0 < rows ? pos_base + (m0 + min(row0 + Tile::kWarpRows, rows) - 1) / pack : -1;
  const float2 kv_scale = kv_scales<kFp8>(p.k_scale, p.v_scale);  // FP8: folded into the scores and the output
  const float scale = p.scale * kLog2e * kv_scale.x;
  const uint32_t q_tile = smem_addr(s_q), kv_tiles = smem_addr(s_kv);
  if (q_tile % (2 * D) != 0) __trap();  // frag_addr's XOR needs tiles aligned to a row (2 * D bytes)

  float o[RT][D / 8][4];
  float m[RT][2], l[RT][2];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[i][dt][0] = o[i][dt][1] = o[i][dt][2] = o[i][dt][3] = 0.0f;
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int key0 = key_lo + tile * BN;
    const int tid = opaque_thread_index(), lane = tid % kWarpSize;
    cp_async_wait<0>();  // this tile's K and V (and Q)
    if constexpr (kFp8) widen_kv_stage<T, D, BN, THREADS>(s_kv + (tile & 1) * Tile::kStageElems, tid, p.kv_format);
    __syncthreads();     // ... from every thread; every warp is done with the other stage and table slot
    if (tile + 1 < num_tiles) {
      load_kv_stage<D, BN, THREADS, kFp8>(s_kv + ((tile + 1) & 1) * Tile::kStageElems, p, s_rows + ((tile + 1) & 1) * BN,
                                    key0 + BN, key_hi, tid);
      cp_async_commit();
    }
    const bool after_all = key0 > warp_last;                                  // causal: no row sees a key
    const bool before_all = window > 0 && key0 + BN - 1 <= warp_first - window;  // out of every row's window
    if (!after_all && !before_all) {
      const bool masked = key0 + BN - 1 > warp_first || (window > 0 && key0 <= warp_last - window);
      const uint32_t k_offset = (tile & 1) * Tile::kStageElems * 2;  // this stage's K tile, from stage 0's
      const FragAddrs<D> frag(q_tile, kv_tiles, row0, lane);
      const int pos0 = warp_first + lane / 4;                          // query position of fragment row g
      const PackedRows packed{pos_base, m0 + row0 + lane / 4, pack};  // (kPacked) its rows' positions
      if (masked) {
        attend_tile<T, D, BN, RT, true, kPacked>(o, m, l, frag, k_offset, key0, pos0, packed, window, scale, lane);
      } else {
        attend_tile<T, D, BN, RT, false, kPacked>(o, m, l, frag, k_offset, key0, pos0, packed, window, scale, lane);
      }
    }
    // the slot this tile's copies used last read before this tile's barrier: refill it for tile + 2
    if (tile + 2 < num_tiles) {
      write_key_rows<D, BN, THREADS, kFp8>(s_rows + (tile & 1) * BN, p, src, block_div, key0 + 2 * BN, warp, lane);
    }
  }

  const int lane = threadIdx.x % kWarpSize;
  store_rows<T, D, RT>(p, map, o, l, s_q, row0, rows, lane, kv_scale.y);
#else
  __trap();  // built for an architecture without mma.sync bf16/cp.async: check() refuses < sm_80
#endif
}

template <typename T, int D, bool kPacked, bool kFp8>
void launch_prefill_packing(const FlashAttentionArgs& args, int seq_lo, int seq_hi, int64_t num_tokens,
                            cudaStream_t stream) {
  const int bytes = PrefillTile<D>::kSmemBytes;
  auto kernel = flash_prefill_kernel<T, D, kPacked, kFp8>;
  allow_shared_memory<flash_prefill_kernel<T, D, kPacked, kFp8>>(bytes);
  const int pack = kPacked ? args.num_heads / args.num_kv_heads : 1;
  const dim3 grid(static_cast<unsigned>(num_tokens * pack / kPrefillBlockM + (seq_hi - seq_lo)),
                  kPacked ? args.num_kv_heads : args.num_heads);
  const FastDiv block_div(static_cast<uint32_t>(args.block_size > 0 ? args.block_size : 1));
  kernel<<<grid, PrefillTile<D>::kThreads, bytes, stream>>>(args, block_div, seq_lo, seq_hi);
}

// Grouped-query attention packs the q heads of a kv head into the rows (one q head a program otherwise):
// a short query then fills a block's rows for its whole group, one program a kv head reading each key
// tile once, where one q head a program leaves most rows empty and reads the keys `group` times.
// H200, 2026-11-27: short chunks after 1-4k cached tokens 1.9-3.6x faster at batch 16-256, long prefills unchanged.
template <typename T, int D, bool kFp8>
void launch_prefill(const FlashAttentionArgs& args, int seq_lo, int seq_hi, int64_t num_tokens, cudaStream_t stream) {
  if (args.num_heads > args.num_kv_heads) {
    launch_prefill_packing<T, D, true, kFp8>(args, seq_lo, seq_hi, num_tokens, stream);
  } else {
    launch_prefill_packing<T, D, false, kFp8>(args, seq_lo, seq_hi, num_tokens, stream);
  }
}

template <typename T, bool kFp8>
void launch_prefill_head(const FlashAttentionArgs& args, int seq_lo, int seq_hi, int64_t num_tokens,
                         cudaStream_t stream) {
  switch (args.head_size) {
    case 64: return launch_prefill<T, 64, kFp8>(args, seq_lo, seq_hi, num_tokens, stream);
    case 128: return launch_prefill<T, 128, kFp8>(args, seq_lo, seq_hi, num_tokens, stream);
#ifndef PAGODA_FLASH_MINIMAL  // CI's compile check builds one head size
    case 256: return launch_prefill<T, 256, kFp8>(args, seq_lo, seq_hi, num_tokens, stream);
#endif
    default: return;  // the torch layer checks flash_supports_head_size first
  }
}

}  // namespace flash

bool flash_supports_head_size(int head_size) { return head_size == 64 || head_size == 128 || head_size == 256; }

void launch_flash_prefill(DType dtype, const FlashAttentionArgs& args, int num_decodes, int num_seqs,
                          int64_t num_prefill_tokens, cudaStream_t stream) {
  if (num_seqs <= num_decodes || num_prefill_tokens <= 0) return;
  const bool fp8 = args.kv_format != KVFormat::kModel;
  if (dtype == DType::kBFloat16) {
    fp8 ? flash::launch_prefill_head<bf16_t, true>(args, num_decodes, num_seqs, num_prefill_tokens, stream)
        : flash::launch_prefill_head<bf16_t, false>(args, num_decodes, num_seqs, num_prefill_tokens, stream);
  } else if (dtype == DType::kFloat16) {
    fp8 ? flash::launch_prefill_head<half_t, true>(args, num_decodes, num_seqs, num_prefill_tokens, stream)
        : flash::launch_prefill_head<half_t, false>(args, num_decodes, num_seqs, num_prefill_tokens, stream);
  }
}

}  // namespace pagoda
