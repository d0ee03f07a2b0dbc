// Torch layer of the AWQ tiles kernels (kernels/awq_tiles.cu): tensor checks, the device guard,
// the current stream, the split-K scratch. Weights come from pagoda_quant_awq.tiles.repack.
#include <algorithm>

#include "dispatch.h"
#include "kernels/awq_tiles.h"
#include "ops.h"

namespace pagoda {
namespace {

void check_tiles(const at::Tensor& weights, const at::Tensor& scales, const at::Tensor& zeros, int64_t k, int64_t n,
                 int64_t group, at::ScalarType dtype, const at::Device& device, const char* op) {
  TORCH_CHECK(group == 32 || group == 64 || group == 128, op, ": group_size must be 32, 64 or 128");
  TORCH_CHECK(n % kAwqTileStrip == 0 && k % group == 0, op, ": N must be a multiple of 64 and K of the group size");
  TORCH_CHECK(weights.is_contiguous() && weights.scalar_type() == at::kInt && weights.dim() == 4 &&
                  weights.size(0) == n / kAwqTileStrip && weights.size(1) == k / kAwqTileStep && weights.size(2) == 32 &&
                  weights.size(3) == 4 && aligned16(weights.data_ptr()),
              op, ": weights must be contiguous int32 [N/64, K/16, 32, 4] (pagoda_quant_awq.tiles.repack)");
  TORCH_CHECK(scales.is_contiguous() && scales.scalar_type() == dtype && scales.numel() == (k / group) * n &&
                  aligned16(scales.data_ptr()),
              op, ": scales must be contiguous [K/group, N/64, 8, 8] in the activation dtype");
  TORCH_CHECK(zeros.is_contiguous() && zeros.scalar_type() == at::kInt && zeros.numel() == (k / group) * n / 8, op,
              ": zeros must be contiguous int32 [K/group, N/64, 8]");
  TORCH_CHECK(weights.device() == device && scales.device() == device && zeros.device() == device, op,
              ": all tensors must be on one CUDA device");
}

}  // namespace
}  // namespace pagoda

at::Tensor awq_tiles_gemm(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& scales,
                          const at::Tensor& zeros, at::Tensor& locks, int64_t group_size, int64_t split_k) {
  using namespace pagoda;
  check_cuda(x, "x");
  TORCH_CHECK(x.dim() == 2 && x.size(0) >= 1, "awq_tiles_gemm: x must be [m, K] with m >= 1");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, "awq_tiles_gemm: x must be fp16 or bf16");
  TORCH_CHECK(x.stride(1) == 1 && x.stride(0) % 8 == 0 && aligned16(x.data_ptr()),
              "awq_tiles_gemm: x rows must be contiguous, 16-byte aligned, a multiple of 8 elements apart");
  const int64_t m = x.size(0), k = x.size(1), n = weights.size(0) * kAwqTileStrip;
  check_tiles(weights, scales, zeros, k, n, group_size, x.scalar_type(), x.device(), "awq_tiles_gemm");
  TORCH_CHECK(locks.is_contiguous() && locks.scalar_type() == at::kInt && locks.numel() >= n / kAwqTileStrip &&
                  locks.device() == x.device(),
              "awq_tiles_gemm: locks must be int32 [N/64] (zeros) on x's device");
  TORCH_CHECK(m * n < (int64_t{1} << 31) && k < (int64_t{1} << 30), "awq_tiles_gemm: the product is too large");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const AwqTilesPlan plan = plan_awq_tiles_gemm(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                                static_cast<int>(group_size), sm_count(x.get_device()),
                                                static_cast<int>(split_k));
  at::Tensor out = at::empty({m, n}, x.options());
  at::Tensor partials;
  if (plan.split > 1) partials = at::empty({plan.split, m, n}, x.options().dtype(at::kFloat));  // every cell written
  AwqTilesGemm p{x.data_ptr(), x.stride(0), reinterpret_cast<const uint32_t*>(weights.data_ptr<int32_t>()),
                 scales.data_ptr(), reinterpret_cast<const uint32_t*>(zeros.data_ptr<int32_t>()), out.data_ptr(),
                 plan.split > 1 ? partials.data_ptr<float>() : nullptr, locks.data_ptr<int32_t>(),
                 static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), static_cast<int>(group_size)};
  launch_awq_tiles_gemm(x.scalar_type() == at::kHalf ? DType::kFloat16 : DType::kBFloat16, p, plan, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor awq_tiles_dequantize(const at::Tensor& weights, const at::Tensor& scales, const at::Tensor& zeros,
                                int64_t group_size) {
  using namespace pagoda;
  check_cuda(weights, "weights");
  TORCH_CHECK(scales.scalar_type() == at::kHalf || scales.scalar_type() == at::kBFloat16,
              "awq_tiles_dequantize: scales must be fp16 or bf16 (the output dtype)");
  TORCH_CHECK(weights.dim() == 4, "awq_tiles_dequantize: weights must be [N/64, K/16, 32, 4]");
  const int64_t n = weights.size(0) * kAwqTileStrip, k = weights.size(1) * kAwqTileStep;
  check_tiles(weights, scales, zeros, k, n, group_size, scales.scalar_type(), weights.device(), "awq_tiles_dequantize");
  const c10::cuda::OptionalCUDAGuard guard(weights.device());
  at::Tensor w = at::empty({k, n}, scales.options());
  launch_awq_tiles_dequantize(scales.scalar_type() == at::kHalf ? DType::kFloat16 : DType::kBFloat16,
                              reinterpret_cast<const uint32_t*>(weights.data_ptr<int32_t>()), scales.data_ptr(),
                              reinterpret_cast<const uint32_t*>(zeros.data_ptr<int32_t>()), w.data_ptr(),
                              static_cast<int>(n), static_cast<int>(k), static_cast<int>(group_size),
                              c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return w;
}

std::vector<int64_t> awq_tiles_plan(int64_t m, int64_t n, int64_t k, int64_t group_size, int64_t split_k,
                                    int64_t device) {
  using namespace pagoda;
  const AwqTilesPlan plan = plan_awq_tiles_gemm(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                                static_cast<int>(group_size), sm_count(static_cast<int>(device)),
                                                static_cast<int>(split_k));
  return {plan.token_tiles, plan.split};
}
