#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]): where a sampled decode step's time goes. Greedy served 57.4
# requests/s against 45.5 sampled at temperature 0.7 with top-p 0.9 (1000 x 256/256, 2026-11-27).
#   1. the sampler's no-sync gpu test (every synchronising call of a mixed sampled step, penalties included);
#   2. profile_decode.py, dummy Llama-3.1-8B at batch 256: greedy, temperature 1.0, temperature 0.7 + top-p 0.9
#      (each kind's exclusive kernel time per step: "sampling" holds softmax, sort, exponential, argmax);
#   3. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256).
# About 6 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/sampled_profile.sh
source scripts/device/begin_cuda.sh sampled_profile
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/sampling/test_sampler.py > "$R/tests.log" 2>&1
echo "sampler gpu tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
grep -E "synchronising calls|^E .*:[0-9]+$" "$R/tests.log" | head -20
for sampling in "" "--temperature 1.0" "--temperature 0.7 --top-p 0.9"; do
  # shellcheck disable=SC2086
  timeout 150 python3 scripts/device/profile_decode.py benchmarks/configs/llama-3.1-8b --batch 256 $sampling \
    --out "$R" > "$R/profile_${#sampling}.log" 2>&1
  echo "profile batch 256 ${sampling:-greedy}: exit $?"
done | tee -a "$OUT/summary.txt"
python3 - "$R" <<'PY' | tee -a "$OUT/summary.txt"
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("profile_tp1_b256*.json")):
    r = json.loads(f.read_text())
    k = r["decode_by_kind"]
    print(f.name, f"T={r['temperature']} top_p={r['top_p']} step {r['step_ms']:.2f} ms", json.dumps(k["exclusive_by_kind_us"]))
PY
gzip -f "$R"/trace_*.json
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
pack_results
