#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]): tensor parallelism on 2 GPUs, in parts of < 9 minutes:
#   PARTS="tests 8b" bash scripts/device/tp.sh     # TP GPU tests; Llama-3.1-8B dummy TP=2 vs TP=1 (throughput, batch-1 latency; TP=2 with each all-reduce)
#   PARTS="tests 8b-latency" ...                    # the same without the throughput runs (about 4 minutes)
#   LATENCY="tp1 tp2 ll" ...                        # only these latency runs (default: tp1 tp2 nccl_only ll ll_unfused)
#   PARTS="costs" ...                               # 8B's linears at TP=2 with NCCL / one-shot / LL sums (tp_costs.py)
#   PARTS="70b" bash scripts/device/tp.sh          # Llama-3.1-70B dummy at TP=2: bench throughput + batch-1 latency
#   PARTS="70b-serve" bash scripts/device/tp.sh    # Llama-3.1-70B dummy at TP=2: pagoda serve + pagoda bench serve
#   PARTS="8b-serve" ...                            # the same for Llama-3.1-8B (about 2 minutes; SERVE_ARGS adds flags)
#   PARTS="moe" bash scripts/device/tp.sh          # one GPU: fused MoE kernel at Mixtral shapes; Qwen3-30B-A3B dummy throughput
# Everything lands in $OUT/work (logs, JSON, written as each step ends), packed into $OUT/work_<parts>.tgz at
# the end, plus $OUT/summary_<parts>.txt.
# The first GPU attempt (2026-11-23, PARTS="tests 8b-latency" under a 360 s call limit) ran out of
# time with nothing returned: give a call at least 9 minutes, and read $OUT/work/*.log.
set -uo pipefail
OUT="${OUT:-$PWD/tp_out}"; mkdir -p "$OUT"
WORK="$OUT/work"; mkdir -p "$WORK"  # under $OUT: what finished comes back even when a call runs out of time
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PARTS="${PARTS:-tests 8b}"
has() { [[ " $PARTS " == *" $1 "* ]]; }
source scripts/device/wait_for_server.sh
M8=benchmarks/configs/llama-3.1-8b
M70=benchmarks/configs/llama-3.1-70b
TOK=/tmp/llama3-tokenizer
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$WORK/install.log" 2>&1 \
  || { tail -40 "$WORK/install.log"; exit 1; }
echo "install: $(( $(date +%s) - start )) s"
TOK=$(bash scripts/device/llama3_tokenizer.sh "$TOK")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$WORK/device.txt"
nvidia-smi topo -m > "$WORK/topo.txt" 2>&1
COMMON=(--load-format dummy --attention-backend triton --max-model-len 2048 --tokenizer "$TOK" --log-level warning)
bench() {  # name, subcommand args...: one `pagoda bench` run under a time limit
  local name=$1; shift
  timeout "${LIMIT:-240}" pagoda bench "$@" "${COMMON[@]}" --result-file "$WORK/$name.json" > "$WORK/$name.log" 2>&1
  echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/$name.json" 2>/dev/null)"
}
if has tests; then  # the GPU tests (NCCL, CUDA graphs capturing the all-reduce, the symmetric-memory path), the killed rank
  timeout "${TESTS_LIMIT:-240}" python3 -m pytest -v --durations=5 -p no:cacheprovider \
    -k "${TESTS_K:-gpu or killed or (matches_transformers and qwen3_moe)}" \
    tests/engine/test_tensor_parallel.py tests/models/test_fused_moe.py tests/models/test_moe_models.py > "$WORK/pytest.log" 2>&1
  echo "tests: exit $?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$WORK/pytest.log" | tail -12
fi
if has 8b; then
  bench tp1_8b_1000x256 throughput "$M8" --num-prompts 1000 --input-len 256 --output-len 256
  bench tp2_8b_1000x256 throughput "$M8" --num-prompts 1000 --input-len 256 --output-len 256 -tp 2
fi
want() { [[ " ${LATENCY:-tp1 tp2 nccl_only ll ll_unfused} " == *" $1 "* ]]; }  # LATENCY: which latency runs
if has 8b || has 8b-latency; then
  LAT=(--batch-sizes 1,32 --input-len 128 --output-len 128 --repeats 2)
  want tp1 && LIMIT=150 bench tp1_8b_latency latency "$M8" "${LAT[@]}"
  want tp2 && LIMIT=150 bench tp2_8b_latency latency "$M8" "${LAT[@]}" -tp 2
  want nccl_only && PAGODA_SYMM_ALL_REDUCE=0 LIMIT=150 bench tp2_8b_latency_nccl_only latency "$M8" "${LAT[@]}" -tp 2
  want ll && PAGODA_SYMM_ALL_REDUCE=ll LIMIT=150 bench tp2_8b_latency_ll latency "$M8" "${LAT[@]}" -tp 2
  want ll_unfused && PAGODA_SYMM_ALL_REDUCE=ll PAGODA_LL_FUSED_NORM=0 LIMIT=150 bench tp2_8b_latency_ll_unfused latency \
    "$M8" "${LAT[@]}" -tp 2
