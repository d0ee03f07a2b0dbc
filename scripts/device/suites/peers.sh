# Pagoda and vLLM side by side on the same GPU and workloads (benchmarks/peers/README.md); vLLM installed first.
# PEERS_FLAGS: more flags of benchmarks/peers/run.py (e.g. "--rates inf,8 --rate-seconds 20"; "--limits own" for the
# second table, each engine at its own defaults; matched limits are the default; "--repeats 2": each server started
# twice, the rows medians). lora and vlm: a device call each.
ALL_PARTS="offline serve serve_vllm_client mixed mixed_vllm_client prefix lora vlm"
DEFAULT_PARTS="offline"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)

suite_run() {
  need_vllm || return 1
  # the harness keeps its own time limits: it gets what is left of the budget
  # shellcheck disable=SC2086
  step peers_run "$(left_s)" "$PYTHON" benchmarks/peers/run.py --parts "$(echo "$PARTS" | tr ' ' ',')" --out "$WORK" \
    --work-dir /tmp/peers --budget-s $(($(left_s) - 20)) --tag run $([ "$QUICK" = 1 ] && echo --quick) ${PEERS_FLAGS:-}
}
