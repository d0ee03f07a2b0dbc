// Paged decode attention on CPU: one query token per sequence, attended over the sequence's cached keys
// and values read in place through its block table (no gather into a padded copy).
//
// One task per (sequence, kv head) on torch's intra-op threads. A task reads the kv head's rows of the sequence
// in order, block by block, prefetching ahead; scores each query head of the kv head's group against them (GQA/MQA
// share a row among the group), takes the softmax in float32, and sums the value rows weighted by it: one pass over
// the keys and one over the values.

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

// Cache rows (one token's keys or values, every kv head: contiguous) are read in order within a block; the
// row one block ahead is prefetched, since the next block may lie anywhere in the cache.
template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t elements) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t offset = 0; offset < elements * static_cast<int64_t>(sizeof(scalar_t)); offset += 64)
    __builtin_prefetch(bytes + offset);
}

struct Sequence {
  const int32_t* blocks;  // its block table row
  int64_t first, length;  // attends over positions [first, length)
};

// What one task attends: one sequence's `heads` query heads that share one kv head (GQA's group; 1 for MHA).
// Tasks by kv head ran faster than tasks by sequence reading whole cache rows (0.66 vs 0.90 ms a layer for 64
// sequences of 192 tokens), and a batch of 1 spreads over the threads too.
template <typename scalar_t>
struct Task {
  scalar_t* out;          // [heads, d] contiguous
  const scalar_t* query;  // [heads, d] at query_head_stride
  int64_t query_head_stride;
  const scalar_t* keys;   // the cache halves, offset to the kv head
  const scalar_t* values;
  const CacheView* kv;
  int64_t block_size, heads, d;
  Sequence seq;
  float scale;

  int64_t length() const { return seq.length - seq.first; }
  const scalar_t* row(const scalar_t* base, int64_t t) const {  // token t's keys or values
    return base + seq.blocks[t / block_size] * kv->block_stride + (t % block_size) * kv->slot_stride;
  }
};

// Softmax of each head's n scores in place (row h of [heads, stride]); returns 1 / each row's sum in inv.
inline void softmax_rows(float* scores, int64_t heads, int64_t n, int64_t stride, float* inv) {
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * stride;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = exp_nonpositive(s[i] - m));
    inv[h] = 1.f / sum;
  }
}

// A task's working memory: scores [heads, stride], the scaled float32 queries and the weighted sums [heads, d],
// and 1 / each head's softmax sum [heads].
struct Buffers {
  float *scores, *q, *acc, *inv;
  int64_t stride;
};

// The buffers in scratch, the queries filled in (times the scale) and the sums zeroed.
template <typename scalar_t>
Buffers buffers(const Task<scalar_t>& task, int64_t stride, std::vector<float>& scratch) {
  const int64_t heads = task.heads, d = task.d;
  scratch.resize(static_cast<size_t>(heads * (stride + 2 * d + 1)));
  Buffers b{scratch.data(), nullptr, nullptr, nullptr, stride};
  b.q = b.scores + heads * stride;
  b.acc = b.q + heads * d;
  b.inv = b.acc + heads * d;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d; ++i) b.q[h * d + i] = static_cast<float>(task.query[h * task.query_head_stride + i]) * task.scale;
  std::fill(b.acc, b.acc + heads * d, 0.f);
  return b;
}

// out = acc * inv per head.
template <typename scalar_t>
void write_out(const Task<scalar_t>& task, const Buffers& b) {
  for (int64_t h = 0; h < task.heads; ++h)
    for (int64_t i = 0; i < task.d; ++i) task.out[h * task.d + i] = static_cast<scalar_t>(b.acc[h * task.d + i] * b.inv[h]);
}

// Any head size, any instruction set: dots and sums a row at a time.
template <typename scalar_t>
void attend_rows(const Task<scalar_t>& task, std::vector<float>& scratch) {
  const int64_t n = task.length(), heads = task.heads, d = task.d, first = task.seq.first;
  const Buffers b = buffers(task, n, scratch);
  for (int64_t t = first; t < task.seq.length; ++t) {
    if (t + task.block_size < task.seq.length) prefetch_row(task.row(task.keys, t + task.block_size), d);
    const scalar_t* k = task.row(task.keys, t);
    for (int64_t h = 0; h < heads; ++h) b.scores[h * n + (t - first)] = dot(b.q + h * d, k, d);
  }
  softmax_rows(b.scores, heads, n, n, b.inv);
  for (int64_t t = first; t < task.seq.length; ++t) {
    if (t + task.block_size < task.seq.length) prefetch_row(task.row(task.values, t + task.block_size), d);
    const scalar_t* v = task.row(task.values, t);
    for (int64_t h = 0; h < heads; ++h) axpy(b.acc + h * d, b.scores[h * n + (t - first)], v, d);
  }
  write_out(task, b);
}

