// Torch layer of RMSNorm and fused residual-add + RMSNorm: tensor checks, then the kernel layer
// (kernels/layernorm.cu) on the current stream.
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double eps) {
  using namespace pagoda;
  check_cuda(input, "input");
  check_last_dim_contiguous(input, "input");
  TORCH_CHECK(input.dim() == 2 && out.is_contiguous() && out.sizes() == input.sizes(), "rms_norm: bad shapes");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == input.size(1), "rms_norm: weight must be [hidden]");
  TORCH_CHECK(out.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type(),
              "rms_norm: input, weight and out must share a dtype");
  const DType dtype = kernel_dtype(input, "rms_norm");
  if (input.size(0) == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  launch_rms_norm(dtype, out.data_ptr(), input.data_ptr(), weight.data_ptr(), input.stride(0), input.size(0),
                  static_cast<int>(input.size(1)), static_cast<float>(eps), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps) {
  using namespace pagoda;
  check_cuda(input, "input");
  TORCH_CHECK(input.dim() == 2 && input.is_contiguous() && residual.is_contiguous() &&
                  residual.sizes() == input.sizes(),
              "fused_add_rms_norm: input and residual must be contiguous [num_tokens, hidden]");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == input.size(1), "fused_add_rms_norm: weight must be [hidden]");
  TORCH_CHECK(residual.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type(),
              "fused_add_rms_norm: input, residual and weight must share a dtype");
  const DType dtype = kernel_dtype(input, "fused_add_rms_norm");
  if (input.size(0) == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  launch_fused_add_rms_norm(dtype, input.data_ptr(), residual.data_ptr(), weight.data_ptr(), input.size(0),
                            static_cast<int>(input.size(1)), static_cast<float>(eps),
                            c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
