// Python bindings of the flash attention kernels: module `_flash` of pagoda-platform-cuda (or its
// JIT build). Checks the tensors once here, so the kernels can assume their layouts.
#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "../ops.h"  // reshape_and_cache, compiled into this module too (the KV write of a step)
#include "flash_api.h"

namespace {

using pagoda::flash::DType;
using pagoda::flash::FlashParams;

bool aligned16(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

DType dtype_of(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16,
              "flash attention takes float16 or bfloat16, not ", t.scalar_type());
  return t.scalar_type() == at::kHalf ? DType::kHalf : DType::kBFloat16;
}

void check_int32(const at::Tensor& t, int64_t dims, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kInt && t.dim() == dims && t.stride(-1) == 1, "flash attention: ",
              name, " must be a CUDA int32 tensor of ", dims, " dimension(s), contiguous in the last");
}

// The fields shared by decode and prefill, after checking every layout assumption of the kernels.
FlashParams make_params(const at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache,
                        const at::Tensor& block_tables, const at::Tensor& seq_lens, double scale, int64_t window) {
  TORCH_CHECK(query.is_cuda() && query.dim() == 3, "flash attention: query must be CUDA [num_tokens, num_heads, head_size]");
  const auto dtype = dtype_of(query);
  (void)dtype;
  TORCH_CHECK(out.sizes() == query.sizes() && out.scalar_type() == query.scalar_type() && out.device() == query.device(),
              "flash attention: out must match query (shape, dtype, device)");
  TORCH_CHECK(kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.size(4) == query.size(2) &&
                  kv_cache.scalar_type() == query.scalar_type() && kv_cache.device() == query.device(),
              "flash attention: kv_cache must be [2, num_blocks, block_size, num_kv_heads, head_size] in the query dtype");
  TORCH_CHECK(pagoda::flash::supports_head_size(static_cast<int>(query.size(2))),
              "flash attention supports head sizes 64, 128 and 256, not ", query.size(2));
  TORCH_CHECK(query.size(1) % kv_cache.size(3) == 0, "flash attention: query heads must be a multiple of kv heads");
  // 16-byte vector loads and cp.async: the head dimension contiguous, other strides multiples of 8 elements
  TORCH_CHECK(query.stride(2) == 1 && query.stride(0) % 8 == 0 && query.stride(1) % 8 == 0 && aligned16(query),
              "flash attention: query rows must be 16-byte aligned with a contiguous head dimension (use .contiguous())");
  TORCH_CHECK(out.stride(2) == 1 && out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0 && aligned16(out),
              "flash attention: out must have a contiguous head dimension");
  TORCH_CHECK(kv_cache.stride(4) == 1 && kv_cache.stride(1) % 8 == 0 && kv_cache.stride(2) % 8 == 0 &&
                  kv_cache.stride(3) % 8 == 0 && aligned16(kv_cache) && kv_cache.stride(0) % 8 == 0,
              "flash attention: kv_cache rows must be 16-byte aligned with a contiguous head dimension");
  check_int32(block_tables, 2, "block_tables");
  check_int32(seq_lens, 1, "seq_lens");
  FlashParams p{};
  p.query = query.data_ptr();
  p.q_stride_token = query.stride(0);
  p.q_stride_head = query.stride(1);
  p.out = out.data_ptr();
  p.o_stride_token = out.stride(0);
  p.o_stride_head = out.stride(1);
  p.k_cache = kv_cache.data_ptr();
  p.v_cache = static_cast<const char*>(kv_cache.data_ptr()) + kv_cache.stride(0) * kv_cache.element_size();
  p.kv_stride_block = kv_cache.stride(1);
  p.kv_stride_token = kv_cache.stride(2);
  p.kv_stride_head = kv_cache.stride(3);
  p.block_tables = block_tables.data_ptr<int>();
  p.bt_stride = block_tables.stride(0);
  p.seq_lens = seq_lens.data_ptr<int>();
  p.num_heads = static_cast<int>(query.size(1));
  p.num_kv_heads = static_cast<int>(kv_cache.size(3));
  p.head_size = static_cast<int>(query.size(2));
  p.block_size = static_cast<int>(kv_cache.size(2));
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.window = static_cast<int>(window);
  p.num_splits = 1;
  return p;
}

void check_launch(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "flash attention: ", what, " launch failed: ", cudaGetErrorString(err));
}

}  // namespace

