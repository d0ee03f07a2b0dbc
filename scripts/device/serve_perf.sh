#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): the serving-core figures of one run, on dummy
# Llama-3.1-8B weights (Triton attention, CUDA graphs), in two parts of < 10 minutes each:
#   PARTS="tests offline" bash scripts/device/serve_perf.sh   # gpu tests, offline throughput, decode latency
#   PARTS="serve" bash scripts/device/serve_perf.sh           # pagoda serve + pagoda bench serve
# Everything lands in $OUT/serve_perf_<part>.tgz (logs, JSON) plus $OUT/summary_<part>.txt.
set -uo pipefail
OUT="${OUT:-$PWD/serve_perf_out}"; mkdir -p "$OUT"
WORK=/tmp/serve_perf; mkdir -p "$WORK"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PARTS="${PARTS:-tests offline serve}"
has() { [[ " $PARTS " == *" $1 "* ]]; }
source scripts/device/wait_for_server.sh
MODEL=benchmarks/configs/llama-3.1-8b
TOK=/tmp/llama3-tokenizer
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$WORK/install.log" 2>&1 \
  || { tail -40 "$WORK/install.log"; exit 1; }
echo "install: $(( $(date +%s) - start )) s"
TOK=$(bash scripts/device/llama3_tokenizer.sh "$TOK")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$WORK/device.txt"
COMMON=(--load-format dummy --attention-backend triton --max-model-len 2048 --tokenizer "$TOK" --log-level warning)
bench() {  # name, subcommand args...: one `pagoda bench` run under a time limit
  local name=$1; shift
  timeout "${LIMIT:-200}" pagoda bench "$@" "${COMMON[@]}" --result-file "$WORK/$name.json" > "$WORK/$name.log" 2>&1
  echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/$name.json" 2>/dev/null)"
}
if has tests; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_cuda_graphs.py 2>&1 \
    | tee "$WORK/pytest.log" | tail -4
fi
if has offline; then
  bench offline_256x256 throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256
  bench offline_256x256_serial throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256 --no-overlap-steps
  bench offline_1024x128 throughput "$MODEL" --num-prompts 1000 --input-len 1024 --output-len 128
  bench latency_b1_b32 latency "$MODEL" --batch-sizes 1,32 --input-len 128 --output-len 32 --repeats 2
fi
if has ab; then  # offline overlap on/off, alternating processes (the order effects of a fresh machine show)
  for i in 1 2; do
    bench "ab${i}_overlap" throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256
    bench "ab${i}_serial" throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256 --no-overlap-steps
  done
fi
serve_and_bench() {  # name, server flags...: start pagoda serve, run the served workloads, stop it (SIGTERM)
  local name=$1; shift
  pagoda serve "$MODEL" "${COMMON[@]}" --port 8000 --served-model-name llama "$@" > "$WORK/server_$name.log" 2>&1 &
  local pid=$! t
  t=$(wait_for_server $pid "$WORK/server_$name.log" 240) || { echo "$name: server did not start"; return 1; }
  echo "$name: server up after ${t} s"
  timeout 120 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 256 --input-len 256 --output-len 16 \
    --ignore-eos --no-progress > "$WORK/${name}_warmup.log" 2>&1  # compiles the kernels first used by big batches
  timeout 200 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 1000 --input-len 256 --output-len 256 \
    --ignore-eos --no-progress --result-file "$WORK/${name}_rate_inf.json" > "$WORK/${name}_rate_inf.log" 2>&1
  echo "$name rate inf: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/${name}_rate_inf.json" 2>/dev/null)"
  if [ -z "${NO_RATE:-}" ]; then
    timeout 120 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 480 --request-rate 8 --input-len 256 \
      --output-len 256 --ignore-eos --no-progress --result-file "$WORK/${name}_rate_8.json" > "$WORK/${name}_rate_8.log" 2>&1
    echo "$name rate 8: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/${name}_rate_8.json" 2>/dev/null)"
  fi
  curl -s http://127.0.0.1:8000/metrics | grep -E "^pagoda:(generation_tokens_total|request_success_total)" > "$WORK/${name}_metrics.txt"
  kill -TERM $pid; wait $pid; echo "$name: server exit $?"
}
if has serve; then
  serve_and_bench serve_1api
  serve_and_bench serve_2api --api-server-count 2
fi
if has serve2; then  # the served throughput of the A/B run's machine
  NO_RATE=1 serve_and_bench serve_2api --api-server-count 2
fi
part=$(echo "$PARTS" | tr ' ' '_')
for f in "$WORK"/*.json; do [ -f "$f" ] && echo "$(basename "$f" .json): $(python3 scripts/device/summarize_bench.py "$f")"; done > "$OUT/summary_$part.txt"
tar czf "$OUT/serve_perf_$part.tgz" -C "$WORK" .
echo "total: $(( $(date +%s) - start )) s"
