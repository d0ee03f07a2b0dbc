#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), one call of about 9 minutes: speculation's
# cost-aware back-off (spec_backoff.sh), guided JSON vs unguided at batch 64 (real Llama 3
# tokenizer, 3 runs per mode alternating), and `pagoda serve` + `pagoda bench serve` on dummy
# Llama-3.1-8B. Results: $OUT/spec/*, guided_b64_n256.json, serve_*.json, summary.txt.
set -uo pipefail
OUT="${OUT:-$PWD/round_check_out}"; mkdir -p "$OUT"
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
source scripts/device/serve_bench.sh
start=$(date +%s)
OUT="$OUT/spec" LIMIT=240 bash scripts/device/spec_backoff.sh > /dev/null 2>&1
say "spec backoff: exit $? ($(( $(date +%s) - start )) s)"; grep -E "/ none|ratio" "$OUT/spec/spec_backoff.log" | tee -a "$OUT/summary.txt"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
timeout 200 python3 benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" \
  --attention-backend triton --max-model-len 2048 --batch-size 64 --output-len 256 --repeats 3 \
  --result-file "$OUT/guided_b64_n256.json" > "$OUT/guided.log" 2>&1
say "guided: exit $?"; grep -E '_tokens_per_s"|ratio' "$OUT/guided_b64_n256.json" | tee -a "$OUT/summary.txt"
serve_bench triton serve_rate_inf | tee -a "$OUT/summary.txt"
say "total: $(( $(date +%s) - start )) s"
