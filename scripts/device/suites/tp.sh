# Tensor parallelism on two GPUs (nvidia-h200-x2): the multi-GPU tests, TP=2 against TP=1, 70B at TP=2, served.
# MODEL: the config of the 8b part (default Llama-3.1-8B); 70b always runs Llama-3.1-70B's config.
ALL_PARTS="tests 8b 70b serve"
DEFAULT_PARTS="tests 8b"
PLUGINS=(plugins/platform_cuda plugins/attention_triton)

suite_run() {
  local m8=${MODEL:-benchmarks/configs/llama-3.1-8b} m70=benchmarks/configs/llama-3.1-70b tok
  local flags=(--load-format dummy --max-model-len 2048 --log-level warning ${ATTENTION:+--attention-backend "$ATTENTION"})
  local lat=(--batch-sizes "$(quick 1,32 1,2)" --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 2)
  has_part tests && pytest_step pytest_tp 300 -m gpu tests/engine/test_tensor_parallel.py tests/layers/test_gemv_tuning.py \
    plugins/platform_cuda/tests/test_ll_all_reduce.py
  if has_part 8b; then
    for tp in 1 2; do
      bench "tp${tp}_8b_throughput" 240 throughput "$m8" "${flags[@]}" -tp "$tp" --num-prompts "$(quick 1000 8)" \
        --input-len "$(quick 256 32)" --output-len "$(quick 256 32)"
      bench "tp${tp}_8b_latency" 150 latency "$m8" "${flags[@]}" -tp "$tp" "${lat[@]}"
    done
  fi
  if has_part 70b; then
    bench tp2_70b_throughput 240 throughput "$m70" "${flags[@]}" -tp 2 --num-prompts "$(quick 300 8)" \
      --input-len "$(quick 256 32)" --output-len "$(quick 256 32)"
    bench tp2_70b_latency 150 latency "$m70" "${flags[@]}" -tp 2 --batch-sizes "$(quick 1,16 1)" \
      --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 2
  fi
  if has_part serve; then
    tok=$(llama3_tokenizer)
    [ -n "$tok" ] || { fail_step tokenizer "$TOKENIZER_MISSING"; return 1; }
    serve_start server "$m8" "${flags[@]}" -tp 2 --tokenizer "$tok" || return 1
    serve_load serve_warmup 60 --num-prompts "$(quick 32 4)" --input-len "$(quick 256 16)" --output-len 16 --seed 1
    serve_load serve_tp2_rate_inf 150 --num-prompts "$(quick 200 8)" --input-len "$(quick 256 32)" \
      --output-len "$(quick 256 16)"
    serve_stop
  fi
  return 0
}
