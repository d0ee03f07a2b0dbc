#!/usr/bin/env bash
# THERE (the GPU machine, tool `run`, carry [".vllmN"]): take one part of the vLLM bundle that
# scripts/device/vllm_fetch.sh built; once every part has arrived (the machine keeps /tmp while warm),
# reassemble, check the sha256 sums, install into /tmp/vllm_site and smoke-import vLLM.
#   bash scripts/device/vllm_install.sh .vllm1      # then .vllm2, ... in the next calls (30 s apart at most)
# vLLM then runs with: PYTHONPATH=/tmp/vllm_site (Pagoda's /tmp/site is not needed, nor wanted: its fastapi
# is newer than vLLM allows). A call that finds vLLM installed only re-runs the smoke test.
set -uo pipefail
PARTS_DIR=/tmp/vllm_parts SITE=/tmp/vllm_site
smoke() { PYTHONPATH="$SITE" timeout 240 python3 scripts/device/vllm_smoke.py; }
if [ -f "$SITE/.installed" ]; then echo "vLLM already installed in $SITE"; smoke; exit $?; fi
dir="${1:?usage: vllm_install.sh .vllmN (a carried part folder)}"
[ -f "$dir/MANIFEST" ] && [ -f "$dir/part" ] || { echo "no part in $dir: name it in carry"; exit 2; }
field() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
index=$(field index "$dir/MANIFEST"); count=$(field count "$dir/MANIFEST")
[ "$(sha256sum "$dir/part" | cut -d' ' -f1)" = "$(field part_sha256 "$dir/MANIFEST")" ] \
  || { echo "part $index: sha256 mismatch (transfer broke?): carry $dir again"; exit 1; }
mkdir -p "$PARTS_DIR" && cp "$dir/part" "$PARTS_DIR/part$index" && cp "$dir/MANIFEST" "$PARTS_DIR/MANIFEST$index"
missing=()
for i in $(seq 1 "$count"); do [ -f "$PARTS_DIR/part$i" ] || missing+=(".vllm$i"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "part $index of $count stored in $PARTS_DIR; still to carry (next calls, within 30 s): ${missing[*]}"
  exit 0
fi
for i in $(seq 1 "$count"); do cat "$PARTS_DIR/part$i"; done > /tmp/vllm_bundle.tar.xz
[ "$(sha256sum /tmp/vllm_bundle.tar.xz | cut -d' ' -f1)" = "$(field bundle_sha256 "$PARTS_DIR/MANIFEST1")" ] \
  || { echo "reassembled bundle: sha256 mismatch; parts come from different fetches? rm -rf $PARTS_DIR and carry all again"; exit 1; }
rm -rf /tmp/vllm_bundle "$SITE" && mkdir -p /tmp/vllm_bundle "$SITE"
python3 -c "import tarfile, sys; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2], filter='data')" \
  /tmp/vllm_bundle.tar.xz /tmp/vllm_bundle || { echo "cannot unpack the bundle"; exit 1; }
cp -a /tmp/vllm_bundle/site/. "$SITE/"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" /tmp/vllm_bundle/wheels/*.whl \
  || { echo "pip install of the dependency wheels failed"; exit 1; }
cp /tmp/vllm_bundle/PACKAGES.txt /tmp/vllm_bundle/STRIPPED.txt "$SITE/"
rm -rf /tmp/vllm_bundle /tmp/vllm_bundle.tar.xz "$PARTS_DIR"
touch "$SITE/.installed"
echo "installed vLLM into $SITE ($(du -sh "$SITE" | cut -f1))"
smoke
