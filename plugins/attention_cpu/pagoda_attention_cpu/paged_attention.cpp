// Paged causal attention on CPU: each sequence's new query tokens (one for a decode, a prompt or a chunk of one
// for a prefill) attended over its cached keys and values, read in place through its block table (no gather into
// a padded copy). The call first writes this step's keys and values into the cache at their slots.
//
// Tasks of one sequence, one kv head and up to 16 of its query tokens, on OpenMP threads (taken in turn, the
// longest first). A task's rows are its query tokens x the kv head's group of query heads (GQA/MQA share a cache
// row among the group). It reads the kv head's rows of the sequence in order, prefetching ahead; scores every row
// against them, masked to the row's own causal (and sliding-window) range; takes each row's softmax in float32;
// and sums the value rows weighted by it: one pass over the keys and one over the values.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

struct CacheView {  // one half (keys or values) of a layer's cache: [num_blocks, block_size, kv_heads, head_size]
  int64_t block_stride, slot_stride, head_stride;
};

// exp(x) for x <= 0 in a form the compiler vectorises (std::exp stays a scalar call): x = n ln2 + r with
// |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial (relative error below 2e-7), times 2^n built in
// the exponent bits. Below -87 the result is 0 (float's smallest normal is exp(-87.3)).
inline float exp_nonpositive(float x) {
  const float clamped = std::max(x, -87.f);
  const float n = std::nearbyint(clamped * 1.44269504088896341f);
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for an exact product
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<int32_t>(n) * (1 << 23);
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return x < -87.f ? 0.f : result;
}

#if defined(__AVX512F__)
// 16 values as float32 lanes.
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const c10::BFloat16* x) {  // bfloat16 is float32's upper half
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline __m512 load16(const c10::Half* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
#endif

template <typename scalar_t>
inline float dot(const float* q, const scalar_t* k, int64_t d) {
#if defined(__AVX512F__)
  if (d % 16 == 0) {  // one horizontal sum per dot, not one per lane
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) sum = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i), sum);
    return _mm512_reduce_add_ps(sum);
  }
#endif
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += q[i] * static_cast<float>(k[i]);
  return s;
}

template <typename scalar_t>
inline void axpy(float* acc, float p, const scalar_t* v, int64_t d) {
#if defined(__AVX512F__)
  if (d % 16 == 0) {
    const __m512 weight = _mm512_set1_ps(p);
    for (int64_t i = 0; i < d; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(weight, load16(v + i), _mm512_loadu_ps(acc + i)));
    return;
  }
#endif
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] += p * static_cast<float>(v[i]);
}

// A row's first `elements` values, fetched ahead of use: the positions after a task's current ones may lie in
// any block of the cache, where the hardware's own prefetcher does not look.
template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t elements) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t offset = 0; offset < elements * static_cast<int64_t>(sizeof(scalar_t)); offset += 64)
    __builtin_prefetch(bytes + offset);
}

// Where one call's tensors are and how they are laid out.
template <typename scalar_t>
struct Call {
  scalar_t* out;                    // [tokens, heads, d] contiguous
  const scalar_t* query;            // [tokens, heads, d] at token_stride, head_stride
  int64_t token_stride, head_stride;
  scalar_t *keys, *values;          // the cache halves
  CacheView kv;
  const int32_t *tables, *lens, *starts;
  int64_t table_stride, block_size, heads, group, d, window;
  float scale;
};

// One task: sequence `seq`'s query tokens [q0, q0 + count) (counted from its first new token) and the query
// heads of kv head `kv_head`.
struct Unit {
  int64_t seq, kv_head, q0, count, cost;
};

constexpr int64_t QUERY_TILE = 16;  // query tokens a task

// What a task attends: rows (query token i, head h of the group) = row i * group + h; row r attends key
// positions [lo(r), hi(r)); the task reads positions [first, last).
template <typename scalar_t>
struct Task {
  const Call<scalar_t>* call;
  const int32_t* blocks;  // the sequence's block table row
  int64_t token0;         // the packed index of the task's first query token
  int64_t pos0;           // its position in the sequence
  int64_t rows, kv_head, first, last;

