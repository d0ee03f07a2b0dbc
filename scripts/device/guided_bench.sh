#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): guided (JSON schema) vs unguided decoding
# throughput on dummy Llama-3.1-8B weights with Llama 3's real 128k tokenizer (Triton attention,
# CUDA graphs), batch 64 x 256 tokens, plus a batch-16 point. Results land in $OUT.
set -uo pipefail
OUT="${OUT:-$PWD/guided_bench_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$OUT/install.log" 2>&1 \
  || { tail -40 "$OUT/install.log"; exit 1; }
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
COMMON=(benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" --attention-backend triton
        --max-model-len 2048)
for shape in ${SHAPES:-64:256 16:256}; do
  batch=${shape%%:*}; len=${shape##*:}
  timeout "${LIMIT:-280}" python3 benchmarks/guided_decoding.py "${COMMON[@]}" --batch-size "$batch" --output-len "$len" \
    --repeats 3 --result-file "$OUT/guided_b${batch}_n${len}.json" > "$OUT/guided_b${batch}_n${len}.log" 2>&1
  echo "batch $batch x $len: exit $?"; tail -25 "$OUT/guided_b${batch}_n${len}.log"
done