#if defined(__AVX512F__)
constexpr int64_t CHUNK = 16;  // tokens a step: one vector of scores per head

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

// acc[h][lanes] += p[h][j] * rows[j][lanes] over `count` rows, for HEADS heads and CHUNKS x 16 lanes (from
// offset): the accumulators stay in registers across the rows.
template <int HEADS, int CHUNKS, typename scalar_t>
void weighted_sum(const scalar_t* const* rows, int64_t count, int64_t offset, const float* p, int64_t p_stride,
                  float* acc, int64_t d) {
  __m512 sum[HEADS][CHUNKS];
  for (int h = 0; h < HEADS; ++h)
    for (int c = 0; c < CHUNKS; ++c) sum[h][c] = _mm512_loadu_ps(acc + h * d + 16 * c);
  for (int64_t j = 0; j < count; ++j) {
    __m512 v[CHUNKS];
    for (int c = 0; c < CHUNKS; ++c) v[c] = load16(rows[j] + offset + 16 * c);
    for (int h = 0; h < HEADS; ++h) {
      const __m512 weight = _mm512_set1_ps(p[h * p_stride + j]);
      for (int c = 0; c < CHUNKS; ++c) sum[h][c] = _mm512_fmadd_ps(weight, v[c], sum[h][c]);
    }
  }
  for (int h = 0; h < HEADS; ++h)
    for (int c = 0; c < CHUNKS; ++c) _mm512_storeu_ps(acc + h * d + 16 * c, sum[h][c]);
}

template <typename scalar_t>
using WeightedSum = void (*)(const scalar_t* const*, int64_t, int64_t, const float*, int64_t, float*, int64_t);

template <typename scalar_t, int HEADS>
WeightedSum<scalar_t> weighted_sum_for(int64_t chunks) {
  return chunks == 1 ? weighted_sum<HEADS, 1, scalar_t> : chunks == 2 ? weighted_sum<HEADS, 2, scalar_t>
       : chunks == 3 ? weighted_sum<HEADS, 3, scalar_t> : weighted_sum<HEADS, 4, scalar_t>;
}

// The kernel for up to 4 heads x 64 lanes.
template <typename scalar_t>
WeightedSum<scalar_t> weighted_sum_for(int64_t heads, int64_t chunks) {
  return heads == 1 ? weighted_sum_for<scalar_t, 1>(chunks) : heads == 2 ? weighted_sum_for<scalar_t, 2>(chunks)
       : heads == 3 ? weighted_sum_for<scalar_t, 3>(chunks) : weighted_sum_for<scalar_t, 4>(chunks);
}

// The rows of tokens [t0, t0 + 16), the last repeated past the sequence's end (their lanes are not used).
template <typename scalar_t>
void chunk_rows(const Task<scalar_t>& task, const scalar_t* base, int64_t t0, const scalar_t** rows) {
  const int64_t count = std::min(CHUNK, task.seq.length - t0);
  for (int64_t j = 0; j < CHUNK; ++j) rows[j] = task.row(base, t0 + std::min(j, count - 1));
  for (int64_t t = t0 + CHUNK; t < std::min(t0 + 2 * CHUNK, task.seq.length); ++t)
    prefetch_row(task.row(base, t), task.d);
}

