// Torch layer of the flash attention kernels (csrc/attention/): tensor checks, then the decode and
// prefill launchers on the current stream. No host synchronisation (CUDA-graph safe).
#include "attention/flash_attention.h"
#include "dispatch.h"
#include "ops.h"

namespace {

// [.., D] with a contiguous last dimension, every other stride a multiple of 8 elements and the data
// aligned to 8 elements: the kernels move chunks of 8 elements of rows (16 bytes, or 8 of an FP8 cache).
void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "flash_attention: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.stride(-1) == 1, "flash_attention: ", name, " must be contiguous in its last dimension");
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    TORCH_CHECK(t.stride(d) % 8 == 0, "flash_attention: ", name, " strides must be multiples of 8 elements");
  }
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % (8 * t.element_size()) == 0, "flash_attention: ",
              name, " must be aligned to 8 elements");
}

// The cache's format: the query's dtype, or an FP8 one whose scales must be given.
pagoda::KVFormat cache_format(const at::Tensor& query, const at::Tensor& kv_cache,
                              const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale) {
  const auto type = kv_cache.scalar_type();
  if (type != at::kFloat8_e4m3fn && type != at::kFloat8_e5m2) {
    TORCH_CHECK(type == query.scalar_type(), "flash_attention: kv_cache must hold the query's dtype or FP8 "
                "(float8_e4m3fn, float8_e5m2), not ", type);
    return pagoda::KVFormat::kModel;
  }
  for (const auto* scale : {&k_scale, &v_scale}) {
    TORCH_CHECK(scale->has_value() && (*scale)->is_cuda() && (*scale)->scalar_type() == at::kFloat &&
                    (*scale)->numel() == 1,
                "flash_attention: an FP8 kv_cache needs k_scale and v_scale, one-element float32 CUDA tensors");
  }
  return type == at::kFloat8_e5m2 ? pagoda::KVFormat::kE5M2 : pagoda::KVFormat::kE4M3;
}

void check_int32(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kInt && t.dim() == dim && t.stride(-1) == 1,
              "flash_attention: ", name, " must be a CUDA int32 tensor of ", dim, " dimension(s), last contiguous");
}

}  // namespace

