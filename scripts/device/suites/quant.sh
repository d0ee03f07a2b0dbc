# Quantized weights on one GPU: the FP8, AWQ and GPTQ plugins' GPU tests and kernels, then each end to end against bf16.
# fp8 needs compute capability >= 8.9. Workloads: AWQ, the batch-1 decode step; FP8, 1024-in/128-out throughput;
# GPTQ (int4 g128, on the AWQ kernels), the batch-1 decode step and 1000 x 256/256 throughput against AWQ's.
ALL_PARTS="tests kernels awq fp8 gptq"
DEFAULT_PARTS="tests kernels awq fp8"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/quant_fp8 plugins/quant_awq plugins/quant_gptq)

suite_run() {
  local flags=(--load-format dummy --max-model-len 2048 --log-level warning ${ATTENTION:+--attention-backend "$ATTENTION"})
  local lat=(--batch-sizes 1 --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 4)
  local tput=(--num-prompts "$(quick 500 8)" --input-len "$(quick 1024 64)" --output-len "$(quick 128 16)")
  has_part tests && pytest_step pytest_quant 300 -m gpu plugins/quant_fp8/tests plugins/quant_awq/tests \
    plugins/quant_gptq/tests
  if has_part kernels; then
    for name in awq fp8; do
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
  return 0
}
