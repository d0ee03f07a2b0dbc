#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15's follow-up: where the paced early reads gained
# (session 31 merged them at 2500 GB/s without a trace). Traces of TP=2 (both ranks) and TP=1, paced (main)
# and with PAGODA_GEMV_PACE=0, plus PAIRS (2) more pairs of the batch-1 step both ways. Read the traces here:
#   python3 scripts/device/layer_timeline.py paced=R/main/rank0*.json.gz off=R/off/rank0*.json.gz
# On an H100 pair (calls for 2 x H200 have got H100s before) it gives the pace's first H100 figures.
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/pace_trace.sh
source scripts/device/begin_cuda.sh pace_trace
declare -A ARM=([main]="" [off]="PAGODA_GEMV_PACE=0")
ab_latency "${PAIRS:-2}" "main off" "main off"
for arm in main off; do rank_waits_arm $arm; rank_waits_arm $arm 1; done
pack_results
