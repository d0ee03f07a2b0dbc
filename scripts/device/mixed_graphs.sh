#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): prefill and mixed steps as CUDA graph pieces cut at attention
# (PAGODA_MIXED_GRAPHS, pagoda.engine.piecewise) against eager ones.
#   1. the piecewise GPU tests (triton fp32 exact; flash fp16 up to near ties);
#   2. `pagoda serve` (auto attention: flash) with PAGODA_TRACE_DIR at 16 req/s (256/256, 30 s), with
#      PAGODA_MIXED_GRAPHS=2048 and then without (the same-run baseline), each + tail_analysis.py;
#   3. profile_mixed.py with pieces and without: a 256-token prompt joining 0 / 16 / 64 decodes.
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/mixed_graphs.sh
#   MODEL=benchmarks/configs/llama-3.2-1b TESTS=0 bash scripts/device/mixed_graphs.sh   (a small model, whose
#     eager steps are bound by launching kernels rather than by its GEMMs: where pieces should pay; no tests)
MODEL="${MODEL:-benchmarks/configs/llama-3.1-8b}"
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh mixed_graphs
source scripts/device/wait_for_server.sh
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE plugins/platform_cuda/tests/test_cuda_graphs.py \
    plugins/attention_flash/tests/test_flash_end_to_end.py -k "piece" > "$R/tests.log" 2>&1
  echo "piecewise gpu tests: exit $? ($(tail -1 "$R/tests.log"))" | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)" "$R/tests.log" | head -10 | tee -a "$OUT/summary.txt"
fi
tok=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)

served() {  # served NAME MIXED_GRAPHS: one server, warm-up, 16 req/s for 30 s, the tail analysis
  local name=$1
  PAGODA_MIXED_GRAPHS=$2 PAGODA_TRACE_DIR="$R/trace_$name" pagoda serve "$MODEL" \
    --load-format dummy --max-model-len 2048 --tokenizer "$tok" --log-level info --port 8000 \
    --served-model-name llama > "$R/server_$name.log" 2>&1 &
  local pid=$! t
  if ! t=$(wait_for_server $pid "$R/server_$name.log" 240); then echo "$name: server did not start" | tee -a "$OUT/summary.txt"; return; fi
  echo "$name: up after ${t} s; $(grep -ohE "Captured piecewise[^\"]*" "$R/server_$name.log" | head -1)" | tee -a "$OUT/summary.txt"
  timeout 60 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 64 --input-len 256 --output-len 16 \
    --ignore-eos --no-progress --seed 1 > /dev/null 2>&1  # warm-up on other prompts
  timeout 90 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 480 --request-rate 16 \
    --input-len 256 --output-len 256 --ignore-eos --no-progress --save-detailed --result-file "$R/$name.json" \
    > "$R/$name.log" 2>&1
  echo "$name rate 16: exit $? $(python3 scripts/device/summarize_bench.py "$R/$name.json" 2>/dev/null)" | tee -a "$OUT/summary.txt"
  kill -TERM $pid; timeout 60 tail --pid=$pid -f /dev/null
  python3 scripts/device/tail_analysis.py "$R/trace_$name/core.jsonl" "$R/$name.json" --out "$R/tail_$name.json" > /dev/null 2>&1
  echo "$name: $(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$R/tail_$name.json")" \
    | tee -a "$OUT/summary.txt"
}
served pieces 2048
served eager 0
for run in "pieces 2048" "eager 0"; do
  set -- $run
  PAGODA_MIXED_GRAPHS=$2 timeout 150 python3 scripts/device/profile_mixed.py "$MODEL" \
    --backend flash --decodes 0,16,64 --profile-decodes 16 --out "$R/mixed_$1" > "$R/mixed_$1.log" 2>&1
  echo "profile_mixed, $1: exit $?"; tail -3 "$R/mixed_$1.log" | tee -a "$OUT/summary.txt"
done
pack_results
