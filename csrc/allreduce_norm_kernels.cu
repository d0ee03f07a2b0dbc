// Torch layer of the peer all-reduce (kernels/allreduce_norm.cu): tensor checks, the group's buffer
// addresses from a host tensor, the device guard and the current stream. The Python side
// (pagoda.distributed.peer_all_reduce) allocates the symmetric buffers and the state.
#include "dispatch.h"
#include "kernels/allreduce_norm.h"
#include "ops.h"

namespace pagoda {
namespace {

// peers: host int64 [world_size], rank p's buffer address in this process; state: device int64 [2].
PeerGroup peer_group(const at::Tensor& peers, const at::Tensor& state, int64_t rank, int64_t slot_bytes,
                     const at::Device& device) {
  TORCH_CHECK(peers.device().is_cpu() && peers.scalar_type() == at::kLong && peers.dim() == 1 && peers.is_contiguous(),
              "peer all-reduce: peers must be a contiguous host int64 tensor [world_size] of buffer addresses");
  const int64_t world = peers.numel();
  TORCH_CHECK(world >= 2 && world <= kPeerMaxRanks, "peer all-reduce: 2 to ", kPeerMaxRanks, " ranks, not ", world);
  TORCH_CHECK(rank >= 0 && rank < world, "peer all-reduce: rank ", rank, " is not in [0, ", world, ")");
  TORCH_CHECK(state.device() == device && state.scalar_type() == at::kLong && state.numel() == 2 &&
                  state.is_contiguous(),
              "peer all-reduce: state must be a contiguous int64 tensor [2] on the input's device");
  TORCH_CHECK(slot_bytes > 0 && slot_bytes % 16 == 0, "peer all-reduce: slot_bytes must be a positive multiple of 16");
  PeerGroup group{};
  const int64_t* addresses = peers.data_ptr<int64_t>();
  for (int64_t p = 0; p < world; ++p) {
    TORCH_CHECK(addresses[p] != 0 && addresses[p] % 16 == 0, "peer all-reduce: rank ", p,
                "'s buffer is not 16-byte aligned");
    group.buffers[p] = reinterpret_cast<void*>(addresses[p]);
  }
  group.state = reinterpret_cast<uint64_t*>(state.data_ptr<int64_t>());
  group.slot_bytes = slot_bytes;
  group.rank = static_cast<int>(rank);
  group.world_size = static_cast<int>(world);
  return group;
}

void check_fits(const at::Tensor& x, int64_t slot_bytes, const char* op) {
  TORCH_CHECK(x.numel() * x.element_size() <= slot_bytes, op, ": ", x.numel() * x.element_size(),
              " bytes do not fit the ", slot_bytes, "-byte slot");
}

}  // namespace
}  // namespace pagoda

void peer_all_reduce(at::Tensor& x, const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t slot_bytes) {
  using namespace pagoda;
  check_cuda(x, "x");
  TORCH_CHECK(x.is_contiguous(), "peer_all_reduce: x must be contiguous");
  const DType dtype = kernel_dtype(x, "peer_all_reduce");
  check_fits(x, slot_bytes, "peer_all_reduce");
  const PeerGroup group = peer_group(peers, state, rank, slot_bytes, x.device());
  if (x.numel() == 0) return;  // every rank skips alike: the shapes agree
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  launch_peer_all_reduce(dtype, x.data_ptr(), x.numel(), group, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void peer_all_reduce_add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps,
                                  const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t slot_bytes) {
  using namespace pagoda;
  check_cuda(x, "x");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && residual.is_contiguous() && residual.sizes() == x.sizes(),
              "peer_all_reduce_add_rms_norm: x and residual must be contiguous [num_tokens, hidden]");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == x.size(1),
              "peer_all_reduce_add_rms_norm: weight must be [hidden]");
  TORCH_CHECK(residual.scalar_type() == x.scalar_type() && weight.scalar_type() == x.scalar_type() &&
                  residual.device() == x.device() && weight.device() == x.device(),
              "peer_all_reduce_add_rms_norm: x, residual and weight must share a dtype and a device");
  const DType dtype = kernel_dtype(x, "peer_all_reduce_add_rms_norm");
  check_fits(x, slot_bytes, "peer_all_reduce_add_rms_norm");
  const PeerGroup group = peer_group(peers, state, rank, slot_bytes, x.device());
  if (x.numel() == 0) return;  // every rank skips alike: the shapes agree
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  launch_peer_all_reduce_add_rms_norm(dtype, x.data_ptr(), residual.data_ptr(), weight.data_ptr(), x.size(0),
                                      static_cast<int>(x.size(1)), static_cast<float>(eps), group,
                                      c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

int64_t peer_all_reduce_buffer_bytes(int64_t slot_bytes) { return pagoda::peer_buffer_bytes(slot_bytes); }
