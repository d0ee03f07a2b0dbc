# The kernel benchmarks on one GPU (python -m benchmarks.kernel_bench): GEMV, GEMM paths, attention, MoE, AWQ, FP8, sampler, LoRA.
# Each part is a family; its JSON (benchmarks/kernel_bench/report.py: the schema) is the step's result.
# KERNEL_FLAGS: more flags for every part run (e.g. "--tiles block_n=64" with the lora part alone).
ALL_PARTS="gemv gemm attention moe awq fp8 sampler lora"
DEFAULT_PARTS="gemv gemm attention moe sampler lora"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash plugins/quant_fp8 plugins/quant_awq)

suite_run() {
  local name
  for name in $PARTS; do
    # gemm autotunes Inductor's GEMM templates for eight shapes: more time than the other families
    step "$name" "$([ "$name" = gemm ] && echo 420 || echo 240)" "$PYTHON" -m benchmarks.kernel_bench "$name" --out "$WORK/$name.json" $([ "$QUICK" = 1 ] && echo --small) \
      ${KERNEL_FLAGS:-}
  done
}
