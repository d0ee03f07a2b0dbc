#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): where guided decoding's time goes, and guided
# (JSON schema) vs unguided throughput on dummy Llama-3.1-8B weights with Llama 3's real 128k
# tokenizer (Triton attention, CUDA graphs). Writes 4 files to $OUT (the tool returns at most 8):
#   breakdown.jsonl        one JSON line per path: the grammar phases of one step at batch 64 x 128k
#                          without a model (benchmarks/guided_breakdown.py), host ms per phase (median
#                          and mean) and the masking's device ms. legacy: the path before the bitmask
#                          work; caps: the torch masking; triton: the engine's path (fill on one thread,
#                          xgrammar's threads after a slow batch); xgrammar8: every batch filled by
#                          xgrammar's 8 threads (the previous path's fill); hidden: the engine's path
#                          with 2.5 ms of Python on the engine's thread between a fill's start and
#                          its mask (job_wait: what of the fill that did not hide)
#   guided_b64_n256.json   tokens/s of unguided, guided_json and guided_serial (the path before the
#                          grammar worker thread: the bitmask filled in the launch by xgrammar's
#                          threads), alternating in one process, and per_step_ms: forward and
#                          sampling device time, step and launch host time, waits for tokens, the
#                          grammar phases (start in the launch, fill on the worker thread,
#                          sample_later / job_wait when the next launch queues the sampling)
#   summary.txt            GPU, CPUs, the lines above in short
#   logs.tgz               every log
# SHAPES="64:256 16:256" adds a batch-16 point (about 2 more minutes). About 6-7 minutes on an H100.
set -uo pipefail
OUT="${OUT:-$PWD/guided_bench_out}"; mkdir -p "$OUT"
LOGS=/tmp/guided_bench_logs; mkdir -p "$LOGS"
trap 'tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$LOGS/install.log" 2>&1 \
  || { tail -40 "$LOGS/install.log"; exit 1; }
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
say "nproc $(nproc), online CPUs $(getconf _NPROCESSORS_ONLN), cgroup cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)," \
    "$(python3 -c 'import os, torch; print("affinity", len(os.sched_getaffinity(0)), "torch threads", torch.get_num_threads())' 2>&1)"
for variant in legacy caps triton xgrammar8 hidden; do
  case $variant in legacy) flags=--legacy;; caps) flags="--apply caps";; triton) flags="--apply auto";;
    xgrammar8) flags="--apply auto --fill xgrammar:8";; hidden) flags="--apply auto --host-work-ms 2.5";; esac
  timeout 100 python3 benchmarks/guided_breakdown.py --tokenizer "$TOK" --batch-size 64 --steps 200 $flags \
    --result-file "$LOGS/breakdown_$variant.json" > "$LOGS/breakdown_$variant.log" 2>&1
  say "breakdown $variant: exit $?"
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d.pop('sample_output', None); print(json.dumps(d))" \
    "$LOGS/breakdown_$variant.json" 2>/dev/null | tee -a "$OUT/breakdown.jsonl" | tee -a "$OUT/summary.txt" \
    || tail -20 "$LOGS/breakdown_$variant.log"
done
COMMON=(benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" --attention-backend triton
        --max-model-len 2048)
for shape in ${SHAPES:-64:256}; do
  batch=${shape%%:*}; len=${shape##*:}
  timeout "${LIMIT:-300}" python3 benchmarks/guided_decoding.py "${COMMON[@]}" --batch-size "$batch" --output-len "$len" \
    --repeats 3 --serial --breakdown --result-file "$OUT/guided_b${batch}_n${len}.json" > "$LOGS/guided_b${batch}_n${len}.log" 2>&1
  say "batch $batch x $len: exit $?"
  grep -E '_tokens_per_s"|ratio|wall_per_step|forward_(device_)?ms|(step|launch)_(mean_)?ms|wait_ms|sample_device_ms|(advance|start|fill|job_wait|sample_later|apply|mask)(_device|_mean)?_ms|^    "[a-z_]+": \{' \
    "$OUT/guided_b${batch}_n${len}.json" 2>/dev/null | tee -a "$OUT/summary.txt" || tail -30 "$LOGS/guided_b${batch}_n${len}.log"
done
