// Torch layer of the dense GEMV (kernels/dense_gemv.cu): tensor checks, then the kernel layer.
#include "dispatch.h"
#include "kernels/launch.h"
#include "ops.h"

at::Tensor dense_gemv(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                      int64_t split, int64_t rows) {
  using namespace pagoda;
  check_cuda(x, "x");
  check_cuda(weight, "weight");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
              "dense_gemv: x must be [m, k] and weight [n, k]");
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= kDenseGemvMaxTokens, "dense_gemv: 1 to ", kDenseGemvMaxTokens,
              " tokens, not ", x.size(0));
  TORCH_CHECK(x.scalar_type() == weight.scalar_type() &&
                  (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16),
              "dense_gemv: x and weight must both be float16 or both bfloat16");
  const int64_t k = x.size(1), n = weight.size(0);
  check_last_dim_contiguous(x, "x");
  TORCH_CHECK(weight.is_contiguous() && k % 8 == 0 && x.stride(0) % 8 == 0 && aligned16(x.data_ptr()) &&
                  aligned16(weight.data_ptr()),
              "dense_gemv: rows must be 16-byte aligned (k and x's row stride multiples of 8, weight contiguous)");
  TORCH_CHECK(n <= INT32_MAX && k <= INT32_MAX, "dense_gemv: n and k must fit in int32");
  TORCH_CHECK(split == 0 || split == 1 || split == 2 || split == 4,
              "dense_gemv: split must be 1, 2 or 4 (0: the kernel's rule), not ", split);
  TORCH_CHECK(rows == 0 || rows == 1 || rows == 2,
              "dense_gemv: rows (weight rows a warp) must be 1 or 2 (0: the kernel's rule), not ", rows);
  const void* bias_ptr = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->is_contiguous() && bias->numel() == n && bias->scalar_type() == x.scalar_type() &&
                    bias->device() == x.device(),
                "dense_gemv: bias must be [n], contiguous, in x's dtype and device");
    bias_ptr = bias->data_ptr();
  }
  at::Tensor out = at::empty({x.size(0), n}, x.options());
  if (n == 0 || k == 0) return k == 0 ? out.zero_() : out;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  launch_dense_gemv(kernel_dtype(x, "dense_gemv"), out.data_ptr(), x.data_ptr(), x.stride(0), weight.data_ptr(),
                    bias_ptr, static_cast<int>(x.size(0)), static_cast<int>(n), static_cast<int>(k),
                    static_cast<int>(split), static_cast<int>(rows), c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
