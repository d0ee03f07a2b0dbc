#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), one call of about 9 minutes: speculation's
# cost-aware back-off (spec_backoff.sh), guided JSON vs unguided at batch 64 (real Llama 3
# tokenizer, 3 runs per mode alternating), and `pagoda serve` + `pagoda bench serve` on dummy
# Llama-3.1-8B. Results: $OUT/spec/*, guided_b64_n256.json, serve_*.json, summary.txt.
set -uo pipefail
OUT="${OUT:-$PWD/round_check_out}"; mkdir -p "$OUT"
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
source scripts/device/wait_for_server.sh
start=$(date +%s)
OUT="$OUT/spec" LIMIT=240 bash scripts/device/spec_backoff.sh > /dev/null 2>&1
say "spec backoff: exit $? ($(( $(date +%s) - start )) s)"; grep -E "/ none|ratio" "$OUT/spec/spec_backoff.log" | tee -a "$OUT/summary.txt"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
timeout 200 python3 benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" \
  --attention-backend triton --max-model-len 2048 --batch-size 64 --output-len 256 --repeats 3 \
  --result-file "$OUT/guided_b64_n256.json" > "$OUT/guided.log" 2>&1
say "guided: exit $?"; grep -E '_tokens_per_s"|ratio' "$OUT/guided_b64_n256.json" | tee -a "$OUT/summary.txt"
COMMON=(--load-format dummy --attention-backend triton --max-model-len 2048 --tokenizer "$TOK" --log-level warning)
pagoda serve benchmarks/configs/llama-3.1-8b "${COMMON[@]}" --port 8000 --served-model-name llama > "$OUT/server.log" 2>&1 &
pid=$!
if t=$(wait_for_server $pid "$OUT/server.log" 200); then say "serve: up after ${t} s"; else say "serve: did not start"; fi
timeout 60 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 64 --input-len 256 --output-len 16 \
  --ignore-eos --no-progress > /dev/null 2>&1  # warm-up
timeout 150 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 500 --input-len 256 --output-len 256 \
  --ignore-eos --no-progress --result-file "$OUT/serve_rate_inf.json" > "$OUT/serve_rate_inf.log" 2>&1
say "serve rate inf: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/serve_rate_inf.json" 2>/dev/null)"
curl -s http://127.0.0.1:8000/metrics | grep -E "^pagoda:(request_success_total|generation_tokens_total)" | tee -a "$OUT/summary.txt"
kill -TERM $pid; timeout 60 tail --pid=$pid -f /dev/null
say "total: $(( $(date +%s) - start )) s"