  int64_t hi(int64_t r) const { return pos0 + r / call->group + 1; }
  int64_t lo(int64_t r) const { return call->window > 0 ? std::max<int64_t>(0, hi(r) - call->window) : 0; }
  const scalar_t* row(const scalar_t* base, int64_t t) const {  // position t's keys or values of the kv head
    return base + blocks[t / call->block_size] * call->kv.block_stride + (t % call->block_size) * call->kv.slot_stride +
           kv_head * call->kv.head_stride;
  }
  int64_t head(int64_t r) const { return kv_head * call->group + r % call->group; }
  const scalar_t* query(int64_t r) const {
    return call->query + (token0 + r / call->group) * call->token_stride + head(r) * call->head_stride;
  }
  scalar_t* out(int64_t r) const { return call->out + ((token0 + r / call->group) * call->heads + head(r)) * call->d; }
};

// A task's working memory: scores [rows, stride] over positions [first, first + stride), the scaled float32
// queries and the weighted sums [rows, d], and 1 / each row's softmax sum [rows].
struct Buffers {
  float *scores, *q, *acc, *inv;
  int64_t stride;
};

// The buffers in scratch, the queries filled in (times the scale) and the sums zeroed.
template <typename scalar_t>
Buffers buffers(const Task<scalar_t>& task, int64_t stride, std::vector<float>& scratch) {
  const int64_t rows = task.rows, d = task.call->d;
  scratch.resize(static_cast<size_t>(rows * (stride + 2 * d + 1)));
  Buffers b{scratch.data(), nullptr, nullptr, nullptr, stride};
  b.q = b.scores + rows * stride;
  b.acc = b.q + rows * d;
  b.inv = b.acc + rows * d;
  for (int64_t r = 0; r < rows; ++r) {
    const scalar_t* q = task.query(r);
    for (int64_t i = 0; i < d; ++i) b.q[r * d + i] = static_cast<float>(q[i]) * task.call->scale;
  }
  std::fill(b.acc, b.acc + rows * d, 0.f);
  return b;
}

// Each row's softmax over the task's positions in place, positions outside the row's range weighted 0; 1 / the
// sum into inv.
template <typename scalar_t>
void softmax_rows(const Task<scalar_t>& task, const Buffers& b) {
  const int64_t n = task.last - task.first;
  for (int64_t r = 0; r < task.rows; ++r) {
    float* s = b.scores + r * b.stride;
    const int64_t begin = task.lo(r) - task.first, end = task.hi(r) - task.first;
    std::fill(s, s + begin, -std::numeric_limits<float>::infinity());
    std::fill(s + end, s + n, -std::numeric_limits<float>::infinity());
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t i = begin; i < end; ++i) m = std::max(m, s[i]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = exp_nonpositive(s[i] - m));
    b.inv[r] = 1.f / sum;
  }
}

// out = acc * inv per row.
template <typename scalar_t>
void write_out(const Task<scalar_t>& task, const Buffers& b) {
  const int64_t d = task.call->d;
  for (int64_t r = 0; r < task.rows; ++r) {
    scalar_t* o = task.out(r);
    for (int64_t i = 0; i < d; ++i) o[i] = static_cast<scalar_t>(b.acc[r * d + i] * b.inv[r]);
  }
}

// Any head size, any instruction set: dots and sums a row at a time.
template <typename scalar_t>
void attend_rows(const Task<scalar_t>& task, std::vector<float>& scratch) {
  const int64_t d = task.call->d, first = task.first, ahead = task.call->block_size;
  const Buffers b = buffers(task, task.last - first, scratch);
  for (int64_t t = first; t < task.last; ++t) {
    if (t + ahead < task.last) prefetch_row(task.row(task.call->keys, t + ahead), d);
    const scalar_t* k = task.row(task.call->keys, t);
    for (int64_t r = 0; r < task.rows; ++r)
      if (t >= task.lo(r) && t < task.hi(r)) b.scores[r * b.stride + (t - first)] = dot(b.q + r * d, k, d);
  }
  softmax_rows(task, b);
  for (int64_t t = first; t < task.last; ++t) {
    if (t + ahead < task.last) prefetch_row(task.row(task.call->values, t + ahead), d);
    const scalar_t* v = task.row(task.call->values, t);
    for (int64_t r = 0; r < task.rows; ++r)
      if (t >= task.lo(r) && t < task.hi(r)) axpy(b.acc + r * d, b.scores[r * b.stride + (t - first)], v, d);
  }
  write_out(task, b);
}

#if defined(__AVX512F__)
constexpr int64_t CHUNK = 16;  // positions a step: one vector of scores per row