void flash_attention(at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache,
                     const at::Tensor& block_tables, const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
                     int64_t num_decodes, double scale, int64_t window, int64_t num_splits,
                     const c10::optional<at::Tensor>& part_out, const c10::optional<at::Tensor>& part_lse,
                     int64_t short_query_len, const c10::optional<at::Tensor>& k_scale,
                     const c10::optional<at::Tensor>& v_scale) {
  using namespace pagoda;
  TORCH_CHECK(query.dim() == 3 && out.sizes() == query.sizes(), "flash_attention: query and out must be [num_tokens, num_heads, head_size]");
  TORCH_CHECK(kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.size(4) == query.size(2),
              "flash_attention: kv_cache must be [2, num_blocks, block_size, num_kv_heads, head_size]");
  TORCH_CHECK(out.scalar_type() == query.scalar_type(), "flash_attention: query and out must share a dtype");
  const KVFormat kv_format = cache_format(query, kv_cache, k_scale, v_scale);
  TORCH_CHECK(query.scalar_type() == at::kHalf || query.scalar_type() == at::kBFloat16,
              "flash_attention: dtype ", query.scalar_type(), " is not float16 or bfloat16");
  check_rows(query, "query");
  check_rows(out, "out");
  check_rows(kv_cache, "kv_cache");
  check_int32(block_tables, "block_tables", 2);
  check_int32(query_start_loc, "query_start_loc", 1);
  check_int32(seq_lens, "seq_lens", 1);
  const int64_t num_tokens = query.size(0), num_seqs = seq_lens.size(0);
  const int64_t num_heads = query.size(1), num_kv_heads = kv_cache.size(3), head_size = query.size(2);
  TORCH_CHECK(flash_supports_head_size(static_cast<int>(head_size)), "flash_attention: head size ", head_size,
              " is not 64, 128 or 256");
  TORCH_CHECK(num_heads % num_kv_heads == 0, "flash_attention: ", num_heads, " q heads are not a multiple of ",
              num_kv_heads, " kv heads");
  TORCH_CHECK(query_start_loc.size(0) == num_seqs + 1 && block_tables.size(0) >= num_seqs,
              "flash_attention: query_start_loc must have num_seqs + 1 entries, block_tables num_seqs rows");
  TORCH_CHECK(0 <= num_decodes && num_decodes <= num_seqs && num_decodes <= num_tokens,
              "flash_attention: num_decodes out of range");
  TORCH_CHECK(num_splits >= 1 && num_splits <= 1024, "flash_attention: num_splits must be in 1..1024");
  TORCH_CHECK(0 <= short_query_len && short_query_len <= 64, "flash_attention: short_query_len must be in 0..64");
  // short queries: every sequence (at most short_query_len query tokens each) on the decode kernel
  const int64_t split_tokens = short_query_len > 0 ? num_tokens : num_decodes;
  float* part_out_ptr = nullptr;
  float* part_lse_ptr = nullptr;
  if (num_splits > 1 && split_tokens > 0) {
    TORCH_CHECK(part_out.has_value() && part_lse.has_value(), "flash_attention: split-KV needs part_out and part_lse");
    const int64_t rows = split_tokens * num_heads * num_splits;
    TORCH_CHECK(part_out->is_cuda() && part_out->scalar_type() == at::kFloat && part_out->is_contiguous() &&
                    part_out->numel() >= rows * head_size,
                "flash_attention: part_out must be contiguous float32 with tokens * num_heads * num_splits * head_size "
                "elements (tokens: num_decodes, or every token with short_query_len)");
    TORCH_CHECK(part_lse->is_cuda() && part_lse->scalar_type() == at::kFloat && part_lse->is_contiguous() &&
                    part_lse->numel() >= rows,
                "flash_attention: part_lse must be contiguous float32 with tokens * num_heads * num_splits elements");
    part_out_ptr = part_out->data_ptr<float>();
    part_lse_ptr = part_lse->data_ptr<float>();
  }
  if (num_tokens == 0 || num_seqs == 0) return;

  FlashAttentionArgs args{};
  args.query = query.data_ptr();
  args.out = out.data_ptr();
  args.k_cache = kv_cache.data_ptr();
  args.v_cache = static_cast<const char*>(kv_cache.data_ptr()) + kv_cache.stride(0) * kv_cache.element_size();
  args.block_tables = block_tables.data_ptr<int32_t>();
  args.query_start_loc = query_start_loc.data_ptr<int32_t>();
  args.seq_lens = seq_lens.data_ptr<int32_t>();
  args.q_stride_token = query.stride(0);
  args.q_stride_head = query.stride(1);
  args.o_stride_token = out.stride(0);
  args.o_stride_head = out.stride(1);
  args.cache_stride_block = kv_cache.stride(1);
  args.cache_stride_token = kv_cache.stride(2);
  args.cache_stride_head = kv_cache.stride(3);
  args.block_table_stride = block_tables.stride(0);
  args.num_heads = static_cast<int>(num_heads);
  args.num_kv_heads = static_cast<int>(num_kv_heads);
  args.head_size = static_cast<int>(head_size);
  args.block_size = static_cast<int>(kv_cache.size(2));
  args.scale = static_cast<float>(scale);
  args.window = static_cast<int>(window > 0 ? window : 0);
  args.kv_format = kv_format;
  args.k_scale = kv_format == KVFormat::kModel ? nullptr : k_scale->data_ptr<float>();
  args.v_scale = kv_format == KVFormat::kModel ? nullptr : v_scale->data_ptr<float>();

  const DType dtype = query.scalar_type() == at::kHalf ? DType::kFloat16 : DType::kBFloat16;
  const c10::cuda::OptionalCUDAGuard guard(query.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (short_query_len > 0) {
    const DecodeRange all{0, static_cast<int>(num_seqs), 0, static_cast<int>(num_tokens),
                          static_cast<int>(short_query_len)};
    launch_flash_decode(dtype, args, all, static_cast<int>(num_splits), part_out_ptr, part_lse_ptr, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int decodes = static_cast<int>(num_decodes);
  launch_flash_decode(dtype, args, DecodeRange{0, decodes, 0, decodes, 1}, static_cast<int>(num_splits), part_out_ptr,
                      part_lse_ptr, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_flash_prefill(dtype, args, static_cast<int>(num_decodes), static_cast<int>(num_seqs),
                       num_tokens - num_decodes, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

int64_t flash_decode_programs_per_sm(int64_t head_size, bool half, int64_t device) {
  using namespace pagoda;
  if (!flash_supports_head_size(static_cast<int>(head_size))) return 0;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  return pagoda::flash_decode_programs_per_sm(half ? DType::kFloat16 : DType::kBFloat16, static_cast<int>(head_size));
}
