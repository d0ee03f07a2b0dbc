# Quantized weights and KV caches on one GPU: the FP8, INT8, AWQ and GPTQ plugins' GPU tests and kernels, then each end to end.
# fp8 needs compute capability >= 8.9, int8 >= 8.0. Workloads: AWQ, the batch-1 decode step; FP8, 1024-in/128-out
# throughput; GPTQ (int4 g128, on the AWQ kernels), the batch-1 decode step and 1000 x 256/256 throughput against AWQ's;
# INT8 (W8A8), 1000 x 1024/128 throughput against bf16; the FP8 KV cache, 1000 x 2048/512 throughput with the KV
# memory capped (KV_MEMORY bytes, default 16 GiB: Llama-3.1-8B's bf16 cache then holds about 50 of these requests)
# against the bf16 cache, and decode attention up to 32k tokens over each cache (the share of the copy rate should hold).
ALL_PARTS="tests kernels awq fp8 gptq int8 kvfp8"
DEFAULT_PARTS="tests kernels awq fp8 int8 kvfp8"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash plugins/quant_fp8 plugins/quant_awq
         plugins/quant_gptq)

suite_run() {
  local flags=(--load-format dummy --max-model-len 2048 --log-level warning ${ATTENTION:+--attention-backend "$ATTENTION"})
  local lat=(--batch-sizes 1 --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 4)
  local tput=(--num-prompts "$(quick 500 8)" --input-len "$(quick 1024 64)" --output-len "$(quick 128 16)")
  has_part tests && pytest_step pytest_quant 300 -m gpu plugins/quant_fp8/tests plugins/quant_awq/tests \
    plugins/quant_gptq/tests
  if has_part kernels; then
    for name in awq fp8 int8; do
      step "kernels_$name" 200 "$PYTHON" -m benchmarks.kernel_bench "$name" --out "$WORK/kernels_$name.json" \
        $([ "$QUICK" = 1 ] && echo --small)
    done
  fi
  if has_part awq; then  # the -awq config is the 8B with an AWQ quantization_config (group 128): detected, no flag
    bench latency_awq 120 latency benchmarks/configs/llama-3.1-8b-awq "${flags[@]}" "${lat[@]}"
    bench latency_bf16 120 latency benchmarks/configs/llama-3.1-8b "${flags[@]}" "${lat[@]}"
  fi
  if has_part fp8; then
    bench throughput_fp8 200 throughput benchmarks/configs/llama-3.1-8b "${flags[@]}" "${tput[@]}" --quantization fp8
    bench throughput_bf16 200 throughput benchmarks/configs/llama-3.1-8b "${flags[@]}" "${tput[@]}"
  fi
  if has_part gptq; then  # the -gptq config: the 8B with a GPTQ quantization_config (int4, group 128, sym, no act-order)
    local t256=(--num-prompts "$(quick 1000 8)" --input-len "$(quick 256 64)" --output-len "$(quick 256 16)")
    bench latency_gptq 120 latency benchmarks/configs/llama-3.1-8b-gptq "${flags[@]}" "${lat[@]}"
    has_part awq || bench latency_bf16 120 latency benchmarks/configs/llama-3.1-8b "${flags[@]}" "${lat[@]}"
    bench throughput_gptq_256 200 throughput benchmarks/configs/llama-3.1-8b-gptq "${flags[@]}" "${t256[@]}"
    bench throughput_awq_256 200 throughput benchmarks/configs/llama-3.1-8b-awq "${flags[@]}" "${t256[@]}"
  fi
  if has_part int8; then  # --quantization int8: the bf16 weights quantized at load, per channel
    local t1024=(--num-prompts "$(quick 1000 8)" --input-len "$(quick 1024 64)" --output-len "$(quick 128 16)")
    bench throughput_int8 240 throughput benchmarks/configs/llama-3.1-8b "${flags[@]}" "${t1024[@]}" --quantization int8
    bench throughput_bf16_1000 240 throughput benchmarks/configs/llama-3.1-8b "${flags[@]}" "${t1024[@]}"
  fi
  has_part kvfp8 && kv_fp8_parts
  return 0
}

# The FP8 KV cache: 1000 x 2048/512 under a capped KV memory (bf16 KV limits the batch), then decode attention.
kv_fp8_parts() {
  local long=(--load-format dummy --max-model-len 4096 --log-level warning --kv-cache-memory "${KV_MEMORY:-17179869184}"
              --num-prompts "$(quick 1000 8)" --input-len "$(quick 2048 64)" --output-len "$(quick 512 16)"
              ${ATTENTION:+--attention-backend "$ATTENTION"})
  bench throughput_kv_fp8 300 throughput benchmarks/configs/llama-3.1-8b "${long[@]}" --kv-cache-dtype fp8
  bench throughput_kv_bf16 300 throughput benchmarks/configs/llama-3.1-8b "${long[@]}"
  local kv
  for kv in auto fp8; do
    step "kernels_attention_decode_$kv" 200 "$PYTHON" -m benchmarks.kernel_bench attention --parts decode \
      --kv-cache-dtype "$kv" --out "$WORK/kernels_attention_decode_$kv.json" $([ "$QUICK" = 1 ] && echo --small)
  done
}
