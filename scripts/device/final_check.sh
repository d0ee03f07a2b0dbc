#!/usr/bin/env bash
# On the GPU machine (carry [".whl"]), one call of about 8 minutes: end-to-end flash vs triton
# (300 x 1024/128, the flash split model), guided JSON vs unguided at batch 64 (threaded fill vs
# the serial path), and the guided/overlap tests on the GPU. Results under $OUT.
set -uo pipefail
OUT="${OUT:-$PWD/final_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if ! python3 -c "import pagoda_attention_flash" 2>/dev/null; then
  rm -rf plugins/*/build plugins/*/*.egg-info
  source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash \
    > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
fi
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
for backend in flash triton; do
  timeout 100 pagoda bench throughput benchmarks/configs/llama-3.1-8b --load-format dummy --attention-backend "$backend" --max-model-len 2048 \
    --num-prompts 300 --input-len 1024 --output-len 128 --log-level warning \
    --result-file "$OUT/throughput_$backend.json" > "$OUT/throughput_$backend.log" 2>&1
  echo "$backend: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/throughput_$backend.json" 2>/dev/null)"
done
timeout 240 python3 benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" \
  --attention-backend triton --max-model-len 2048 --batch-size 64 --output-len 256 --repeats 2 --serial --breakdown \
  --result-file "$OUT/guided_b64_n256.json" > "$OUT/guided.log" 2>&1
echo "guided: exit $?"
grep -E '_tokens_per_s"|ratio|launch_ms|job_wait_ms|fill_ms' "$OUT/guided_b64_n256.json" | head -20
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/guided tests/engine/test_overlap.py > "$OUT/tests.log" 2>&1
echo "tests: exit $? ($(tail -1 "$OUT/tests.log"))"