// Lane j of the result: the sum of x[j]'s 16 lanes (a transposing tree of adds: 45 instructions for 16 sums,
// against about 8 each reduced on their own).
inline __m512 sum16(const __m512* x) {
  __m512 y[8], z[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    y[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: 4 vectors' partial sums
    z[i] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane j: q . rows[j][:d] (d a multiple of 16).
template <typename scalar_t>
inline __m512 dots16(const float* q, const scalar_t* const* rows, int64_t d) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c += 16) {
    const __m512 qc = _mm512_loadu_ps(q + c);
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qc, load16(rows[j] + c), acc[j]);
  }
  return sum16(acc);
}

// acc[r][lanes] += p[r][j] * rows[j][lanes] over `count` rows j, for ROWS query rows and CHUNKS x 16 lanes (from
// offset): the accumulators stay in registers across the rows.
template <int ROWS, int CHUNKS, typename scalar_t>
void weighted_sum(const scalar_t* const* rows, int64_t count, int64_t offset, const float* p, int64_t p_stride,
                  float* acc, int64_t d) {
  __m512 sum[ROWS][CHUNKS];
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < CHUNKS; ++c) sum[r][c] = _mm512_loadu_ps(acc + r * d + 16 * c);
  for (int64_t j = 0; j < count; ++j) {
    __m512 v[CHUNKS];
    for (int c = 0; c < CHUNKS; ++c) v[c] = load16(rows[j] + offset + 16 * c);
    for (int r = 0; r < ROWS; ++r) {
      const __m512 weight = _mm512_set1_ps(p[r * p_stride + j]);
      for (int c = 0; c < CHUNKS; ++c) sum[r][c] = _mm512_fmadd_ps(weight, v[c], sum[r][c]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < CHUNKS; ++c) _mm512_storeu_ps(acc + r * d + 16 * c, sum[r][c]);
}

template <typename scalar_t>
using WeightedSum = void (*)(const scalar_t* const*, int64_t, int64_t, const float*, int64_t, float*, int64_t);

template <typename scalar_t, int ROWS>
WeightedSum<scalar_t> weighted_sum_for(int64_t chunks) {
  return chunks == 1 ? weighted_sum<ROWS, 1, scalar_t> : chunks == 2 ? weighted_sum<ROWS, 2, scalar_t>
       : chunks == 3 ? weighted_sum<ROWS, 3, scalar_t> : weighted_sum<ROWS, 4, scalar_t>;
}

// The kernel for up to 4 rows x 64 lanes.
template <typename scalar_t>
WeightedSum<scalar_t> weighted_sum_for(int64_t rows, int64_t chunks) {
  return rows == 1 ? weighted_sum_for<scalar_t, 1>(chunks) : rows == 2 ? weighted_sum_for<scalar_t, 2>(chunks)
       : rows == 3 ? weighted_sum_for<scalar_t, 3>(chunks) : weighted_sum_for<scalar_t, 4>(chunks);
}

// The rows of positions [t0, t0 + 16), the last repeated past the task's end (their lanes are not used); the
// next 16 prefetched.
template <typename scalar_t>
void chunk_rows(const Task<scalar_t>& task, const scalar_t* base, int64_t t0, const scalar_t** rows) {
  const int64_t count = std::min(CHUNK, task.last - t0);
  for (int64_t j = 0; j < CHUNK; ++j) rows[j] = task.row(base, t0 + std::min(j, count - 1));
  for (int64_t t = t0 + CHUNK; t < std::min(t0 + 2 * CHUNK, task.last); ++t) prefetch_row(task.row(base, t), task.call->d);
}

// Head sizes a multiple of 16 on AVX-512, 16 positions at a time: the scores of 16 positions in one vector a
// row (2x the row-at-a-time path's speed on rows in cache), chunks past a row's range skipped; the weighted sum
// 4 rows x 64 lanes at a time with the accumulators in registers.
template <typename scalar_t>
void attend_vectors(const Task<scalar_t>& task, std::vector<float>& scratch) {
  const int64_t d = task.call->d, first = task.first;
  const Buffers b = buffers(task, task.last - first + CHUNK, scratch);  // whole vectors are stored past the end
  const scalar_t* rows[CHUNK];
  for (int64_t t0 = first; t0 < task.last; t0 += CHUNK) {
    chunk_rows(task, task.call->keys, t0, rows);
    // the same positions' values fetched while their keys are scored: the values pass then reads from cache (two
    // streams from memory at once; over caches of scattered blocks 5-8% less time a call than values on demand)
    for (int64_t t = t0; t < std::min(t0 + CHUNK, task.last); ++t) prefetch_row(task.row(task.call->values, t), d);
    for (int64_t r = 0; r < task.rows; ++r)
      if (t0 < task.hi(r) && t0 + CHUNK > task.lo(r))
        _mm512_storeu_ps(b.scores + r * b.stride + (t0 - first), dots16(b.q + r * d, rows, d));
  }
  softmax_rows(task, b);
  for (int64_t t0 = first; t0 < task.last; t0 += CHUNK) {
    chunk_rows(task, task.call->values, t0, rows);
    const int64_t count = std::min(CHUNK, task.last - t0);
    for (int64_t r0 = 0; r0 < task.rows; r0 += 4)
      for (int64_t lane0 = 0; lane0 < d; lane0 += 64)
        weighted_sum_for<scalar_t>(std::min<int64_t>(4, task.rows - r0), std::min<int64_t>(64, d - lane0) / 16)(
            rows, count, lane0, b.scores + r0 * b.stride + (t0 - first), b.stride, b.acc + r0 * d + lane0, d);
  }
  write_out(task, b);
}
#endif

template <typename scalar_t>
void attend(const Task<scalar_t>& task, std::vector<float>& scratch) {
  if (task.last <= task.first) {  // nothing cached to attend over: zeros
    for (int64_t r = 0; r < task.rows; ++r) std::fill(task.out(r), task.out(r) + task.call->d, static_cast<scalar_t>(0));
    return;
  }
#if defined(__AVX512F__)
  if (task.call->d % 16 == 0) return attend_vectors(task, scratch);
#endif
  attend_rows(task, scratch);
}

// The tasks of a call, the costliest (rows x positions) first, so that threads taking them in turn finish
// together.
template <typename scalar_t>
std::vector<Unit> units_of(const Call<scalar_t>& call, int64_t num_seqs, int64_t kv_heads) {
  std::vector<Unit> units;
  for (int64_t i = 0; i < num_seqs; ++i) {
    const int64_t count = call.starts[i + 1] - call.starts[i], length = call.lens[i];
    for (int64_t q0 = 0; q0 < count; q0 += QUERY_TILE) {
      const int64_t tile = std::min(QUERY_TILE, count - q0);
      const int64_t cost = tile * (length - count + q0 + tile);
      for (int64_t g = 0; g < kv_heads; ++g) units.push_back({i, g, q0, tile, cost});
    }
  }
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.cost > b.cost; });
  return units;
}

