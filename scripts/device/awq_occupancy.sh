#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), about 5 minutes: the AWQ tiles kernel for 1-8
# tokens with two 256-thread blocks per SM (main) and with three (__launch_bounds__ min blocks 3 for
# one token tile: <= 80 registers, no spills at groups 32 and 128), same machine, the split sweep at
# M=1 included. The variant is built from a patched copy of csrc on the GPU machine only.
# Results: $OUT/blocks2.json, $OUT/blocks3.json, summary.txt.
set -uo pipefail
OUT="${OUT:-$PWD/awq_occupancy_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/quant_awq > "$OUT/install.log" 2>&1 \
  || { tail -40 "$OUT/install.log"; exit 1; }
timeout 100 python3 benchmarks/quant_awq.py --kernels tiles --tokens 1,4,8 --out "$OUT/blocks2.json" > "$OUT/blocks2.log" 2>&1
say "2 blocks per SM: exit $?"; grep -E "M=|^[0-9]" "$OUT/blocks2.log" | tee -a "$OUT/summary.txt"
sed -i 's/static constexpr int kMinBlocks = NT <= 2 ? 2 : 1;/static constexpr int kMinBlocks = NT == 1 ? 3 : NT <= 2 ? 2 : 1;/' \
  csrc/kernels/awq_tiles.cu
grep -q "NT == 1 ? 3" csrc/kernels/awq_tiles.cu || { say "patch failed"; exit 1; }
rm -rf plugins/platform_cuda/build plugins/platform_cuda/*.egg-info
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site3 ./plugins/platform_cuda \
  > "$OUT/install3.log" 2>&1 || { tail -30 "$OUT/install3.log"; exit 1; }
PYTHONPATH="/tmp/site3:$PYTHONPATH" timeout 100 python3 benchmarks/quant_awq.py --kernels tiles --tokens 1,4,8 \
  --out "$OUT/blocks3.json" > "$OUT/blocks3.log" 2>&1
say "3 blocks per SM: exit $?"; grep -E "M=|^[0-9]" "$OUT/blocks3.log" | tee -a "$OUT/summary.txt"
git checkout csrc/kernels/awq_tiles.cu 2>/dev/null
