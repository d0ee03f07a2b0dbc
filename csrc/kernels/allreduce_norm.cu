// The peer all-reduce kernels (protocol in allreduce_norm.h): one launch copies this rank's partial
// sums into its symmetric buffer, meets the same block of every peer through flags, and sums the
// ranks' buffers in rank order; the fused variant then adds the residual and applies RMSNorm.
#include <cuda/atomic>

#include <algorithm>

#include "../vec.cuh"
#include "allreduce_norm.h"
#include "rms_norm.cuh"

namespace pagoda {
namespace {

using Epoch = uint64_t;
using SystemFlag = cuda::atomic_ref<Epoch, cuda::thread_scope_system>;
using DeviceCounter = cuda::atomic_ref<Epoch, cuda::thread_scope_device>;

constexpr int kSumThreads = 512;    // threads per block of the plain all-reduce
constexpr int kNormThreads = 1024;  // at most, per block (one row) of the fused variant: as launch_fused_add_rms_norm

// Rank p's buffer; p < kPeerMaxRanks (a constant index after unrolling keeps `buffers` in parameter space).
PAGODA_INLINE void* buffer_of(const PeerGroup& g, int p) {
  void* found = g.buffers[0];
#pragma unroll
  for (int q = 1; q < kPeerMaxRanks; ++q) {
    if (q == p) found = g.buffers[q];
  }
  return found;
}

PAGODA_INLINE Epoch* flag(void* buffer, int block, int sender) {
  return static_cast<Epoch*>(buffer) + block * kPeerMaxRanks + sender;
}

template <typename T>
PAGODA_INLINE T* slot(void* buffer, Epoch epoch, int64_t slot_bytes) {
  const int64_t offset = kPeerFlagBytes + static_cast<int64_t>(epoch & 1) * slot_bytes;
  return reinterpret_cast<T*>(static_cast<char*>(buffer) + offset);
}

// This call's epoch, the same in every block: the last call's (state[0]) plus one.
PAGODA_INLINE Epoch begin_call(const PeerGroup& g) {
  __shared__ Epoch epoch;
  if (threadIdx.x == 0) epoch = DeviceCounter(g.state[0]).load(cuda::std::memory_order_relaxed) + 1;
  __syncthreads();
  return epoch;
}

// Called by every thread once the block has written its part of this rank's slot: thread p tells
// block blockIdx.x of peer p that the part is there (release: the block's writes come first), then
// waits for that peer's word (acquire: the peer's part is visible to the whole block after this).
PAGODA_INLINE void meet_peers(const PeerGroup& g, Epoch epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < g.world_size && peer != g.rank) {
    SystemFlag(*flag(buffer_of(g, peer), blockIdx.x, g.rank)).store(epoch, cuda::std::memory_order_release);
    SystemFlag arrived(*flag(buffer_of(g, g.rank), blockIdx.x, peer));
    while (arrived.load(cuda::std::memory_order_acquire) < epoch) {
    }
  }
  __syncthreads();
}

// The last block to finish publishes the epoch for the next call (every block has read it by then).
PAGODA_INLINE void end_call(const PeerGroup& g, Epoch epoch) {
  if (threadIdx.x != 0) return;
  DeviceCounter finished(g.state[1]);
  if (finished.fetch_add(1, cuda::std::memory_order_acq_rel) == gridDim.x - 1) {
    finished.store(0, cuda::std::memory_order_relaxed);
    DeviceCounter(g.state[0]).store(epoch, cuda::std::memory_order_relaxed);
  }
}

// acc = the VEC elements at `offset` of slot (epoch % 2), summed over ranks 0..n-1 in fp32, in order.
// Loads go out kLoadsInFlight ranks at a time (one round trip over the links for up to that many
// peers), which keeps the 1024-thread fused kernel within its 64 registers.
template <typename T, int VEC>
PAGODA_INLINE void sum_over_ranks(const PeerGroup& g, Epoch epoch, int64_t offset, float (&acc)[VEC]) {
  constexpr int kLoadsInFlight = 4;
#pragma unroll
  for (int first = 0; first < kPeerMaxRanks; first += kLoadsInFlight) {
    if (first >= g.world_size) break;
    Vec<T, VEC> part[kLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k) {
      if (first + k < g.world_size) {
        part[k] = load_vec<T, VEC>(slot<T>(g.buffers[first + k], epoch, g.slot_bytes) + offset);
      }
    }
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k) {
      if (first + k < g.world_size) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          acc[j] = first + k == 0 ? to_float(part[k].val[j]) : acc[j] + to_float(part[k].val[j]);
        }
      }
    }
  }
}

