// Torch layer of the low-latency all-reduce (kernels/ll_all_reduce.h): tensor checks, the group's
// buffer addresses from a host tensor, the device guard and the current stream. The Python side
// (pagoda_platform_cuda.ll_all_reduce) allocates the symmetric buffers and the state.
#include "dispatch.h"
#include "kernels/ll_all_reduce.h"
#include "ops.h"

namespace pagoda {
namespace {

// peers: host int64 [world_size], rank p's buffer address in this process; state: device int32 [2].
LLGroup ll_group(const at::Tensor& peers, const at::Tensor& state, int64_t rank, int64_t max_bytes,
                 const at::Device& device) {
  TORCH_CHECK(peers.device().is_cpu() && peers.scalar_type() == at::kLong && peers.dim() == 1 && peers.is_contiguous(),
              "ll_all_reduce: peers must be a contiguous host int64 tensor [world_size] of buffer addresses");
  const int64_t world = peers.numel();
  TORCH_CHECK(world >= 2 && world <= kLLMaxRanks, "ll_all_reduce: 2 to ", kLLMaxRanks, " ranks, not ", world);
  TORCH_CHECK(rank >= 0 && rank < world, "ll_all_reduce: rank ", rank, " is not in [0, ", world, ")");
  TORCH_CHECK(state.device() == device && state.scalar_type() == at::kInt && state.numel() == 2 && state.is_contiguous(),
              "ll_all_reduce: state must be a contiguous int32 tensor [2] on the input's device");
  TORCH_CHECK(max_bytes > 0 && max_bytes % 8 == 0, "ll_all_reduce: max_bytes must be a positive multiple of 8");
  LLGroup group{};
  const int64_t* addresses = peers.data_ptr<int64_t>();
  for (int64_t p = 0; p < world; ++p) {
    TORCH_CHECK(addresses[p] != 0 && addresses[p] % 16 == 0, "ll_all_reduce: rank ", p,
                "'s buffer is not 16-byte aligned");
    group.buffers[p] = reinterpret_cast<void*>(addresses[p]);
  }
  group.state = reinterpret_cast<uint32_t*>(state.data_ptr<int32_t>());
  group.max_lines = max_bytes / 8;
  group.rank = static_cast<int>(rank);
  group.world_size = static_cast<int>(world);
  return group;
}

}  // namespace
}  // namespace pagoda

void ll_all_reduce(at::Tensor& x, const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t max_bytes) {
  using namespace pagoda;
  check_cuda(x, "x");
  TORCH_CHECK(x.is_contiguous(), "ll_all_reduce: x must be contiguous");
  const DType dtype = kernel_dtype(x, "ll_all_reduce");
  const int64_t nbytes = x.numel() * x.element_size();
  TORCH_CHECK(nbytes % 8 == 0 && nbytes <= max_bytes && reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 8 == 0,
              "ll_all_reduce: x must be 8-byte aligned, its size a multiple of 8 bytes and at most ", max_bytes,
              " bytes, not ", nbytes);
  const LLGroup group = ll_group(peers, state, rank, max_bytes, x.device());
  if (nbytes == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  launch_ll_all_reduce(dtype, x.data_ptr(), x.numel(), group, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void ll_all_reduce_add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps,
                                const at::Tensor& peers, at::Tensor& state, int64_t rank, int64_t max_bytes) {
  using namespace pagoda;
  check_cuda(x, "x");
  const DType dtype = kernel_dtype(x, "ll_all_reduce_add_rms_norm");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && residual.sizes() == x.sizes() && residual.is_contiguous() &&
                  weight.dim() == 1 && weight.numel() == x.size(1) && weight.is_contiguous(),
              "ll_all_reduce_add_rms_norm: x and residual must be contiguous [num_tokens, hidden], weight [hidden]");
  TORCH_CHECK(residual.scalar_type() == x.scalar_type() && weight.scalar_type() == x.scalar_type() &&
                  residual.device() == x.device() && weight.device() == x.device(),
              "ll_all_reduce_add_rms_norm: x, residual and weight must share a dtype and device");
  const int64_t nbytes = x.numel() * x.element_size();
  TORCH_CHECK(x.size(1) * x.element_size() % 16 == 0 && x.size(1) * x.element_size() <= kLLNormMaxRowBytes &&
                  aligned16(x.data_ptr()) && aligned16(residual.data_ptr()) &&
                  aligned16(weight.data_ptr()) && nbytes <= max_bytes,
              "ll_all_reduce_add_rms_norm: rows of a multiple of 16 bytes and at most ", kLLNormMaxRowBytes,
              ", 16-byte aligned tensors and at most ", max_bytes, " bytes");
  const LLGroup group = ll_group(peers, state, rank, max_bytes, x.device());
  if (nbytes == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  launch_ll_all_reduce_add_rms_norm(dtype, x.data_ptr(), residual.data_ptr(), weight.data_ptr(), x.size(0),
                                    static_cast<int>(x.size(1)), static_cast<float>(eps), group,
                                    c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

int64_t ll_all_reduce_buffer_bytes(int64_t max_bytes, int64_t world_size) {
  TORCH_CHECK(max_bytes > 0 && max_bytes % 8 == 0, "ll_all_reduce: max_bytes must be a positive multiple of 8");
  return pagoda::ll_buffer_bytes(max_bytes, static_cast<int>(world_size));
}
