# Offline throughput, decode-step latency, served load, guided decoding and LoRA adapters of the main config
# (dummy weights). MODEL: the config folder (default Llama-3.1-8B); ATTENTION: the attention backend (default auto).
# Part trace: a server with PAGODA_TRACE_DIR at 16 requests/s after a warm-up, and where its latency went
# (benchmarks/trace_report.py: step times by kind, the slowest steps, each first token's parts).
# Part steps: where offline time goes: both throughput workloads with --step-report (decode-only and mixed steps
# against their floors; 256/256 also with --max-prefill-tokens-while-decoding 1024 and 4096). Part kernels: the decode
# step's kernels at batch 64 and 256, and an 8192-token prefill step's kernels, each against its floor.
ALL_PARTS="throughput latency serve guided lora trace steps kernels"
DEFAULT_PARTS="throughput latency serve"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)

suite_run() {
  local model=${MODEL:-benchmarks/configs/llama-3.1-8b} tok n
  local engine=(--load-format dummy --max-model-len 2048 ${ATTENTION:+--attention-backend "$ATTENTION"})
  local flags=("${engine[@]}" --log-level warning)
  n=$(quick 1000 8)
  if has_part throughput; then
    bench throughput_256x256 240 throughput "$model" "${flags[@]}" --num-prompts "$n" --input-len "$(quick 256 32)" \
      --output-len "$(quick 256 32)"
    bench throughput_1024x128 240 throughput "$model" "${flags[@]}" --num-prompts "$n" --input-len "$(quick 1024 64)" \
      --output-len "$(quick 128 16)"
  fi
  if has_part steps; then
    local cap
    for cap in 0 1024 4096; do  # 0: no cap on the prompt tokens of a step that also decodes (the default)
      bench "steps_256x256$([ "$cap" = 0 ] || echo "_cap$cap")" 240 throughput "$model" "${flags[@]}" --num-prompts "$n" \
        --input-len "$(quick 256 32)" --output-len "$(quick 256 32)" --step-report --max-prefill-tokens-while-decoding "$cap"
    done
    bench steps_1024x128 240 throughput "$model" "${flags[@]}" --num-prompts "$n" --input-len "$(quick 1024 64)" \
      --output-len "$(quick 128 16)" --step-report
  fi
  if has_part kernels; then
    bench kernels 180 latency "$model" "${flags[@]}" --batch-sizes "$(quick 64,256 1,2)" --input-len "$(quick 320 16)" \
      --output-len "$(quick 33 8)" --repeats 1 --kernels
    # 8 prompts of 1024 tokens: one 8192-token prefill step, the size of 1024/128's mixed steps, by kernel
    bench kernels_prefill 180 latency "$model" "${flags[@]}" --batch-sizes "$(quick 8 2)" --input-len "$(quick 1024 16)" \
      --output-len "$(quick 33 8)" --repeats 1 --kernels
  fi
  has_part latency && bench latency 180 latency "$model" "${flags[@]}" --batch-sizes "$(quick 1,8,64 1,2)" \
    --input-len "$(quick 128 16)" --output-len "$(quick 128 8)" --repeats 2
  tok=$(llama3_tokenizer)
  if has_part serve || has_part guided || has_part trace; then
    [ -n "$tok" ] || { fail_step tokenizer "$TOKENIZER_MISSING"; return 1; }
  fi
  if has_part serve && serve_start server "$model" "${flags[@]}" --tokenizer "$tok"; then
    serve_load serve_warmup 60 --num-prompts "$(quick 64 4)" --input-len "$(quick 256 16)" --output-len 16 --seed 1
    serve_load serve_rate_inf 200 --num-prompts "$n" --input-len "$(quick 256 32)" --output-len "$(quick 256 16)"
    serve_load serve_rate_8 120 --num-prompts "$(quick 480 8)" --request-rate 8 --input-len "$(quick 256 32)" \
      --output-len "$(quick 256 16)"
    serve_stop
  fi
  has_part trace && traced_load "$model" "${flags[@]}" --tokenizer "$tok"
  has_part lora && step lora 420 "$PYTHON" benchmarks/lora_throughput.py "$model" "${engine[@]}" \
    --num-prompts "$n" --input-len "$(quick 256 32)" --output-len "$(quick 256 16)" \
    --adapter-counts "$(quick 1,8,32 1,2)" --batch-sizes "$(quick 1,64 1,2)" --profile-kernels --result-file "$WORK/lora.json"
  has_part guided && step guided 300 "$PYTHON" benchmarks/guided_decoding.py "$model" "${engine[@]}" --tokenizer "$tok" \
    --batch-size "$(quick 64 2)" --output-len "$(quick 256 8)" --repeats "$(quick 3 1)" --result-file "$WORK/guided.json"
  return 0
}

# traced_load SERVER_ARGS...: warm a traced server up, then serve 256/256 at 16 requests/s and report the trace of
# that run alone (--since: the time the warm-up ended).
traced_load() {
  local since
  export PAGODA_TRACE_DIR="$WORK/trace"
  serve_start trace_server "$@" || { unset PAGODA_TRACE_DIR; return 1; }
  unset PAGODA_TRACE_DIR
  serve_load trace_warmup 60 --num-prompts "$(quick 256 4)" --input-len "$(quick 256 16)" --output-len 32 --seed 11
  since=$("$PYTHON" -c "import time; print(time.monotonic())")
  serve_load trace_rate_16 120 --num-prompts "$(quick 480 8)" --request-rate 16 --input-len "$(quick 256 32)" \
    --output-len "$(quick 256 16)" --seed 12
  serve_stop
  step trace_report 60 "$PYTHON" benchmarks/trace_report.py "$WORK/trace" --since "$since" --top 20 \
    --out "$WORK/trace_report.json"
}
