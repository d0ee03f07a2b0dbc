#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl", ".smollm_tok"]): where the AWQ tiles kernel and the
# flash decode kernel lose time, and guided decoding's throughput, in one call (about 6 minutes):
#   ncu_awq_m1.txt, ncu_awq_m16.txt   Nsight Compute sections of the tiles kernel, 4 projections
#   flash_splits.json/.log            flash decode GB/s against the split count (triton for reference)
#   ncu_flash.txt                     Nsight Compute sections of the decode kernel, b64 x 4k and b1 x 32k
#   guided_b64_n256.json              guided vs unguided throughput, batch 64 (real Llama 3 tokenizer)
#   guided_tests.log                  tests/guided on the GPU (SmolLM2's tokenizer carried)
set -uo pipefail
OUT="${OUT:-$PWD/profile_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash \
  plugins/quant_awq > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
echo "install: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats
          --section WarpStateStats --section MemoryWorkloadAnalysis)
NCU=(ncu --clock-control none "${SECTIONS[@]}")
for m in 1 16; do
  timeout 120 "${NCU[@]}" -k regex:awq_tiles_gemm --launch-count 8 python3 scripts/device/awq_profile.py $m \
    > "$OUT/ncu_awq_m$m.txt" 2>&1
  echo "ncu awq m=$m: exit $?"
done
timeout 150 python3 scripts/device/flash_splits.py --out "$OUT/flash_splits.json" > "$OUT/flash_splits.log" 2>&1
echo "flash splits: exit $?"; cat "$OUT/flash_splits.log"
{ timeout 60 "${NCU[@]}" -k regex:flash_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 scripts/device/flash_splits.py --once 64 4096 1
  timeout 60 "${NCU[@]}" -k regex:flash_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 scripts/device/flash_splits.py --once 1 32768 32; } > "$OUT/ncu_flash.txt" 2>&1
echo "ncu flash: exit $?"
TOK=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
timeout 200 python3 benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy --tokenizer "$TOK" \
  --attention-backend triton --max-model-len 2048 --batch-size 64 --output-len 256 --repeats 3 \
  --result-file "$OUT/guided_b64_n256.json" > "$OUT/guided.log" 2>&1
echo "guided: exit $?"; grep -E '_tokens_per_s"|ratio' "$OUT/guided_b64_n256.json"
PAGODA_SMOLLM_TOKENIZER=$PWD/.smollm_tok timeout 150 python3 -m pytest -q -p no:cacheprovider tests/guided \
  > "$OUT/guided_tests.log" 2>&1
echo "guided tests: exit $? ($(tail -1 "$OUT/guided_tests.log"))"
echo "total: $(( $(date +%s) - start )) s"
