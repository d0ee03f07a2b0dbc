# DeepSeek-V2-Lite on one GPU (MLA, DeepSeek's MoE; dummy weights): MLA tests, 1000 x 1024/256 and its KV capacity, vs vLLM.
# tests: the Triton MLA kernels and DeepSeek-V3 end to end with CUDA graphs. kv: 1000 x 1024/256 offline; the
# throughput JSON's kv_cache block holds the KV tokens that fit and those an MHA-layout cache (per-head keys and
# values) would fit in the same bytes. peers: the same throughput and the batch-1 decode step (1024-token prompts)
# against vLLM 0.26 in the same run (vLLM installed first: benchmarks/peers/README.md). MODEL: another DeepSeek config.
ALL_PARTS="tests kv peers"
DEFAULT_PARTS="tests kv"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)

suite_run() {
  local model=${MODEL:-benchmarks/configs/deepseek-v2-lite}
  local attention=${ATTENTION:+--attention-backend "$ATTENTION"}  # auto: triton (flash has no MLA)
  has_part tests && pytest_step pytest_mla 300 plugins/attention_triton/tests/test_triton_mla.py \
    plugins/attention_triton/tests/test_end_to_end.py -k "mla or latent"
  # shellcheck disable=SC2086
  has_part kv && bench throughput_mla 360 throughput "$model" --load-format dummy --max-model-len 2048 \
    --log-level warning --num-prompts "$(quick 1000 8)" --input-len "$(quick 1024 64)" \
    --output-len "$(quick 256 16)" $attention
  has_part peers && deepseek_peers "$model"
  return 0
}

# Pagoda and vLLM on the same workload and GPU: 1000 x 1024/256, then the decode step at batch 1 (1024-token prompts).
deepseek_peers() {
  need_vllm || return 1
  # shellcheck disable=SC2086
  step peers_deepseek "$(left_s)" "$PYTHON" benchmarks/peers/run.py --parts offline --config "$1" --out "$WORK" \
    --offline "$(quick 1000:1024:256 8:64:16)" --latency "$(quick 1:1024:32:2 1:64:8:1)" --work-dir /tmp/peers \
    --budget-s $(($(left_s) - 20)) --tag deepseek $([ "$QUICK" = 1 ] && echo --quick) ${PEERS_FLAGS:-}
}
