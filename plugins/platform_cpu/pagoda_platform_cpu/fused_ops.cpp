// The CPU platform's element-wise layers as one pass each over rows of float32 or bfloat16: RMSNorm (with the
// residual add before it), SiLU-and-multiply, and the rotary embedding in place. torch runs each as several
// operations, every one a pass over the whole tensor with a temporary between (RMSNorm: square, mean, rsqrt,
// two multiplies); a row here is read once into cache and finished there.
//
// Rounding follows Pagoda's torch reference (and HF transformers): sums and products in float32, the result
// rounded to the tensor's dtype where the reference rounds it (bfloat16: the normalised row before the weight
// multiplies it, SiLU's output before the product).

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t GRAIN_ELEMENTS = 1 << 15;  // a thread's least share of a call: smaller calls run on one

int64_t grain(int64_t row_elements) { return std::max<int64_t>(1, GRAIN_ELEMENTS / std::max<int64_t>(1, row_elements)); }

// Conversions in forms the compiler vectorises (c10's own round through a branch for NaN).
inline float to_float(float x) { return x; }
inline float to_float(c10::BFloat16 x) {  // bfloat16 is float32's upper half
  const uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline void store(float* to, float x) { *to = x; }
inline void store(c10::BFloat16* to, float x) {  // round to nearest even; a NaN stays a (quiet) NaN
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t even = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  to->x = static_cast<uint16_t>(std::isnan(x) ? 0x7FC0u : even);
}

// float32 -> scalar_t -> float32: the value the reference holds after rounding to its dtype.
template <typename scalar_t>
inline float rounded(float x) {
  scalar_t r;
  store(&r, x);
  return to_float(r);
}

// 2^y for y <= 32: y = n + f with |f| <= 1/2, 2^f by its degree-6 Taylor series in f ln2 (relative error below
// 3e-8 there), 2^n put in the exponent bits; 0 below 2^-126 (float's smallest normal).
inline float exp2_bounded(float y) {
  const float clamped = std::max(y, -126.f);
  const float n = std::nearbyint(clamped);
  const float f = (clamped - n) * 0.693147180559945f;
  const float p = 1.f + f * (1.f + f * (0.5f + f * (1.f / 6 + f * (1.f / 24 + f * (1.f / 120 + f * (1.f / 720))))));
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<int32_t>(n) * (1 << 23);
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return y < -126.f ? 0.f : result;
}

// x * sigmoid(x) from e = exp(-|x|) <= 1 (no overflow at either end); e is taken as 2^(y + 32) / 2^32 so that
// it runs on into float's subnormals (x near -100 still has a normal silu) instead of stopping at 2^-126.
inline float silu(float x) {
  const float e = exp2_bounded(-std::fabs(x) * 1.4426950408889634f + 32.f) * 2.3283064365386963e-10f;
  return x * (x >= 0.f ? 1.f : e) / (1.f + e);
}

// out[i] = rms_norm(x[i]) * weight; with a residual: sum[i] = x[i] + residual[i] (rounded to the dtype), and
// the norm is of sum[i]. Rows at their own strides; the hidden dimension contiguous.
template <typename scalar_t>
void rms_rows(scalar_t* out, const scalar_t* x, int64_t x_stride, const scalar_t* residual, int64_t residual_stride,
              scalar_t* sum, const scalar_t* weight, int64_t rows, int64_t d, float eps) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    std::vector<float> row(d);
    float* r = row.data();
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* xi = x + i * x_stride;
      if (residual) {
        const scalar_t* ri = residual + i * residual_stride;
        scalar_t* si = sum + i * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          store(si + j, to_float(xi[j]) + to_float(ri[j]));
          r[j] = to_float(si[j]);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) r[j] = to_float(xi[j]);
      }
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < d; ++j) squares += r[j] * r[j];
      const float inv = 1.f / std::sqrt(squares / static_cast<float>(d) + eps);
      scalar_t* oi = out + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store(oi + j, to_float(weight[j]) * rounded<scalar_t>(r[j] * inv));
    }
  });
}

// out[i] = silu(x[i, :d]) * x[i, d:], silu's output rounded to the dtype first (as the reference's two ops).
template <typename scalar_t>
void silu_mul_rows(scalar_t* out, const scalar_t* x, int64_t x_stride, int64_t rows, int64_t d) {
  at::parallel_for(0, rows, grain(2 * d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const scalar_t* gate = x + i * x_stride;
      const scalar_t* up = gate + d;
      scalar_t* oi = out + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store(oi + j, rounded<scalar_t>(silu(to_float(gate[j]))) * to_float(up[j]));
    }
  });
}

// One tensor's heads rotated in place: x [tokens, heads, head_size] at (token_stride, head_size); the first
// 2 * half features of a head rotate, neox style (pairs (j, j + half)), by row positions[t] of the cache
// [max_position, 2 * half] (cos half, then sin half).
template <typename scalar_t, typename cache_t>
void rotate_rows(scalar_t* x, int64_t token_stride, int64_t heads, int64_t head_size, const int64_t* positions,
                 const cache_t* cache, int64_t cache_stride, int64_t half, int64_t tokens) {
  at::parallel_for(0, tokens, grain(heads * head_size), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const cache_t* cos = cache + positions[t] * cache_stride;
      const cache_t* sin = cos + half;
      for (int64_t h = 0; h < heads; ++h) {
        scalar_t* x1 = x + t * token_stride + h * head_size;
        scalar_t* x2 = x1 + half;
#pragma omp simd
        for (int64_t j = 0; j < half; ++j) {
          const float a = to_float(x1[j]), b = to_float(x2[j]), c = to_float(cos[j]), s = to_float(sin[j]);
          store(x1 + j, a * c - b * s);
          store(x2 + j, b * c + a * s);
        }
      }
    }
  });
}

