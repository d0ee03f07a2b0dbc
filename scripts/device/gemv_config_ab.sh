#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: session 27's per-layer breakdown
# (benchmarks/results/h200x2_2026-11-28_round27/, layer_breakdown.py) has a TP=2 rank's gate_up and down
# GEMVs 1.6 and 1.9 us longer than half of TP=1's (the same block count with half the bytes a block at
# gate_up; half the chunks a warp at down), 3.5 us a layer that perfect scaling would not pay: the biggest
# TP-specific lever left. The traces' grids: TP=1's down runs one row a warp (split 2, bounded: four blocks an
# SM), a TP=2 rank's down two rows a warp (the tune's choice for 4096 x 7168, timed alone: 122 registers, two
# blocks an SM); gate_up one row at both sizes (1792 blocks at TP=2, 3.4 waves). Their configuration in the
# model, arms in one build, forced for every GEMV shape:
#   base (tuned rows, the split rule); rows2 / rows1 (PAGODA_GEMV_ROWS); split1 / split4 (PAGODA_GEMV_SPLIT);
#   down1: only a TP=2 rank's down (4096 x 7168) on one row a warp (PAGODA_GEMV_BY_SHAPE), as TP=1's.
#   1. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (1) rounds: TP=2 every arm, TP=1 base
#      and rows2;
#   2. (PROFILE=1, the default) rank_waits.py with ARM_PROFILE (rows2): both ranks' kernel tables.
# About 7 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_config_ab.sh
source scripts/device/begin_cuda.sh gemv_config_ab
declare -A ARM=([base]="" [rows2]="PAGODA_GEMV_ROWS=2" [rows1]="PAGODA_GEMV_ROWS=1" [split1]="PAGODA_GEMV_SPLIT=1"
                [split4]="PAGODA_GEMV_SPLIT=4" [down1]="PAGODA_GEMV_BY_SHAPE=4096x7168:0/1")
ab_latency "${PAIRS:-1}" "base rows2 rows1 split1 split4 down1" "base rows2"
[ "${PROFILE:-1}" = 1 ] && rank_waits_arm "${ARM_PROFILE:-rows2}"
pack_results
