#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): why the AWQ tiles kernel waits. Builds the plugins,
# then Nsight Compute on gate_up of Llama-3.1-8B at 8 and 16 tokens (one and two token tiles): every
# warp-stall reason per issued instruction, and the SourceCounters section (the SASS lines where warps
# stall most). About 3 minutes.
#   bash scripts/device/awq_stalls.sh
set -uo pipefail
OUT="${OUT:-$PWD/awq_stalls_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton plugins/quant_awq
for m in 8 16; do
  # launch 1 is gate_up's second call (awq_profile.py runs each projection twice, warm-up first)
  timeout 120 ncu --clock-control none -k regex:awq_tiles_gemm --launch-skip 1 --launch-count 1 --section SourceCounters \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 scripts/device/awq_profile.py "$m" > "$OUT/ncu_stalls_m$m.txt" 2>&1
  echo "ncu, $m tokens: exit $?"
  grep -E "stalled_" "$OUT/ncu_stalls_m$m.txt" | awk '{print $NF, $1}' | sort -g -r | head -10
done
