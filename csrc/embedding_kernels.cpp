// Torch layer of the masked (vocab-parallel) embedding: tensor checks, then the kernel layer (kernels/embedding.cu).
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

void masked_embedding(at::Tensor& out, const at::Tensor& ids, const at::Tensor& weight, int64_t start) {
  using namespace pagoda;
  check_cuda(ids, "ids");
  check_cuda(weight, "weight");
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kLong && ids.is_contiguous(),
              "masked_embedding: ids must be a contiguous int64 [num_tokens] tensor");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(),
              "masked_embedding: weight must be a contiguous [rows, hidden] tensor");
  TORCH_CHECK(ids.device() == weight.device(), "masked_embedding: ids and weight must be on one device");
  const int64_t num_tokens = ids.size(0), rows = weight.size(0), hidden = weight.size(1);
  TORCH_CHECK(hidden <= INT32_MAX / 4, "masked_embedding: hidden size ", hidden, " is too large");
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && out.size(0) == num_tokens && out.size(1) == hidden,
              "masked_embedding: out must be a contiguous [num_tokens, hidden] tensor");
  TORCH_CHECK(out.scalar_type() == weight.scalar_type() && out.device() == weight.device(),
              "masked_embedding: out and weight must share a dtype and a device");
  const DType dtype = kernel_dtype(weight, "masked_embedding");
  if (num_tokens == 0 || hidden == 0) return;
  const c10::cuda::OptionalCUDAGuard guard(weight.device());
  launch_masked_embedding(dtype, out.data_ptr(), ids.data_ptr<int64_t>(), weight.data_ptr(), start, rows, num_tokens,
                          static_cast<int>(hidden), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