template <typename scalar_t>
Task<scalar_t> task_of(const Call<scalar_t>& call, const Unit& u) {
  const int64_t count = call.starts[u.seq + 1] - call.starts[u.seq], length = call.lens[u.seq];
  Task<scalar_t> task{&call, call.tables + u.seq * call.table_stride, call.starts[u.seq] + u.q0, length - count + u.q0,
                      u.count * call.group, u.kv_head, 0, 0};
  task.first = task.lo(0);
  task.last = task.hi(task.rows - 1);
  return task;
}

// This step's keys and values, written to their slots before any task reads the cache.
template <typename scalar_t>
struct NewRows {
  const scalar_t *keys, *values;  // [tokens, kv_heads, d] at (token, head) strides key_strides, value_strides
  int64_t key_strides[2], value_strides[2], tokens, kv_heads;
  const int64_t* slots;  // a negative slot (padding) is skipped
};

template <typename scalar_t>
void write_rows(const Call<scalar_t>& call, const NewRows<scalar_t>& rows, int64_t t) {
  const int64_t slot = rows.slots[t];
  if (slot < 0) return;
  const int64_t at = slot / call.block_size * call.kv.block_stride + slot % call.block_size * call.kv.slot_stride;
  for (int64_t g = 0; g < rows.kv_heads; ++g) {
    const int64_t to = at + g * call.kv.head_stride;
    std::memcpy(call.keys + to, rows.keys + t * rows.key_strides[0] + g * rows.key_strides[1], call.d * sizeof(scalar_t));
    std::memcpy(call.values + to, rows.values + t * rows.value_strides[0] + g * rows.value_strides[1],
                call.d * sizeof(scalar_t));
  }
}

template <typename scalar_t>
void run_call(const Call<scalar_t>& call, const NewRows<scalar_t>& rows, int64_t num_seqs) {
  const std::vector<Unit> units = units_of(call, num_seqs, rows.kv_heads);
  const int64_t n = static_cast<int64_t>(units.size());
#pragma omp parallel num_threads(at::get_num_threads())
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows.tokens; ++t) write_rows(call, rows, t);
    std::vector<float> scratch;  // the loop above ends when every row is written
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < n; ++u) attend(task_of(call, units[u]), scratch);
  }
}

}  // namespace

