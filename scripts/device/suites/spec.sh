# Speculative decoding on one GPU: its GPU tests, then n-gram and draft-model speculation against none.
# Dummy weights: the drafts' acceptance is what random weights give; the suite measures costs and back-off.
ALL_PARTS="tests ngram draft"
DEFAULT_PARTS="tests ngram draft"
PLUGINS=(plugins/platform_cuda plugins/attention_triton)
NGRAM='{"method": "ngram", "num_speculative_tokens": 4}'

suite_run() {
  local model=${MODEL:-benchmarks/configs/llama-3.1-8b} draft=${DRAFT:-benchmarks/configs/llama-3.2-1b}
  local flags=(--load-format dummy --max-model-len 2048 --log-level warning ${ATTENTION:+--attention-backend "$ATTENTION"})
  local lat=(--batch-sizes "$(quick 1,8 1,2)" --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 2)
  local tput=(--num-prompts "$(quick 1000 8)" --input-len "$(quick 256 32)" --output-len "$(quick 256 32)")
  has_part tests && pytest_step pytest_spec 300 -m gpu tests/spec_decode tests/engine/test_speculative*.py \
    plugins/attention_triton/tests/test_speculative_graphs.py
  if has_part ngram || has_part draft; then
    bench latency_none 150 latency "$model" "${flags[@]}" "${lat[@]}"
    bench throughput_none 200 throughput "$model" "${flags[@]}" "${tput[@]}"
  fi
  if has_part ngram; then
    bench latency_ngram 150 latency "$model" "${flags[@]}" "${lat[@]}" --speculative-config "$NGRAM"
    bench throughput_ngram 200 throughput "$model" "${flags[@]}" "${tput[@]}" --speculative-config "$NGRAM"
  fi
  has_part draft && bench latency_draft 180 latency "$model" "${flags[@]}" "${lat[@]}" \
    --speculative-config "{\"method\": \"draft\", \"model\": \"$draft\", \"num_speculative_tokens\": 4}"
  return 0
}
