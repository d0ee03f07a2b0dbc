#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: one or two weight rows a warp for the dense
# GEMV, measured inside one call (session 19's table with two rows forced came from another machine than
# the one-row table, and cuBLAS's own times moved by up to 10% between them):
#   1. benchmarks/dense_gemv.py at one token with PAGODA_GEMV_ROWS=1 and =2, alternated twice;
#   2. `pagoda bench latency` Llama-3.1-8B batch 1 at TP=1 and TP=2, the rule against two rows forced,
#      alternated PAIRS times (default 2).
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_rows.sh
source scripts/device/begin_cuda.sh gemv_rows
for round in 1 2; do
  for rows in 1 2; do
    PAGODA_GEMV_ROWS=$rows timeout 100 python3 benchmarks/dense_gemv.py --tokens 1 \
      --out "$R/dense_gemv_rows${rows}_r$round.json" > "$R/dense_gemv_rows${rows}_r$round.log" 2>&1
    echo "dense gemv, rows $rows, round $round: exit $?"
    grep -E "M=1 " "$R/dense_gemv_rows${rows}_r$round.log" | grep -E "^8b" | cut -c1-60
    grep -E "decoder layer" "$R/dense_gemv_rows${rows}_r$round.log"
  done
done | tee "$OUT/summary.txt"
for pair in $(seq "${PAIRS:-2}"); do
  for tp in 1 2; do
    for rows in rule 2; do
      name="latency_p${pair}_tp${tp}_rows$rows"
      PAGODA_GEMV_ROWS=$([ "$rows" = 2 ] && echo 2 || echo "") timeout 150 pagoda bench latency \
        benchmarks/configs/llama-3.1-8b "${LAT[@]}" -tp "$tp" --result-file "$R/$name.json" > "$R/$name.log" 2>&1
      echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$R/$name.json" 2>/dev/null)"
    done
  done
done | tee -a "$OUT/summary.txt"
pack_results
