// Paged decode attention (one query token per sequence), GQA-aware, with split-KV.
//
// Grid (num_decodes, num_heads / HPC, num_splits), 128 threads. A CTA takes HPC query heads of
// one kv head (HPC divides the GQA group), so each K/V row it reads serves all HPC heads, over
// one num_splits-th of the context. Inside the CTA, threads form groups of HEAD / 8 lanes; a
// group holds one key row at a time (8 elements = 16 bytes per lane, a coalesced row read),
// and every group runs its own online softmax over its own keys: no barrier in the key loop.
// At the end the groups' (max, sum, accumulator) are merged through shared memory.
// With one split the CTA writes the output; otherwise it writes its normalised partial output
// and log2-sum-exp, and reduce_splits_kernel combines the splits. Lengths and block tables are
// read on the device only (CUDA-graph safe); every split count is correct for every length.
#include "flash_api.h"
#include "flash_primitives.cuh"

namespace pagoda {
namespace flash {
namespace {

constexpr int kDecodeThreads = 128;

template <int HEAD, int HPC>
struct DecodeShape {
  static constexpr int kLanes = HEAD / 8;  // lanes per key row
  static constexpr int kGroups = kDecodeThreads / kLanes;
  // consecutive keys a group loads before it computes (loads in flight); 2 for 8 heads, whose
  // q and accumulators already take 128 registers
  static constexpr int kUnroll = HPC >= 8 ? 2 : 4;
  static constexpr int kKeysPerStep = kGroups * kUnroll;
};

// Eight 16-bit values (one uint4) as floats.
template <typename T>
FLASH_INLINE void unpack8(const uint4& v, float out[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = unpack2<T>(words[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// The keys [key_lo, key_hi) this split of sequence `seq` attends.
FLASH_INLINE void split_range(const FlashParams& p, int seq_len, int split, int& key_lo, int& key_hi) {
  const int lo = p.window > 0 ? max(0, seq_len - p.window) : 0;  // query at seq_len - 1 sees j > seq_len - 1 - window
  const int chunk = (seq_len - lo + p.num_splits - 1) / p.num_splits;
  key_lo = lo + split * chunk;
  key_hi = min(key_lo + chunk, seq_len);
}

// Online softmax of one group over its keys; m, l, acc are this lane's running state per head.
template <typename T, int HEAD, int HPC>
FLASH_INLINE void attend_keys(const FlashParams& p, int seq, int kvh, int key_lo, int key_hi, const float (&q)[HPC][8],
                              float (&m)[HPC], float (&l)[HPC], float (&acc)[HPC][8]) {
  using Shape = DecodeShape<HEAD, HPC>;
  const int lane = threadIdx.x % Shape::kLanes;
  const int group = threadIdx.x / Shape::kLanes;
  const int* bt = p.block_tables + static_cast<int64_t>(seq) * p.bt_stride;
  const int64_t head_off = static_cast<int64_t>(kvh) * p.kv_stride_head + lane * 8;
  const T* k_cache = static_cast<const T*>(p.k_cache) + head_off;
  const T* v_cache = static_cast<const T*>(p.v_cache) + head_off;
  for (int j0 = key_lo; j0 < key_hi; j0 += Shape::kKeysPerStep) {  // uniform over the CTA
    uint4 k_raw[Shape::kUnroll], v_raw[Shape::kUnroll];
    bool valid[Shape::kUnroll];
#pragma unroll
    for (int u = 0; u < Shape::kUnroll; ++u) {
      const int j = j0 + group * Shape::kUnroll + u;
      valid[u] = j < key_hi;
      k_raw[u] = v_raw[u] = make_uint4(0, 0, 0, 0);
      if (valid[u]) {
        const int64_t row = static_cast<int64_t>(bt[j / p.block_size]) * p.kv_stride_block +
                            static_cast<int64_t>(j % p.block_size) * p.kv_stride_token;
        k_raw[u] = *reinterpret_cast<const uint4*>(k_cache + row);
        v_raw[u] = *reinterpret_cast<const uint4*>(v_cache + row);
      }
    }
    float s[HPC][Shape::kUnroll];  // scores in log2 units (q is pre-scaled)
#pragma unroll
    for (int u = 0; u < Shape::kUnroll; ++u) {
      float k[8];
      unpack8<T>(k_raw[u], k);
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[h][i], k[i], dot);
        dot = group_sum<Shape::kLanes>(dot);  // all lanes execute the shuffles
        s[h][u] = valid[u] ? dot : kNegInf;
      }
    }
#pragma unroll
    for (int u = 0; u < Shape::kUnroll; ++u) {
      float v[8];
      unpack8<T>(v_raw[u], v);
#pragma unroll
      for (int h = 0; h < HPC; ++h) {
        const float m_new = fmaxf(m[h], s[h][u]);
        const float m_use = m_new == kNegInf ? 0.f : m_new;  // nothing visible yet
        const float alpha = exp2_approx(m[h] - m_use);
        const float pu = exp2_approx(s[h][u] - m_use);
        l[h] = l[h] * alpha + pu;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(pu, v[i], acc[h][i] * alpha);
        m[h] = m_new;
      }
    }
  }
}

template <typename T, int HEAD, int HPC>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(const FlashParams p) {
  using Shape = DecodeShape<HEAD, HPC>;
  __shared__ float s_m[Shape::kGroups][HPC];
  __shared__ float s_l[Shape::kGroups][HPC];
  __shared__ float s_acc[Shape::kGroups][HPC][HEAD];

  const int seq = blockIdx.x;  // decodes come first: sequence i owns query token i
  const int head0 = blockIdx.y * HPC;
  const int kvh = head0 / (p.num_heads / p.num_kv_heads);
  const int split = blockIdx.z;
  const int lane = threadIdx.x % Shape::kLanes;
  const int group = threadIdx.x / Shape::kLanes;
  int key_lo, key_hi;
  split_range(p, p.seq_lens[seq], split, key_lo, key_hi);

  float q[HPC][8];  // this lane's 8 dimensions of each head, times scale * log2(e)
  const T* q_ptr = static_cast<const T*>(p.query) + static_cast<int64_t>(seq) * p.q_stride_token + lane * 8;
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[h][i] = to_float<T>(q_ptr[(head0 + h) * p.q_stride_head + i]) * p.scale_log2;
  }
  float m[HPC], l[HPC], acc[HPC][8];
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    m[h] = kNegInf;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.f;
  }
  attend_keys<T, HEAD, HPC>(p, seq, kvh, key_lo, key_hi, q, m, l, acc);

  // merge the groups: weights 2^(m_g - max_g m_g)
#pragma unroll
  for (int h = 0; h < HPC; ++h) {
    if (lane == 0) {
      s_m[group][h] = m[h];
      s_l[group][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) s_acc[group][h][lane * 8 + i] = acc[h][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < HPC * HEAD; idx += kDecodeThreads) {
    const int h = idx / HEAD, d = idx % HEAD;
    float mx = kNegInf;
    for (int g = 0; g < Shape::kGroups; ++g) mx = fmaxf(mx, s_m[g][h]);
    const float m_use = mx == kNegInf ? 0.f : mx;
    float sum = 0.f, o = 0.f;
    for (int g = 0; g < Shape::kGroups; ++g) {
      const float w = exp2_approx(s_m[g][h] - m_use);
      sum += s_l[g][h] * w;
      o += s_acc[g][h][d] * w;
    }
    const float out = sum > 0.f ? o / sum : 0.f;
    const int head = head0 + h;
    if (p.num_splits == 1) {
      T* dst = static_cast<T*>(p.out) + static_cast<int64_t>(seq) * p.o_stride_token + head * p.o_stride_head;
      dst[d] = from_float<T>(out);
    } else {
      const int64_t row = (static_cast<int64_t>(seq) * p.num_heads + head) * p.num_splits + split;
      p.part_out[row * HEAD + d] = out;
      if (d == 0) p.part_lse[row] = sum > 0.f ? mx + __log2f(sum) : kNegInf;
    }
  }
}

// Combine the splits of one (sequence, head): out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max).
// One thread per output element (blockDim.x == head_size).
template <typename T>
__global__ void reduce_splits_kernel(const FlashParams p) {
  const int seq = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int64_t row0 = (static_cast<int64_t>(seq) * p.num_heads + head) * p.num_splits;
  float mx = kNegInf;
  for (int s = 0; s < p.num_splits; ++s) mx = fmaxf(mx, p.part_lse[row0 + s]);
  const float m_use = mx == kNegInf ? 0.f : mx;
  float sum = 0.f, o = 0.f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float w = exp2_approx(p.part_lse[row0 + s] - m_use);  // empty splits: lse -inf, weight 0
    sum += w;
    o += w * p.part_out[(row0 + s) * p.head_size + d];
  }
  T* dst = static_cast<T*>(p.out) + static_cast<int64_t>(seq) * p.o_stride_token + head * p.o_stride_head;
  dst[d] = from_float<T>(sum > 0.f ? o / sum : 0.f);
}

template <typename T, int HEAD>
cudaError_t launch_decode_head(const FlashParams& p, int num_decodes, cudaStream_t stream) {
  const int hpc = decode_heads_per_cta(p.num_heads, p.num_kv_heads);
  const dim3 grid(num_decodes, p.num_heads / hpc, p.num_splits);
  switch (hpc) {
    case 8: decode_kernel<T, HEAD, 8><<<grid, kDecodeThreads, 0, stream>>>(p); break;
    case 4: decode_kernel<T, HEAD, 4><<<grid, kDecodeThreads, 0, stream>>>(p); break;
    case 2: decode_kernel<T, HEAD, 2><<<grid, kDecodeThreads, 0, stream>>>(p); break;
    default: decode_kernel<T, HEAD, 1><<<grid, kDecodeThreads, 0, stream>>>(p); break;
  }
  if (p.num_splits > 1) {
    reduce_splits_kernel<T><<<dim3(num_decodes, p.num_heads), HEAD, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_decode_typed(const FlashParams& p, int num_decodes, cudaStream_t stream) {
  switch (p.head_size) {
    case 64: return launch_decode_head<T, 64>(p, num_decodes, stream);
    case 128: return launch_decode_head<T, 128>(p, num_decodes, stream);
    case 256: return launch_decode_head<T, 256>(p, num_decodes, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool supports_head_size(int head_size) { return head_size == 64 || head_size == 128 || head_size == 256; }

int decode_heads_per_cta(int num_heads, int num_kv_heads) {
  const int group = num_heads / num_kv_heads;
  for (int hpc = 8; hpc > 1; hpc /= 2) {
    if (group % hpc == 0) return hpc;
  }
  return 1;
}

cudaError_t launch_decode(const FlashParams& p, int num_decodes, DType dtype, cudaStream_t stream) {
  if (num_decodes <= 0) return cudaSuccess;
  return dtype == DType::kHalf ? launch_decode_typed<__half>(p, num_decodes, stream)
                               : launch_decode_typed<__nv_bfloat16>(p, num_decodes, stream);
}

}  // namespace flash
}  // namespace pagoda
