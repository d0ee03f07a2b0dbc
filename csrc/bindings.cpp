// Python bindings of the csrc kernels: module `_C` of pagoda-platform-cuda (or its JIT build).
#include <torch/extension.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Pagoda's fused CUDA kernels (RMSNorm, rotary embedding, SiLU-and-mul, paged KV write)";
  m.def("rms_norm", &rms_norm, "out = weight * rms_norm(input)", py::arg("out"), py::arg("input"),
        py::arg("weight"), py::arg("eps"));
  m.def("fused_add_rms_norm", &fused_add_rms_norm, "in place: residual += input; input = rms_norm(residual)",
        py::arg("input"), py::arg("residual"), py::arg("weight"), py::arg("eps"));
  m.def("rotary_embedding", &rotary_embedding, "rotate query and key in place", py::arg("positions"),
        py::arg("query"), py::arg("key"), py::arg("head_size"), py::arg("cos_sin_cache"), py::arg("is_neox"));
  m.def("silu_and_mul", &silu_and_mul, "out = silu(input[:, :d]) * input[:, d:]", py::arg("out"), py::arg("input"));
  m.def("masked_embedding", &masked_embedding, "out = this rank's embedding rows of ids (zeros for others')",
        py::arg("out"), py::arg("ids"), py::arg("weight"), py::arg("start"));
  m.def("reshape_and_cache", &reshape_and_cache, "write key/value into the paged cache", py::arg("key"),
        py::arg("value"), py::arg("kv_cache"), py::arg("slot_mapping"));
  m.def("dense_gemv", &dense_gemv, "x @ weight^T (+ bias) for 1..4 tokens, weights streamed", py::arg("x"),
        py::arg("weight"), py::arg("bias") = py::none(), py::arg("split") = 0, py::arg("rows") = 0);
  m.def("awq_gemv", &awq_gemv, "x @ dequant(AWQ int4 W) for 1..8 tokens", py::arg("x"), py::arg("qweight"),
        py::arg("qzeros"), py::arg("scales"), py::arg("group_size"));
#ifndef USE_ROCM
  m.def("awq_tiles_gemm", &awq_tiles_gemm, "x @ dequant(AWQ int4 W in the tiles layout), tensor cores",
        py::arg("x"), py::arg("weights"), py::arg("scales"), py::arg("zeros"), py::arg("locks"),
        py::arg("group_size"), py::arg("split_k") = 0);
  m.def("awq_tiles_dequantize", &awq_tiles_dequantize, "AWQ tiles -> dense W [K, N]", py::arg("weights"),
        py::arg("scales"), py::arg("zeros"), py::arg("group_size"));
  m.def("awq_tiles_plan", &awq_tiles_plan, "(m16 tiles per block, K splits) of awq_tiles_gemm", py::arg("m"),
        py::arg("n"), py::arg("k"), py::arg("group_size"), py::arg("split_k") = 0, py::arg("device") = 0);
#endif
#ifndef USE_ROCM
  m.def("reshape_and_cache_fp8", &reshape_and_cache_fp8, "write key/value scaled into an FP8 paged cache",
        py::arg("key"), py::arg("value"), py::arg("kv_cache"), py::arg("slot_mapping"), py::arg("k_scale"),
        py::arg("v_scale"));
  m.def("flash_attention", &flash_attention, "paged attention on tensor cores: split-KV decodes, then prefills",
        py::arg("out"), py::arg("query"), py::arg("kv_cache"), py::arg("block_tables"), py::arg("query_start_loc"),
        py::arg("seq_lens"), py::arg("num_decodes"), py::arg("scale"), py::arg("window"), py::arg("num_splits"),
        py::arg("part_out") = py::none(), py::arg("part_lse") = py::none(), py::arg("short_query_len") = 0,
        py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none());
  m.def("flash_decode_programs_per_sm", &flash_decode_programs_per_sm,
        "decode programs resident per SM (occupancy) for a head size and dtype", py::arg("head_size"),
        py::arg("half"), py::arg("device") = 0);
  m.def("ll_all_reduce", &ll_all_reduce, "low-latency all-reduce over peer memory, in place", py::arg("x"),
        py::arg("peers"), py::arg("state"), py::arg("rank"), py::arg("max_bytes"));
  m.def("ll_all_reduce_add_rms_norm", &ll_all_reduce_add_rms_norm,
        "in place: residual += sum of x over the ranks; x = rms_norm(residual) * weight", py::arg("x"),
        py::arg("residual"), py::arg("weight"), py::arg("eps"), py::arg("peers"), py::arg("state"), py::arg("rank"),
        py::arg("max_bytes"));
  m.def("ll_all_reduce_buffer_bytes", &ll_all_reduce_buffer_bytes, "bytes of one rank's LL buffer",
        py::arg("max_bytes"), py::arg("world_size"));
#endif
}
