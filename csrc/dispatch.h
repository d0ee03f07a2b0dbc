// Host-side helpers of the torch layer: tensor checks and the ATen dtype -> kernel DType mapping.
#pragma once

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <torch/types.h>

#include <cstdint>

#include "kernels/common.h"

// fp32, fp16 and bf16: the dtypes every kernel here supports.
#define PAGODA_DISPATCH_FLOATING(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, TYPE, NAME, __VA_ARGS__)

namespace pagoda {

// Streaming multiprocessors of `device` (queried once per device).
inline int sm_count(int device) {
  static int counts[64] = {};
  if (device < 0 || device >= 64) return 132;
  if (counts[device] == 0) {
    int n = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device] = n;
  }
  return counts[device];
}

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
}

inline void check_last_dim_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.stride(-1) == 1, name, " must be contiguous in its last dimension");
}

// The kernel layer's DType for a tensor of float32, float16 or bfloat16 (anything else is an error).
inline DType kernel_dtype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, op, ": dtype ", t.scalar_type(), " is not float32, float16 or bfloat16");
  }
  return DType::kFloat32;
}

}  // namespace pagoda
