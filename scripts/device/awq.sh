#!/usr/bin/env bash
# On the GPU machine, from the repo root, after
#   source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/quant_awq
# (installs it itself when pagoda_quant_awq is missing): AWQ kernel tests (gpu + CPU-side, the nvcc
# compile check included), the int4 vs bf16 linear benchmark (tiles tensor-core kernel, CUDA GEMV,
# Triton, dense paths; a split-K sweep of the tiles kernel), and batch-1 decode latency of dummy
# Llama-3.1-8B, AWQ vs bf16; compute-sanitizer memcheck and racecheck of a small tiles case
# (scripts/device/awq_case.py); `pagoda serve` of the dummy AWQ model with `pagoda bench serve`.
# Results and logs under $OUT; a summary table at the end. Every step runs under `timeout` (typically
# about 8 minutes in all).
#   bash scripts/device/awq.sh
set -uo pipefail
OUT="${OUT:-$PWD/awq_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if ! python3 -c "import pagoda_quant_awq" 2>/dev/null; then
  rm -rf plugins/*/build plugins/*/*.egg-info
  timeout 150 bash -c "source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/quant_awq" \
    > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
fi
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  timeout 30 python3 -c "from pagoda_quant_awq.dispatch import cuda_extension as c, tiles_extension as t; print('awq_gemv kernel:', c() is not None, '| awq_tiles kernels:', t() is not None)"
} 2>&1 | tee "$OUT/device.txt"

if [[ "${TESTS:-1}" == 1 ]]; then  # TESTS=0 skips
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rs --durations=15 plugins/quant_awq/tests > "$OUT/tests.log" 2>&1
  echo "tests: exit $? ($(tail -1 "$OUT/tests.log"))"
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
fi

# SANITIZE=0 skips: compute-sanitizer memcheck and racecheck of the tiles GEMM on a small case
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [[ "${SANITIZE:-1}" == 1 && -n "$SAN" ]]; then
  for tool in memcheck racecheck; do
    timeout 90 "$SAN" --tool "$tool" --kernel-name kns=awq_tiles --error-exitcode 3 python3 scripts/device/awq_case.py \
      > "$OUT/$tool.log" 2>&1
    echo "$tool: exit $? $(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|worst" "$OUT/$tool.log" | tr '\n' ' ')"
  done
fi

# AWQ_DTYPE=float16 times the kernels (and the dense peer) in fp16, AutoAWQ checkpoints' dtype
timeout 150 python3 benchmarks/quant_awq.py --dtype "${AWQ_DTYPE:-bfloat16}" --out "$OUT/quant_awq.json" > "$OUT/bench.log" 2>&1
echo "linear benchmark: exit $?"

# 128 new tokens, best of 4: the step is (time for 128 tokens - time for 1) / 127, so a prefill that
# runs slower in one of the two timings moves it less (32 tokens, best of 2 gave 2.07-2.94 ms for the
# same one-token kernels)
COMMON=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
        --input-len 128 --output-len 128 --repeats 4 --log-level warning)
# the -awq config is the same model with an AWQ quantization_config (group 128): detected, no flag
timeout 60 pagoda bench latency benchmarks/configs/llama-3.1-8b-awq "${COMMON[@]}" --result-file "$OUT/latency_awq.json" > /dev/null 2> "$OUT/latency.log"
echo "latency awq: exit $?"
timeout 60 pagoda bench latency benchmarks/configs/llama-3.1-8b "${COMMON[@]}" --result-file "$OUT/latency_bf16.json" > /dev/null 2>> "$OUT/latency.log"
echo "latency bf16: exit $?"

# SERVE=0 skips: `pagoda serve` of the dummy AWQ model + `pagoda bench serve` (serve_awq.json)
if [[ "${SERVE:-1}" == 1 ]]; then
  source scripts/device/serve_bench.sh
  serve_bench triton serve_awq benchmarks/configs/llama-3.1-8b-awq
fi

python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
bench = load("quant_awq.json")
if bench:
    print("\nint4 (AWQ, g128) vs bf16, Llama-3.1-8B projections, microseconds per call (CUDA graphs)")
    cols = ("bf16", "tiles", "tiles_dense", "cuda", "triton", "dense")
    print(f"{'layer':8s} {'M':>4s} " + " ".join(f"{c:>11s}" for c in cols) + "  best         speedup  tiles GB/s  plan")
    for r in bench["shapes"]:
        cell = lambda k: f"{r[k]:11.1f}" if k in r else f"{'-':>11s}"
        print(f"{r['layer']:8s} {r['m']:4d} " + " ".join(cell(c + "_us") for c in cols)
              + f"  {r['best']:11s}  x{r['speedup']:.2f}  {r.get('tiles_weight_gbps', 0):9.0f}  {r.get('tiles_plan', '')}")
        if "tiles_splits" in r:
            print(f"{'':14s}tiles at forced splits: " + ", ".join(f"{s}: {us:.1f}" for s, us in r["tiles_splits"].items()))
    if "decoder_layer" in bench:
        print("decoder layer (4 projections): " + ", ".join(f"M={r['m']} x{r['speedup_best']:.2f} ({r['best']})"
                                                         for r in bench["decoder_layer"]))
lat = {k: load(f"latency_{k}.json") for k in ("awq", "bf16")}
if all(lat.values()):
    a, b = (lat[k]["steps"][0] for k in ("awq", "bf16"))
    print(f"\nbatch-1 decode step: awq {a['step_ms']:.2f} ms (floor {a['floor_ms']:.2f}), bf16 {b['step_ms']:.2f} ms "
          f"(floor {b['floor_ms']:.2f}); speedup x{b['step_ms'] / a['step_ms']:.2f}; weights "
          f"{lat['awq']['weight_bytes'] / 1e9:.2f} GB vs {lat['bf16']['weight_bytes'] / 1e9:.2f} GB")
PY
# the run tool brings back 8 files: the smaller logs travel in one archive
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f install.log latency.log memcheck.log racecheck.log server.log serve_awq.log)