// Decodes: sequences [0, num_decodes), query token i of sequence i. part_out/part_lse (fp32
// [>= num_decodes, num_heads, num_splits, head_size] / [.., num_heads, num_splits]) enable split-KV.
void flash_decode(at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                  const at::Tensor& seq_lens, int64_t num_decodes, double scale, int64_t window,
                  const c10::optional<at::Tensor>& part_out, const c10::optional<at::Tensor>& part_lse) {
  if (num_decodes <= 0) return;
  FlashParams p = make_params(out, query, kv_cache, block_tables, seq_lens, scale, window);
  TORCH_CHECK(num_decodes <= query.size(0) && num_decodes <= seq_lens.size(0) && num_decodes <= block_tables.size(0),
              "flash attention: num_decodes exceeds the batch");
  TORCH_CHECK(part_out.has_value() == part_lse.has_value(), "flash attention: pass both split buffers or neither");
  if (part_out.has_value()) {
    const auto& po = *part_out;
    const auto& pl = *part_lse;
    TORCH_CHECK(po.scalar_type() == at::kFloat && po.is_contiguous() && po.dim() == 4 && po.size(0) >= num_decodes &&
                    po.size(1) == p.num_heads && po.size(3) == p.head_size && po.device() == query.device(),
                "flash attention: part_out must be contiguous fp32 [num_decodes, num_heads, num_splits, head_size]");
    TORCH_CHECK(pl.scalar_type() == at::kFloat && pl.is_contiguous() && pl.dim() == 3 && pl.size(0) >= num_decodes &&
                    pl.size(1) == p.num_heads && pl.size(2) == po.size(2) && pl.device() == query.device(),
                "flash attention: part_lse must be contiguous fp32 [num_decodes, num_heads, num_splits]");
    p.num_splits = static_cast<int>(po.size(2));
    p.part_out = po.data_ptr<float>();
    p.part_lse = pl.data_ptr<float>();
  }
  const c10::cuda::OptionalCUDAGuard guard(query.device());
  check_launch(pagoda::flash::launch_decode(p, static_cast<int>(num_decodes), dtype_of(query),
                                            c10::cuda::getCurrentCUDAStream()),
               "decode");
}

// Prefills: sequences [num_decodes, num_seqs), their query tokens [num_decodes, num_tokens).
void flash_prefill(at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                   const at::Tensor& query_start_loc, const at::Tensor& seq_lens, int64_t num_decodes, double scale,
                   int64_t window) {
  const int64_t num_seqs = seq_lens.size(0);
  const int64_t num_prefill_tokens = query.size(0) - num_decodes;
  if (num_seqs <= num_decodes || num_prefill_tokens <= 0) return;
  FlashParams p = make_params(out, query, kv_cache, block_tables, seq_lens, scale, window);
  check_int32(query_start_loc, 1, "query_start_loc");
  TORCH_CHECK(query_start_loc.size(0) == num_seqs + 1 && block_tables.size(0) >= num_seqs,
              "flash attention: query_start_loc must be [num_seqs + 1] and block_tables cover every sequence");
  p.query_start_loc = query_start_loc.data_ptr<int>();
  const c10::cuda::OptionalCUDAGuard guard(query.device());
  check_launch(pagoda::flash::launch_prefill(p, static_cast<int>(num_decodes), static_cast<int>(num_seqs),
                                             static_cast<int>(num_prefill_tokens), dtype_of(query),
                                             c10::cuda::getCurrentCUDAStream()),
               "prefill");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Pagoda's FlashAttention-style paged attention kernels (decode with split-KV, tensor-core prefill)";
  m.def("flash_decode", &flash_decode, "decode attention over the paged KV cache", py::arg("out"), py::arg("query"),
        py::arg("kv_cache"), py::arg("block_tables"), py::arg("seq_lens"), py::arg("num_decodes"), py::arg("scale"),
        py::arg("window"), py::arg("part_out") = py::none(), py::arg("part_lse") = py::none());
  m.def("flash_prefill", &flash_prefill, "prefill attention over the paged KV cache", py::arg("out"), py::arg("query"),
        py::arg("kv_cache"), py::arg("block_tables"), py::arg("query_start_loc"), py::arg("seq_lens"),
        py::arg("num_decodes"), py::arg("scale"), py::arg("window"));
  m.def("reshape_and_cache", &reshape_and_cache, "write key/value into the paged cache", py::arg("key"),
        py::arg("value"), py::arg("kv_cache"), py::arg("slot_mapping"));
  m.def("head_sizes", [] { return std::vector<int>{64, 128, 256}; }, "head sizes the kernels are built for");
}