// out, query: [tokens, num_heads, head_size] (sequence i's new tokens are rows starts[i]:starts[i + 1], the last
// of its seq_lens[i] positions); key, value: [tokens, num_kv_heads, head_size], written first to the caches at
// slot_mapping [tokens] int64 (negative: skipped); key_cache, value_cache: [num_blocks, block_size, num_kv_heads,
// head_size] (head_size contiguous), holding every earlier position's keys and values; block_tables:
// [num_seqs, max_blocks] int32; seq_lens: [num_seqs] int32; query_start_loc: [num_seqs + 1] int32. window > 0
// attends over the last `window` positions up to each query's own.
void paged_attention(torch::Tensor out, torch::Tensor query, torch::Tensor key, torch::Tensor value,
                     torch::Tensor key_cache, torch::Tensor value_cache, torch::Tensor slot_mapping,
                     torch::Tensor block_tables, torch::Tensor seq_lens, torch::Tensor query_start_loc, double scale,
                     int64_t window) {
  TORCH_CHECK(query.dim() == 3 && out.sizes() == query.sizes() && out.is_contiguous(),
              "query and out must be [tokens, num_heads, head_size], out contiguous");
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.sizes() == value_cache.sizes() &&
                  key_cache.strides() == value_cache.strides(),
              "key and value caches must be [num_blocks, block_size, num_kv_heads, head_size] views alike");
  TORCH_CHECK(query.stride(2) == 1 && key_cache.stride(3) == 1, "head_size must be the contiguous dimension");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt &&
                  query_start_loc.scalar_type() == at::kInt && block_tables.stride(1) == 1 &&
                  seq_lens.is_contiguous() && query_start_loc.is_contiguous(),
              "block_tables, seq_lens and query_start_loc must be int32 with contiguous rows");
  const int64_t num_seqs = seq_lens.size(0);
  TORCH_CHECK(query_start_loc.size(0) == num_seqs + 1 && block_tables.size(0) >= num_seqs,
              "query_start_loc needs num_seqs + 1 entries and block_tables a row per sequence");
  TORCH_CHECK(key.dim() == 3 && key.sizes() == value.sizes() && key.size(0) == query.size(0) &&
                  key.size(1) == key_cache.size(2) && key.size(2) == query.size(2) && key.stride(2) == 1 &&
                  value.stride(2) == 1,
              "key and value must be [tokens, num_kv_heads, head_size], head_size contiguous");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.is_contiguous() &&
                  slot_mapping.size(0) == query.size(0),
              "slot_mapping must be int64, contiguous, one slot a token");
  TORCH_CHECK(query.scalar_type() == key_cache.scalar_type() && out.scalar_type() == query.scalar_type() &&
                  key.scalar_type() == query.scalar_type(),
              "query, key, value, out and the cache must share one dtype");
  const int64_t num_heads = query.size(1), d = query.size(2), kv_heads = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == d && num_heads % kv_heads == 0, "head sizes differ or heads % kv_heads != 0");
  auto run = [&](auto zero) {
    using scalar_t = decltype(zero);
    const Call<scalar_t> call{out.data_ptr<scalar_t>(), query.data_ptr<scalar_t>(), query.stride(0), query.stride(1),
                              key_cache.data_ptr<scalar_t>(), value_cache.data_ptr<scalar_t>(),
                              CacheView{key_cache.stride(0), key_cache.stride(1), key_cache.stride(2)},
                              block_tables.data_ptr<int32_t>(), seq_lens.data_ptr<int32_t>(),
                              query_start_loc.data_ptr<int32_t>(), block_tables.stride(0), key_cache.size(1), num_heads,
                              num_heads / kv_heads, d, window, static_cast<float>(scale)};
    const NewRows<scalar_t> rows{key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(), {key.stride(0), key.stride(1)},
                                 {value.stride(0), value.stride(1)}, key.size(0), kv_heads,
                                 slot_mapping.data_ptr<int64_t>()};
    run_call(call, rows, num_seqs);
  };
  switch (query.scalar_type()) {
    case at::kFloat: return run(float{});
    case at::kBFloat16: return run(c10::BFloat16{});
    case at::kHalf: return run(c10::Half{});
    default: TORCH_CHECK(false, "paged_attention takes float32, bfloat16 or float16, not ", query.scalar_type());
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_attention", &paged_attention,
        "Write a step's keys and values into a paged KV cache, then attend over it in place (CPU)");
}
