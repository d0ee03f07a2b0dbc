#!/usr/bin/env bash
# The device driver: named suites of GPU tests and benchmarks, each written in one layout.
#
#   bash scripts/device/run.sh [OPTIONS] SUITE[:PART,PART...] [SUITE...]
#   bash scripts/device/run.sh --list              the suites and their parts
#   bash scripts/device/run.sh --dry-run e2e       what would run, without running it
#
# Each suite writes $OUT/<suite>/ (OUT defaults to ./device_out):
#   env.txt       the GPUs, driver, CUDA, torch, triton, transformers, the commit, the parts
#   results.json  every step: its command, exit status, seconds, headline and result (the JSON of
#                 `pagoda bench` / the kernel benchmarks / the peers harness, or pytest's counts)
#   logs.tgz      every step's log and raw result file
# On the GPU machine (benchmarks/README.md): carry .whl (scripts/device/prepare.sh wheels, here, first);
# pagoda and the suites' plugins are built from this tree into /tmp/site once per machine and sources.
# Options (or the environment variables in brackets):
#   --quick         small workloads: a smoke run of the pipeline, not figures (QUICK=1)
#   --budget S      seconds for the whole run, suites included (BUDGET_S, default 570: a 10-minute call)
#   --no-install    run in the current environment, as on a CPU machine (INSTALL=0)
# Suites read MODEL (a config folder, dummy weights), TOKENIZER, ATTENTION (an --attention-backend), DRAFT,
# COMMIT (recorded in env.txt where there is no .git), TESTS (gpu-tests' paths), PEERS_FLAGS, KERNEL_FLAGS.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
source scripts/device/lib.sh
SUITES_DIR=scripts/device/suites

suite_names() { for f in "$SUITES_DIR"/*.sh; do basename "$f" .sh; done; }

# suite_info NAME: its description (the file's first line), all its parts, its default parts.
suite_info() {
  (source "$SUITES_DIR/$1.sh" && echo "$(sed -n 1p "$SUITES_DIR/$1.sh" | sed 's/^# //')|$ALL_PARTS|$DEFAULT_PARTS")
}

list_suites() {
  local name info
  for name in $(suite_names); do
    info=$(suite_info "$name")
    IFS='|' read -r doc all default <<< "$info"
    printf '%-10s %s\n%-10s parts: %s (default: %s)\n' "$name" "$doc" "" "$all" "$default"
  done
}

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; }

# run_suite NAME PARTS: one suite in a subshell (its variables and functions stay its own).
run_suite() (
  SUITE=$1 PARTS=$2 DIR="$OUT/$1" WORK="/tmp/device_work/$1"
  source "$SUITES_DIR/$SUITE.sh"
  echo "== $SUITE: $PARTS"
  [ "$DRY_RUN" = 1 ] && { suite_run; exit 0; }
  rm -rf "$WORK" "$DIR" && mkdir -p "$WORK" "$DIR"
  write_env "$DIR/env.txt"
  trap 'serve_stop; cp /tmp/pagoda_install.log "$WORK/" 2> /dev/null; tar -czf "$DIR/logs.tgz" -C "$WORK" .' EXIT
  suite_run
  "$PYTHON" scripts/device/collect.py results "$WORK" "$SUITE" "$DIR/results.json" > /dev/null
)

# parse_suite SPEC: NAME and its parts from NAME[:PART,...], checked against the suite's own parts.
parse_suite() {
  local name=${1%%:*} parts="" info all default part
  [ -f "$SUITES_DIR/$name.sh" ] || { echo "unknown suite '$name'; suites: $(suite_names | tr '\n' ' ')" >&2; return 2; }
  IFS='|' read -r _ all default <<< "$(suite_info "$name")"
  [[ "$1" == *:* ]] && parts=$(echo "${1#*:}" | tr ',' ' ')
  for part in $parts; do
    [[ " $all " == *" $part "* ]] || { echo "suite $name has no part '$part'; its parts: $all" >&2; return 2; }
  done
  echo "$name|${parts:-$default}"
}

main() {
  DRY_RUN=0 QUICK=${QUICK:-0} BUDGET_S=${BUDGET_S:-570} OUT=${OUT:-$PWD/device_out}
  local specs=() spec
  while [ $# -gt 0 ]; do
    case $1 in
      --list) list_suites; return 0 ;;
      --dry-run) DRY_RUN=1 ;;
      --quick) QUICK=1 ;;
      --budget) BUDGET_S=$2; shift ;;
      --no-install) INSTALL=0 ;;
      -h|--help) usage; return 0 ;;
      -*) echo "unknown option $1 (see --help)" >&2; return 2 ;;
      *) specs+=("$(parse_suite "$1")") || return 2 ;;
    esac
    shift
  done
  [ ${#specs[@]} -gt 0 ] || { usage; echo; list_suites; return 2; }
  DEADLINE=$(($(date +%s) + BUDGET_S))
  export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  export DRY_RUN QUICK DEADLINE OUT INSTALL
  local plugins=()
  for spec in "${specs[@]}"; do plugins+=($(source "$SUITES_DIR/${spec%%|*}.sh" && echo "${PLUGINS[@]}")); done
  install $(printf '%s\n' "${plugins[@]}" | sort -u) || return 1
  local rc=0
  for spec in "${specs[@]}"; do run_suite "${spec%%|*}" "${spec#*|}" || rc=1; done
  [ "$DRY_RUN" = 1 ] && return 0
  echo "== summary (exit 1 if a step failed)"
  for spec in "${specs[@]}"; do
    "$PYTHON" scripts/device/collect.py results "/tmp/device_work/${spec%%|*}" "${spec%%|*}" "$OUT/${spec%%|*}/results.json" \
      || rc=1
  done
  return $rc
}

main "$@"