// Block b sums vectors [b * per_block, (b + 1) * per_block) of x [num_vecs * VEC], in place.
template <typename T, int VEC>
__global__ void __launch_bounds__(kSumThreads) peer_all_reduce_kernel(T* __restrict__ x, int64_t num_vecs,
                                                                      int64_t per_block, const PeerGroup g) {
  const Epoch epoch = begin_call(g);
  const int64_t begin = blockIdx.x * per_block;
  const int64_t end = begin + per_block < num_vecs ? begin + per_block : num_vecs;
  T* mine = slot<T>(buffer_of(g, g.rank), epoch, g.slot_bytes);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    store_vec<T, VEC>(mine + i * VEC, load_vec<T, VEC>(x + i * VEC));
  }
  meet_peers(g, epoch);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float acc[VEC];
    sum_over_ranks<T, VEC>(g, epoch, i * VEC, acc);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.val[j] = from_float<T>(acc[j]);
    store_vec<T, VEC>(x + i * VEC, out);
  }
  end_call(g, epoch);
}

// Block b owns rows b, b + G, ... of x/residual [num_tokens, hidden]. Rounding follows the unfused
// sequence (all-reduce into the dtype, then kernels/layernorm.cu's fused_add_rms_norm), so at two
// ranks the result is bit for bit the unfused one. Each thread re-reads only the residual elements
// it wrote, and its own rank's part comes from the slot, so x can take the output in place.
template <typename T, int VEC>
__global__ void __launch_bounds__(kNormThreads) peer_all_reduce_add_rms_norm_kernel(
    T* __restrict__ x, T* __restrict__ residual, const T* __restrict__ weight, int64_t num_tokens, int hidden,
    float eps, const PeerGroup g) {
  const Epoch epoch = begin_call(g);
  const int num_vecs = hidden / VEC;
  T* mine = slot<T>(buffer_of(g, g.rank), epoch, g.slot_bytes);
  for (int64_t row = blockIdx.x; row < num_tokens; row += gridDim.x) {
    const int64_t base = row * hidden;
    for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
      store_vec<T, VEC>(mine + base + i * VEC, load_vec<T, VEC>(x + base + i * VEC));
    }
  }
  meet_peers(g, epoch);
  for (int64_t row = blockIdx.x; row < num_tokens; row += gridDim.x) {
    const int64_t base = row * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
      float acc[VEC];
      sum_over_ranks<T, VEC>(g, epoch, base + i * VEC, acc);
      Vec<T, VEC> res = load_vec<T, VEC>(residual + base + i * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        res.val[j] = from_float<T>(to_float(from_float<T>(acc[j])) + to_float(res.val[j]));
        const float f = to_float(res.val[j]);
        sum_sq += f * f;
      }
      store_vec<T, VEC>(residual + base + i * VEC, res);
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / hidden + eps);
    store_rms_normed_row<T, VEC>(x + base, residual + base, weight, num_vecs, inv_rms);
  }
  end_call(g, epoch);
}

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace

void launch_peer_all_reduce(DType dtype, void* x, int64_t numel, const PeerGroup& group, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = numel % V == 0 && aligned16(x);
    const int64_t num_vecs = vec ? numel / V : numel;
    const int blocks = std::min(kPeerMaxBlocks, ceil_div(num_vecs, kSumThreads));
    const int64_t per_block = ceil_div(num_vecs, blocks);
    const int threads = warp_threads(static_cast<int>(std::min<int64_t>(per_block, kSumThreads)), kSumThreads);
    const auto kernel = vec ? peer_all_reduce_kernel<T, V> : peer_all_reduce_kernel<T, 1>;
    kernel<<<blocks, threads, 0, stream>>>(static_cast<T*>(x), num_vecs, per_block, group);
  });
}

void launch_peer_all_reduce_add_rms_norm(DType dtype, void* x, void* residual, const void* weight,
                                         int64_t num_tokens, int hidden, float eps, const PeerGroup& group,
                                         cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = kVecWidth<T>;
    const bool vec = hidden % V == 0 && aligned16(x) && aligned16(residual) && aligned16(weight);
    const int width = vec ? V : 1;
    const int blocks = static_cast<int>(std::min<int64_t>(kPeerMaxBlocks, num_tokens));
    const auto kernel = vec ? peer_all_reduce_add_rms_norm_kernel<T, V> : peer_all_reduce_add_rms_norm_kernel<T, 1>;
    kernel<<<blocks, warp_threads(hidden / width, kNormThreads), 0, stream>>>(
        static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), num_tokens, hidden, eps, group);
  });
}

}  // namespace pagoda
