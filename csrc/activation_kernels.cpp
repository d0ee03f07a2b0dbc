// Torch layer of SiLU-and-mul: tensor checks, then the kernel layer (kernels/activation.cu).
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  using namespace pagoda;
  check_cuda(input, "input");
  check_last_dim_contiguous(input, "input");
  TORCH_CHECK(input.dim() == 2 && input.size(1) % 2 == 0, "silu_and_mul: input must be [num_tokens, 2 * d]");
  const int64_t num_tokens = input.size(0);
  const int d = static_cast<int>(input.size(1) / 2);
  TORCH_CHECK(out.is_contiguous() && out.size(0) == num_tokens && out.size(1) == d, "silu_and_mul: out must be [num_tokens, d]");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "silu_and_mul: out and input must share a dtype");
  const DType dtype = kernel_dtype(input, "silu_and_mul");
  if (num_tokens == 0 || d == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  launch_silu_and_mul(dtype, out.data_ptr(), input.data_ptr(), input.stride(0), num_tokens, d,
                      c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
