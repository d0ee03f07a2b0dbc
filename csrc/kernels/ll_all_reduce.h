// Low-latency all-reduce for the small sums of decode steps on one host (GPUs that map each other's
// memory: NVLink or PCIe peer access). Torch-free (raw pointers, a DType, a stream); NVIDIA only (PTX
// volatile 16-byte stores and loads).
//
// Each rank owns one buffer that every rank can write (torch's symmetric memory maps it into each
// process). It holds lines of 16 bytes, {data 4 bytes, flag, data 4 bytes, flag}: 8 bytes of a
// message travel with their flag in one store, so a reader knows a line has arrived when both its
// flags carry the call's epoch. No fence, no barrier, no read over the link: a call costs one one-way
// link latency, the least a sum can cost (the "LL" protocol of NCCL's small messages).
//
//   buffer  16-byte lines [2 parities][world_size senders][max_lines]
//
// A call (one kernel on every rank, launched as a programmatic dependent, dependent_launch.h):
//   1. after waiting for the kernel before (which wrote x), every thread reads the epoch
//      e = state[0] + 1 (device memory: CUDA-graph replays need no host update);
//   2. thread i pushes line i of x (bytes 8i..8i+7) with flag e into region (e % 2, rank) of every
//      peer's buffer;
//   3. thread i then sums line i over ranks 0..n-1 in rank order in fp32 (the same bits on every
//      rank): its own from x, every peer's from region (e % 2, peer) of its own buffer, polled until
//      both flags say e; it writes the sum over x's line i (in place: only thread i touches line i);
//   4. once its threads have pushed, each block counts itself in (state[1]); the last to arrive sets
//      state[0] = e and resets the count, while the blocks poll (every thread has read e by then).
// Race freedom: rank r writes region (e % 2, r) of peer q again in call e + 2, which starts after its
// call e + 1 ended; that call read q's lines of epoch e + 1, which q pushes only after its call e (its
// reads of parity e % 2) ended. Flags are epochs, never reset: a stale line never carries the wanted
// epoch (the 32-bit epoch wraps after 4e9 calls, harmless: the line with that flag was overwritten
// 2e9 times since). Deadlock freedom: a thread pushes all its lines before it polls any, and block b
// polls only lines that block b of each peer pushes (every rank launches the same grid for the same
// message).
#pragma once

#include <cstdint>

#include "common.h"

namespace pagoda {

constexpr int kLLMaxRanks = 8;
constexpr int kLLLineBytes = 16;  // carries 8 bytes of the message
constexpr int kLLNormMaxRowBytes = 32768;  // the fused norm's rows: two 16-byte chunks a thread of 1024

// One rank's view of the group.
struct LLGroup {
  void* buffers[kLLMaxRanks];  // buffers[p]: rank p's buffer as mapped in this process, 16-byte aligned
  uint32_t* state;             // this rank's [epoch, blocks finished]: device memory, zero at start
  int64_t max_lines;           // lines of one (parity, sender) region: messages up to 8 * max_lines bytes
  int rank, world_size;        // 2 <= world_size <= kLLMaxRanks
};

// Bytes of one rank's buffer for messages up to max_bytes (a multiple of 8).
inline int64_t ll_buffer_bytes(int64_t max_bytes, int world_size) {
  return 2 * int64_t{world_size} * (max_bytes / 8) * kLLLineBytes;
}

// x [numel], 8-byte aligned, numel * sizeof(dtype) a multiple of 8 and at most 8 * max_lines: in
// place, the sum of every rank's x. Every rank calls it with the same numel, in the same order as
// every other call on `group`.
void launch_ll_all_reduce(DType dtype, void* x, int64_t numel, const LLGroup& group, cudaStream_t stream);

// In place on contiguous [num_tokens, hidden] (rows of a multiple of 16 bytes and at most
// kLLNormMaxRowBytes, every pointer 16-byte aligned, num_tokens * hidden * sizeof(dtype) <= 8 *
// max_lines): s = the sum of every rank's x (rounded to the dtype, as an all-reduce returns it);
// residual <- s + residual; x <- weight * rms_norm(residual) (rounded like launch_fused_add_rms_norm).
// The same lines and epochs as launch_ll_all_reduce: the two may alternate on one group.
void launch_ll_all_reduce_add_rms_norm(DType dtype, void* x, void* residual, const void* weight, int64_t num_tokens,
                                       int hidden, float eps, const LLGroup& group, cudaStream_t stream);

}  // namespace pagoda
