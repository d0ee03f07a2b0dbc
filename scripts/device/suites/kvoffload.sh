# KV cache beyond the GPU: the KV connector GPU tests, then multi-turn chats with and without the host tier.
# bench: Llama-3.1-8B's config (dummy weights), a 16 GiB device KV cache, 120 chats x 10 turns (2048-token history
# + 128 per turn, 64 out), without and with --kv-offload-gib 64 (benchmarks/kv_offload_multiturn.py). MODEL, ATTENTION.
ALL_PARTS="tests bench"
DEFAULT_PARTS="tests bench"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)

suite_run() {
  local model=${MODEL:-benchmarks/configs/llama-3.1-8b}
  has_part tests && pytest_step pytest_kv_connectors 240 -m gpu tests/kv_connectors
  has_part bench && step multiturn 540 "$PYTHON" benchmarks/kv_offload_multiturn.py "$model" \
    --load-format dummy --max-model-len 8192 ${ATTENTION:+--attention-backend "$ATTENTION"} \
    --kv-cache-memory "$(quick 17179869184 1073741824)" --kv-offload-gib "$(quick 64 4)" \
    --conversations "$(quick 120 4)" --turns "$(quick 10 3)" --history-len "$(quick 2048 256)" \
    --user-len "$(quick 128 32)" --output-len "$(quick 64 8)" --result-file "$WORK/multiturn.json"
  return 0
}
