// One-shot all-reduce over peer (symmetric) memory for the small sums of decode steps, alone or
// fused with the residual add and RMSNorm that follows a row-parallel layer. Torch-free (raw
// pointers, a DType, a stream); NVIDIA only (system-scope acquire/release through cuda::atomic_ref).
//
// Every rank of the group owns one buffer that every rank can read and write (torch's symmetric
// memory maps it into each process): arrival flags, then two data slots. The flags live here, not in
// torch's signal pads (whose size and use by torch's own kernels are torch's), zeroed before the first call.
//
//   flags  uint64 [kPeerMaxBlocks][kPeerMaxRanks]   flags[b][s]: the last epoch block b of rank s
//                                                   finished writing its part (written by rank s)
//   slot 0, slot 1  slot_bytes each                 a call of epoch e uses slot e % 2
//
// A call (one kernel, grid of G <= kPeerMaxBlocks blocks, the same G on every rank):
//   1. every block reads the epoch e = state[0] + 1 (device memory, so CUDA-graph replays need no
//      host update);
//   2. block b copies its part of this rank's partial sums into its own slot e % 2;
//   3. block b stores e into flags[b][rank] of every peer (release, system scope) and waits until
//      its own flags[b][p] >= e for every peer p (acquire, system scope);
//   4. block b reads the same part from every rank's slot e % 2 and sums it in fp32 in rank order
//      0..n-1 (so every rank gets the same bits), then writes the result (and the norm);
//   5. the last block to finish sets state[0] = e (an arrival count in state[1], reset to zero).
// Race freedom: rank r rewrites slot e % 2 only in call e + 2, which starts after its call e + 1
// ended; that call waited for every peer's flags of epoch e + 1, which a peer writes only in its own
// call e + 1, after its call e (the reads of slot e % 2) ended: calls on one stream never overlap.
// A peer can run one call ahead (its flag says e + 1 while this rank waits for e), never two, hence
// the wait for >= e. Flags only grow (64-bit: no wrap), so they are never reset.
#pragma once

#include <cstdint>

#include "common.h"

namespace pagoda {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerMaxBlocks = 32;
// Bytes of arrival flags at the start of each rank's buffer (a multiple of 16: the slots stay aligned).
constexpr int64_t kPeerFlagBytes = int64_t{kPeerMaxBlocks} * kPeerMaxRanks * 8;

// One rank's view of the group: where each rank's buffer is mapped in this process, and its own state.
struct PeerGroup {
  void* buffers[kPeerMaxRanks];  // buffers[p]: rank p's buffer (flags, slot 0, slot 1); 16-byte aligned
  uint64_t* state;               // this rank's [epoch, blocks finished]: device memory, zero at start
  int64_t slot_bytes;            // bytes of one data slot, a multiple of 16
  int rank, world_size;          // 2 <= world_size <= kPeerMaxRanks
};

// Bytes of one rank's buffer for data slots of slot_bytes.
inline int64_t peer_buffer_bytes(int64_t slot_bytes) { return kPeerFlagBytes + 2 * slot_bytes; }

// x [numel] contiguous, in place: the sum of every rank's x. numel * sizeof(dtype) <= slot_bytes.
// Every rank calls it with the same numel, in the same order as every other call on `group`.
void launch_peer_all_reduce(DType dtype, void* x, int64_t numel, const PeerGroup& group, cudaStream_t stream);

// In place on contiguous [num_tokens, hidden] (num_tokens * hidden * sizeof(dtype) <= slot_bytes):
// s = the sum of every rank's x (rounded to the dtype, as an all-reduce returns it);
// residual <- s + residual; x <- weight * rms_norm(residual) (rounded like launch_fused_add_rms_norm).
void launch_peer_all_reduce_add_rms_norm(DType dtype, void* x, void* residual, const void* weight,
                                         int64_t num_tokens, int hidden, float eps, const PeerGroup& group,
                                         cudaStream_t stream);

}  // namespace pagoda