fi
if has costs; then  # the 32 layers' linears at one token with each all-reduce, and the 64 sums alone (about 1 minute)
  timeout 150 python3 scripts/device/tp_costs.py --out "$WORK/tp_costs.json" > "$WORK/tp_costs.log" 2>&1
  echo "tp costs: exit $?"; grep -E '"(tp|nccl|symm|ll)' "$WORK/tp_costs.log"
fi
if has moe; then  # issue 18's GPU figures, on GPU 0 alone
  CUDA_VISIBLE_DEVICES=0 timeout 240 python3 benchmarks/fused_moe.py --out "$WORK/fused_moe.json" > "$WORK/fused_moe.log" 2>&1
  echo "fused moe: exit $?"; cat "$WORK/fused_moe.log" | grep "^M="
  CUDA_VISIBLE_DEVICES=0 LIMIT=300 bench qwen3_30b_a3b_1000x256 throughput benchmarks/configs/qwen3-30b-a3b \
    --num-prompts 1000 --input-len 256 --output-len 256
fi
if has 70b; then
  LIMIT=200 bench tp2_70b_300x256 throughput "$M70" --num-prompts 300 --input-len 256 --output-len 256 -tp 2
  LIMIT=150 bench tp2_70b_latency latency "$M70" --batch-sizes 1,16 --input-len 128 --output-len 128 --repeats 2 -tp 2
fi
serve_tp2() {  # NAME MODEL: pagoda serve -tp 2 (SERVE_ARGS: e.g. a --speculative-config), then pagoda bench serve
  local name=$1 model=$2
  # shellcheck disable=SC2086
  pagoda serve "$model" "${COMMON[@]}" -tp 2 ${SERVE_ARGS:-} --port 8000 --served-model-name llama \
    > "$WORK/server_$name.log" 2>&1 &
  local pid=$!
  if t=$(wait_for_server $pid "$WORK/server_$name.log" 300); then echo "$name serve: server up after ${t} s"; else echo "$name serve: server did not start"; fi
  timeout 60 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 32 --input-len 256 --output-len 16 \
    --ignore-eos --no-progress > "$WORK/serve_${name}_warmup.log" 2>&1
  timeout 150 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 200 --input-len 256 --output-len 256 \
    --ignore-eos --no-progress --result-file "$WORK/serve_${name}_rate_inf.json" > "$WORK/serve_${name}_rate_inf.log" 2>&1
  echo "$name serve rate inf: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/serve_${name}_rate_inf.json" 2>/dev/null)"
  if [ -n "${RATE4:-}" ]; then  # RATE4=1: also 4 requests/s (about 100 s more)
    timeout 100 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 240 --request-rate 4 --input-len 256 \
      --output-len 256 --ignore-eos --no-progress --result-file "$WORK/serve_${name}_rate_4.json" > "$WORK/serve_${name}_rate_4.log" 2>&1
    echo "$name serve rate 4: exit $? $(python3 scripts/device/summarize_bench.py "$WORK/serve_${name}_rate_4.json" 2>/dev/null)"
  fi
  kill -TERM $pid; timeout 60 tail --pid=$pid -f /dev/null; echo "$name serve: server exit (pid $pid gone: $(kill -0 $pid 2>/dev/null && echo no || echo yes))"
}
if has 70b-serve; then serve_tp2 70b "$M70"; fi
if has 8b-serve; then serve_tp2 8b "$M8"; fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$WORK/leftover_procs.txt" 2>&1
part=$(echo "$PARTS" | tr ' ' '_')
for f in "$WORK"/*.json; do [ -f "$f" ] && echo "$(basename "$f" .json): $(python3 scripts/device/summarize_bench.py "$f")"; done > "$OUT/summary_$part.txt"
tar -C "$OUT" -czf "$OUT/work_$part.tgz" work && rm -rf "$WORK"  # one file back (a call returns at most 8)
echo "tp.sh: $(( $(date +%s) - start )) s"
