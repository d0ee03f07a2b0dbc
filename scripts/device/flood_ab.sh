#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: session 28 found four warps a row shrink the GEMV's
# early-read flood (a warp requests at most two blocks of its share before the wait), and the LL sums and
# attention it overlaps end 2.3-2.9 us a layer sooner (benchmarks/results/h200x2_2026-11-28_round28/). Two
# floods are left: a TP=2 rank's o projection (4096 x 2048), which the tune keeps at one warp of two rows
# (its whole 16.8 MB requested during attention), and every one-warp-a-row shape. Arms, in one build:
#   tuned (main); o4: that o on four warps a row (PAGODA_GEMV_BY_SHAPE=4096x2048:4/1);
#   preload1: one block before the wait, not two (PAGODA_GEMV_PRELOAD=1), on top of the tuned split.
#   1. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds: TP=2 every arm, TP=1 tuned and preload1;
#   2. (PROFILE=1, the default) rank_waits.py with ARM_PROFILE (o4): both ranks' kernel tables.
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/flood_ab.sh
source scripts/device/begin_cuda.sh flood_ab
declare -A ARM=([tuned]="" [o4]="PAGODA_GEMV_BY_SHAPE=4096x2048:4/1" [preload1]="PAGODA_GEMV_PRELOAD=1")
ab_latency "${PAIRS:-2}" "tuned o4 preload1" "tuned preload1"
[ "${PROFILE:-1}" = 1 ] && rank_waits_arm "${ARM_PROFILE:-o4}"
pack_results