// Head sizes a multiple of 16 on AVX-512, 16 tokens at a time: the scores of 16 tokens in one vector a head
// (2x the row-at-a-time path's speed on rows in cache); the weighted sum 4 heads x 64 lanes at a time with the
// accumulators in registers.
template <typename scalar_t>
void attend_vectors(const Task<scalar_t>& task, std::vector<float>& scratch) {
  const int64_t n = task.length(), heads = task.heads, d = task.d, first = task.seq.first;
  const int64_t stride = n + CHUNK;  // whole vectors of scores are stored past n
  const Buffers b = buffers(task, stride, scratch);
  const scalar_t* rows[CHUNK];
  for (int64_t t0 = first; t0 < task.seq.length; t0 += CHUNK) {
    chunk_rows(task, task.keys, t0, rows);
    for (int64_t h = 0; h < heads; ++h)
      _mm512_storeu_ps(b.scores + h * stride + (t0 - first), dots16(b.q + h * d, rows, d));
  }
  softmax_rows(b.scores, heads, n, stride, b.inv);
  for (int64_t t0 = first; t0 < task.seq.length; t0 += CHUNK) {
    chunk_rows(task, task.values, t0, rows);
    const int64_t count = std::min(CHUNK, task.seq.length - t0);
    for (int64_t h0 = 0; h0 < heads; h0 += 4)
      for (int64_t lane0 = 0; lane0 < d; lane0 += 64)
        weighted_sum_for<scalar_t>(std::min<int64_t>(4, heads - h0), std::min<int64_t>(64, d - lane0) / 16)(
            rows, count, lane0, b.scores + h0 * stride + (t0 - first), stride, b.acc + h0 * d + lane0, d);
  }
  write_out(task, b);
}
#endif

template <typename scalar_t>
void attend(const Task<scalar_t>& task, std::vector<float>& scratch) {
  if (task.length() <= 0) {  // nothing cached to attend over: zeros
    std::fill(task.out, task.out + task.heads * task.d, static_cast<scalar_t>(0));
    return;
  }
#if defined(__AVX512F__)
  if (task.d % 16 == 0) return attend_vectors(task, scratch);
#endif
  attend_rows(task, scratch);
}

}  // namespace

// out, query: [num_seqs, num_heads, head_size]; key_cache, value_cache: [num_blocks, block_size, num_kv_heads,
// head_size] (head_size contiguous); block_tables: [num_seqs, max_blocks] int32; seq_lens: [num_seqs] int32.
// window > 0 attends over the last `window` positions only.
void paged_decode_attention(torch::Tensor out, torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                            torch::Tensor block_tables, torch::Tensor seq_lens, double scale, int64_t window) {
  TORCH_CHECK(query.dim() == 3 && out.sizes() == query.sizes() && out.is_contiguous(),
              "query and out must be [num_seqs, num_heads, head_size], out contiguous");
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.sizes() == value_cache.sizes() &&
                  key_cache.strides() == value_cache.strides(),
              "key and value caches must be [num_blocks, block_size, num_kv_heads, head_size] views alike");
  TORCH_CHECK(query.stride(2) == 1 && key_cache.stride(3) == 1, "head_size must be the contiguous dimension");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && seq_lens.scalar_type() == at::kInt &&
                  block_tables.stride(1) == 1 && seq_lens.is_contiguous(),
              "block_tables and seq_lens must be int32 with contiguous rows");
  TORCH_CHECK(query.scalar_type() == key_cache.scalar_type() && out.scalar_type() == query.scalar_type(),
              "query, out and the cache must share one dtype");
  const int64_t num_seqs = query.size(0), num_heads = query.size(1), d = query.size(2);
  const int64_t block_size = key_cache.size(1), kv_heads = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == d && num_heads % kv_heads == 0, "head sizes differ or heads % kv_heads != 0");
  const CacheView kv{key_cache.stride(0), key_cache.stride(1), key_cache.stride(2)};
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int64_t table_stride = block_tables.stride(0);
  const int64_t group = num_heads / kv_heads;
  auto run = [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* q = query.data_ptr<scalar_t>();
    const scalar_t* k = key_cache.data_ptr<scalar_t>();
    const scalar_t* v = value_cache.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, num_seqs * kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch;
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t i = unit / kv_heads, g = unit % kv_heads, length = lens[i];
        const Sequence seq{tables + i * table_stride, window > 0 ? std::max<int64_t>(0, length - window) : 0, length};
        const Task<scalar_t> task{o + (i * num_heads + g * group) * d, q + i * query.stride(0) + g * group * query.stride(1),
                                  query.stride(1), k + g * kv.head_stride, v + g * kv.head_stride, &kv, block_size,
                                  group, d, seq, static_cast<float>(scale)};
        attend(task, scratch);
      }
    });
  };
  switch (query.scalar_type()) {
    case at::kFloat: return run(float{});
    case at::kBFloat16: return run(c10::BFloat16{});
    case at::kHalf: return run(c10::Half{});
    default: TORCH_CHECK(false, "paged_decode_attention takes float32, bfloat16 or float16, not ", query.scalar_type());
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode_attention", &paged_decode_attention,
        "Decode attention over a paged KV cache, read in place (CPU)");
}
