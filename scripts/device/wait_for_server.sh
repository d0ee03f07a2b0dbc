# Sourced by the device scripts that start `pagoda serve` on port 8000 in the background:
#   wait_for_server PID LOG LIMIT  -> prints the seconds until /health answered; returns 1 (and prints
#   the last lines of LOG to stderr) when the server exits or LIMIT seconds pass first.
wait_for_server() {
  local pid=$1 log=$2 limit=$3 t=0
  until curl -sf http://127.0.0.1:8000/health > /dev/null; do
    sleep 2; t=$((t + 2))
    if [ $t -gt "$limit" ] || ! kill -0 "$pid" 2>/dev/null; then tail -20 "$log" >&2; return 1; fi
  done
  echo "$t"
}
