#!/usr/bin/env bash
# On the GPU machine, device call 2 of 2 (tool `run`, carry [".model_parts/part2"]), right after call 1
# (carry [".model_parts/part1"]: mkdir -p /tmp/pagoda_model && cp .model_parts/part1/* /tmp/pagoda_model/)
# on the same warm machine; the parts come from scripts/device/split_model.sh, run here first.
# Reassembles SmolLM2-135M from both parts, checks its sha256, installs the carried wheels, pagoda,
# platform_cuda (builds csrc, ~70 s) and attention_triton, then runs scripts/device/spec_e2e.py -> $OUT.
#   SKIP_INSTALL=1: use the pagoda already importable (CPU try); ARGS: more spec_e2e.py arguments.
set -uo pipefail
OUT="${OUT:-$PWD/spec_e2e_out}"; mkdir -p "$OUT"
STORE="${STORE:-/tmp/pagoda_model}"; PARTS=.model_parts/part2
[ -f "$STORE/gguf.gz.part1" ] || { echo "no $STORE/gguf.gz.part1: this is a fresh machine; run call 1, then this call at once"; exit 2; }
NAME="$(cat "$PARTS/NAME")"
cat "$STORE/gguf.gz.part1" "$PARTS/gguf.gz.part2" | gzip -dc > "$STORE/$NAME" || { echo "gunzip failed"; exit 3; }
SUMS="$(realpath "$PARTS/SHA256")"
(cd "$STORE" && sha256sum -c "$SUMS") | tee "$OUT/sha256.txt" || { echo "sha256 mismatch: split again"; exit 3; }
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if [ -z "${SKIP_INSTALL:-}" ]; then
  rm -rf plugins/*/build plugins/*/*.egg-info
  WHEELS="$PARTS/whl" source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton \
    > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
fi
timeout "${LIMIT:-420}" python3 scripts/device/spec_e2e.py --model "$STORE/$NAME" \
  --attention-backend "${BACKEND:-triton}" --out "$OUT" ${ARGS:-} 2>&1 | grep -v -E "Loading|Capturing|it/s\]" \
  | tee "$OUT/spec_e2e.log"