void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.stride(1) == 1, name, " must be [rows, features] with the features contiguous");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
              " must be float32 or bfloat16, not ", t.scalar_type());
}

template <typename F>
void dispatch(const torch::Tensor& t, F&& run) {
  if (t.scalar_type() == at::kFloat) return run(float{});
  return run(c10::BFloat16{});
}

}  // namespace

// out [rows, d] (contiguous) = rms_norm(x) * weight; with residual given, sum [rows, d] (contiguous) = x + residual
// first and the norm is of the sum.
void rms_norm(torch::Tensor out, torch::Tensor x, std::optional<torch::Tensor> residual, std::optional<torch::Tensor> sum,
              torch::Tensor weight, double eps) {
  check_rows(x, "x");
  const int64_t rows = x.size(0), d = x.size(1);
  TORCH_CHECK(out.is_contiguous() && out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type(),
              "out must be contiguous and x's shape and dtype");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == d && weight.scalar_type() == x.scalar_type(),
              "weight must be contiguous, [hidden], x's dtype");
  TORCH_CHECK(residual.has_value() == sum.has_value(), "residual and sum come together");
  if (residual) {
    check_rows(*residual, "residual");
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == x.scalar_type() && sum->is_contiguous() &&
                    sum->sizes() == x.sizes() && sum->scalar_type() == x.scalar_type(),
                "residual and sum must be x's shape and dtype, sum contiguous");
  }
  dispatch(x, [&](auto zero) {
    using scalar_t = decltype(zero);
    rms_rows<scalar_t>(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), x.stride(0),
                       residual ? residual->data_ptr<scalar_t>() : nullptr, residual ? residual->stride(0) : 0,
                       sum ? sum->data_ptr<scalar_t>() : nullptr, weight.data_ptr<scalar_t>(), rows, d,
                       static_cast<float>(eps));
  });
}

// out [rows, d] (contiguous) = silu(x[:, :d]) * x[:, d:], x [rows, 2d].
void silu_and_mul(torch::Tensor out, torch::Tensor x) {
  check_rows(x, "x");
  TORCH_CHECK(x.size(1) % 2 == 0 && out.is_contiguous() && out.dim() == 2 && out.size(0) == x.size(0) &&
                  2 * out.size(1) == x.size(1) && out.scalar_type() == x.scalar_type(),
              "out must be contiguous [rows, d] of x's dtype, x [rows, 2d]");
  dispatch(x, [&](auto zero) {
    using scalar_t = decltype(zero);
    silu_mul_rows<scalar_t>(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), x.stride(0), x.size(0), out.size(1));
  });
}

// query [tokens, heads * head_size], key [tokens, kv_heads * head_size] (rows at any stride, features contiguous)
// rotated in place, neox style, by cos_sin_cache [max_position, rotary_dim] (float32 or their dtype) at positions
// [tokens] int64.
void rotary_embedding(torch::Tensor positions, torch::Tensor query, torch::Tensor key, int64_t head_size,
                      torch::Tensor cos_sin_cache) {
  check_rows(query, "query");
  check_rows(key, "key");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() && positions.numel() == query.size(0) &&
                  key.size(0) == query.size(0) && key.scalar_type() == query.scalar_type(),
              "positions must be int64, one a token; query and key of one dtype and token count");
  TORCH_CHECK(query.size(1) % head_size == 0 && key.size(1) % head_size == 0, "rows must hold whole heads");
  TORCH_CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.stride(1) == 1 && cos_sin_cache.size(1) % 2 == 0 &&
                  cos_sin_cache.size(1) <= head_size &&
                  (cos_sin_cache.scalar_type() == at::kFloat || cos_sin_cache.scalar_type() == query.scalar_type()),
              "cos_sin_cache must be [max_position, rotary_dim <= head_size], float32 or the query's dtype");
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t t = 0; t < positions.numel(); ++t)
    TORCH_CHECK(pos[t] >= 0 && pos[t] < cos_sin_cache.size(0), "position ", pos[t], " is outside cos_sin_cache's ",
                cos_sin_cache.size(0), " rows");
  const int64_t half = cos_sin_cache.size(1) / 2;
  dispatch(query, [&](auto zero) {
    using scalar_t = decltype(zero);
    auto run = [&](auto cache_zero) {
      using cache_t = decltype(cache_zero);
      for (torch::Tensor* x : {&query, &key})
        rotate_rows<scalar_t, cache_t>(x->data_ptr<scalar_t>(), x->stride(0), x->size(1) / head_size, head_size,
                                       positions.data_ptr<int64_t>(), cos_sin_cache.data_ptr<cache_t>(),
                                       cos_sin_cache.stride(0), half, x->size(0));
    };
    if (cos_sin_cache.scalar_type() == at::kFloat) return run(float{});
    return run(scalar_t{});
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "RMSNorm of rows, with an optional residual add first (CPU)");
  m.def("silu_and_mul", &silu_and_mul, "silu(x[:, :d]) * x[:, d:] (CPU)");
  m.def("rotary_embedding", &rotary_embedding, "neox-style rotary embedding of query and key in place (CPU)");
}
