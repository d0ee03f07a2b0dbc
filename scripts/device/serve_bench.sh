# Sourced by device scripts: serve_bench BACKEND NAME [CONFIG] starts `pagoda serve` on dummy Llama-3.1-8B
# (or the model config folder CONFIG, e.g. benchmarks/configs/llama-3.1-8b-awq) with attention BACKEND
# (Llama 3's tokenizer from .whl/extra), warms it up, runs `pagoda bench serve` (500 x 256/256, all at
# once) into $OUT/NAME.json, prints the summary and the /metrics counters, and
# stops the server. The server's log: $OUT/server.log.
source scripts/device/wait_for_server.sh
serve_bench() {
  local backend=$1 name=$2 config=${3:-benchmarks/configs/llama-3.1-8b} tok pid t
  tok=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
  pagoda serve "$config" --load-format dummy --attention-backend "$backend" --max-model-len 2048 \
    --tokenizer "$tok" --log-level warning --port 8000 --served-model-name llama > "$OUT/server.log" 2>&1 &
  pid=$!
  if t=$(wait_for_server $pid "$OUT/server.log" 200); then echo "serve ($backend): up after ${t} s"; else echo "serve ($backend): did not start"; fi
  timeout 60 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 64 --input-len 256 --output-len 16 \
    --ignore-eos --no-progress --seed 1 > /dev/null 2>&1  # warm-up: other prompts than the timed run's (seed 0)
  timeout 150 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 500 --input-len 256 --output-len 256 \
    --ignore-eos --no-progress --result-file "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "bench serve ($backend, 500 x 256/256): exit $? $(python3 scripts/device/summarize_bench.py "$OUT/$name.json" 2>/dev/null)"
  curl -s http://127.0.0.1:8000/metrics | grep -E "^pagoda:(request_success_total|generation_tokens_total)"
  kill -TERM $pid; timeout 60 tail --pid=$pid -f /dev/null
}
