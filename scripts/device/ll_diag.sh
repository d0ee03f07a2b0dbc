#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]): why test_tp2_on_two_gpus_with_graphs_equals_tp1[ll] hung after [1]
# (run 2026-11-27): [ll] alone in a fresh process, then [ll] followed by [1] in one process, then the LL
# kernel's own check (torchrun). Every process dumps its stacks after PAGODA_HANG_DUMP_S seconds. -> $OUT
set -uo pipefail
OUT="${OUT:-$PWD/ll_diag_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton; echo "install: ${SECONDS} s"
T=tests/engine/test_tensor_parallel.py
case_() {  # NAME LIMIT NODE...
  local name=$1 limit=$2; shift 2
  PYTHONPATH="scripts/device/hang_dump:$PYTHONPATH" PAGODA_HANG_DUMP_S=$((limit - 15)) timeout "$limit" \
    python3 -m pytest -v -s -p no:cacheprovider "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(grep -cE 'PASSED' "$OUT/$name.log") passed, $(grep -cE 'FAILED|ERROR' "$OUT/$name.log") failed"
}
case_ ll_alone 110 "$T::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]"
case_ ll_then_symm 130 "$T::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]" "$T::test_tp2_on_two_gpus_with_graphs_equals_tp1[1]"
case_ sums_ll 100 "$T::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll]"
echo "total ${SECONDS} s"
