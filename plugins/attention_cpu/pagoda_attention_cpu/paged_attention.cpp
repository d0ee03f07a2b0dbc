// Paged decode attention on CPU: one query token per sequence, attended over the sequence's cached keys
// and values read in place through its block table (no gather into a padded copy).
//
// One task per sequence on torch's intra-op threads. A task reads the sequence's cache rows (one token's keys
// or values for every kv head: contiguous) in order, block by block, prefetching one block ahead; scores every
// query head against its kv head's row (GQA/MQA: a group of query heads shares each row), takes the softmax in
// float32, and sums the value rows weighted by it: one pass over the keys and one over the values.

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

// One sequence, every head: out [num_heads, d] contiguous; query rows num_heads x d at query_head_stride.
template <typename scalar_t>
void attend_sequence(scalar_t* out, const scalar_t* query, int64_t query_head_stride, const scalar_t* keys,
                     const scalar_t* values, const CacheView& kv, int64_t block_size, const Sequence& seq,
                     int64_t num_heads, int64_t kv_heads, int64_t d, float scale, std::vector<float>& scratch) {
  const int64_t n = seq.length - seq.first, group = num_heads / kv_heads;
  if (n <= 0) {  // nothing cached to attend over: zeros
    std::fill(out, out + num_heads * d, static_cast<scalar_t>(0));
    return;
  }
  scratch.resize(static_cast<size_t>(num_heads * (n + 2 * d + 1)));
  float* scores = scratch.data();      // [num_heads, n]
  float* q = scores + num_heads * n;   // [num_heads, d], pre-scaled
  float* acc = q + num_heads * d;      // [num_heads, d]
  float* inv = acc + num_heads * d;    // [num_heads]: 1 / the softmax's sum
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < d; ++i) q[h * d + i] = static_cast<float>(query[h * query_head_stride + i]) * scale;
  auto row = [&](const scalar_t* base, int64_t t) {
    return base + seq.blocks[t / block_size] * kv.block_stride + (t % block_size) * kv.slot_stride;
  };
  const int64_t row_elements = kv_heads * kv.head_stride;
  for (int64_t t = seq.first; t < seq.length; ++t) {
    if (t + block_size < seq.length) prefetch_row(row(keys, t + block_size), row_elements);
    const scalar_t* k = row(keys, t);
    for (int64_t h = 0; h < num_heads; ++h) scores[h * n + (t - seq.first)] = dot(q + h * d, k + (h / group) * kv.head_stride, d);
  }
  for (int64_t h = 0; h < num_heads; ++h) {
    float* s = scores + h * n;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += (s[i] = exp_nonpositive(s[i] - m));
    inv[h] = 1.f / sum;
  }
  std::fill(acc, acc + num_heads * d, 0.f);
  for (int64_t t = seq.first; t < seq.length; ++t) {
    if (t + block_size < seq.length) prefetch_row(row(values, t + block_size), row_elements);
    const scalar_t* v = row(values, t);
    for (int64_t h = 0; h < num_heads; ++h) axpy(acc + h * d, scores[h * n + (t - seq.first)], v + (h / group) * kv.head_stride, d);
  }
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < d; ++i) out[h * d + i] = static_cast<scalar_t>(acc[h * d + i] * inv[h]);
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
  auto run = [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* q = query.data_ptr<scalar_t>();
    const scalar_t* k = key_cache.data_ptr<scalar_t>();
    const scalar_t* v = value_cache.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, num_seqs, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t length = lens[i];
        const Sequence seq{tables + i * table_stride, window > 0 ? std::max<int64_t>(0, length - window) : 0, length};
        attend_sequence(o + i * num_heads * d, q + i * query.stride(0), query.stride(1), k, v, kv, block_size, seq,
                        num_heads, kv_heads, d, static_cast<float>(scale), scratch);
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
