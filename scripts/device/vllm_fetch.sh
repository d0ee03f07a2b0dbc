#!/usr/bin/env bash
# HERE (the CPU machine, with internet): build vLLM 0.26.0 for the lent GPU machine in carry-sized parts.
#
#   bash scripts/device/vllm_fetch.sh            # ~6 minutes on 2 cores (xz), ~320 MB download
#
# What it does (docs: benchmarks/peers/README.md):
#  1. pip download (no deps) vllm==0.26.0 (cp38-abi3, manylinux_2_28_x86_64, built for torch 2.11 + CUDA 13,
#     the torch of the GPU image) and the packages vLLM imports that the GPU image lacks (VLLM_DEPS below,
#     for CPython 3.12 x86-64), into .vllm_dl/.
#  2. unpacks the vLLM wheel and deletes what a dense bf16 Llama on sm90 never loads (STRIP below); each
#     removal is checked against vLLM's own import paths (GUARDS below: the script stops if a guard is gone).
#  3. packs the stripped tree + the dependency wheels as one tar.xz and splits it into parts of at most
#     PART_MB MiB, one part per carry folder: .vllm1/, .vllm2/, ... (each in .git/info/exclude, with a
#     MANIFEST of sha256 sums).
#
# Then, on the GPU machine, back to back (the machine keeps /tmp only while warm: 30 s between calls):
#   1. run(carry=[".vllm1"])         bash scripts/device/vllm_install.sh .vllm1     (and so on for each part but the last)
#   2. run(carry=[".vllm3", ".whl"]) S=$SECONDS; bash scripts/device/vllm_install.sh .vllm3 && bash scripts/device/run.sh --budget $((570 - SECONDS + S)) peers
#   3. run(carry=[".whl"])           bash scripts/device/run.sh peers:serve,serve_vllm_client,prefix
# (the parts install in any order; the last one reassembles, installs into /tmp/vllm_site and smoke-imports;
#  a later call that finds /tmp/vllm_site installed only re-runs the smoke test. benchmarks/peers/README.md.)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PART_MB="${PART_MB:-40}"   # + the tree (under 16 MiB: carry_size.py's TREE_BUDGET_MIB) stays under a call's 64 MiB
DL=.vllm_dl
VLLM=vllm==0.26.0
# Not in the GPU image (KINDS.md "Python packages already there"); versions satisfy vLLM 0.26.0's Requires-Dist.
# Imported when `import vllm`, `from vllm import LLM`, `vllm serve` (build_app) or `vllm bench serve` runs:
VLLM_DEPS=(
  pybase64==1.5.1 msgspec==0.22.0 cbor2==6.3.0 pyzmq==27.3.0 cachetools==8.0.1 blake3==1.0.11
  openai-harmony==0.0.8 llguidance==1.7.6 xgrammar==0.2.7 apache-tvm-ffi==0.1.10   # xgrammar 0.2.8 needs tvm-ffi>=0.1.11; vLLM pins 0.1.10
  partial-json-parser==0.2.1.1.post7 watchfiles==1.3.0 setproctitle==1.3.8
  model-hosting-container-standards==0.1.16 jmespath==1.1.0 prometheus-fastapi-instrumentator==8.1.0
  python-multipart==0.0.34 depyf==0.20.0 astor==0.8.1 dill==0.4.1
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 anyio==4.16.0 idna==3.20   # vllm.entrypoints.llm imports httpx2
  fastapi==0.136.3   # vLLM wants >=0.133,<0.137 (Pagoda's .whl has 0.165: /tmp/vllm_site comes first on vLLM's path)
  # the server stack Pagoda's .whl also carries, so that this bundle stands alone:
  "starlette>=1.0.1,<2" pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection
  uvicorn==0.54.0 openai distro jiter sniffio
)
# Removed from the vLLM wheel (path: why it is never loaded for a dense bf16 Llama on sm90).
STRIP=(
  "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"    # FlashAttention-2: imported in a try; sm90 picks FA3 when FA3 loads
  "vllm/_moe_C_stable_libtorch.abi3.so"        # MoE kernels: imported under contextlib.suppress(ImportError); MoE only
  "vllm/vllm-rs"                               # Rust front end: used only with VLLM_USE_RUST_FRONTEND=1 (default 0)
  "vllm/_flashmla_C.abi3.so"                   # FlashMLA (DeepSeek MLA): imported in a try
  "vllm/_flashmla_extension_C.abi3.so"         # likewise
  "vllm/third_party/fmha_sm100"                # SM100 (Blackwell) sparse attention: MiniMax-M3 only, imported lazily
  "vllm/third_party/deep_gemm/_C.cpython-310-x86_64-linux-gnu.so"   # builds for other Pythons (3.12 one kept)
  "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so"
  "vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so"
  "vllm/third_party/deep_gemm/_C.cpython-314-x86_64-linux-gnu.so"
)
# file|pattern: each removal above stays safe only while vLLM loads the member this way.
GUARDS=(
  "vllm/vllm_flash_attn/flash_attn_interface.py|    from . import _vllm_fa2_C"
  "vllm/vllm_flash_attn/flash_attn_interface.py|    FA2_AVAILABLE = False"
  "vllm/v1/attention/backends/fa_utils.py|device_capability.major == 9 and is_fa_version_supported(3)"
  "vllm/platforms/cuda.py|        with contextlib.suppress(ImportError):"
  "vllm/platforms/cuda.py|            import vllm._moe_C_stable_libtorch"
  "vllm/envs.py|use_rust = bool(int(os.environ.get(\"VLLM_USE_RUST_FRONTEND\", \"0\")))"
  "vllm/v1/attention/ops/flashmla.py|        import vllm._flashmla_C"
  "vllm/models/minimax_m3/nvidia/sparse_attention_msa.py|            from vllm.third_party.fmha_sm100"
)

for d in "$DL" .vllm_stage; do grep -qx "/$d/" "$(git rev-parse --git-path info/exclude)" || echo "/$d/" >> "$(git rev-parse --git-path info/exclude)"; done
mkdir -p "$DL/deps"
platforms=(--platform any --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for n in 5 17 24 26 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
pipdl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" "$@"; }
pipdl -d "$DL" "$VLLM"
pipdl -d "$DL/deps" "${VLLM_DEPS[@]}"

rm -rf .vllm_stage && mkdir -p .vllm_stage/site .vllm_stage/wheels
python3 -m zipfile -e "$DL"/vllm-0.26.0-*.whl .vllm_stage/site
for guard in "${GUARDS[@]}"; do
  file=${guard%%|*}; pattern=${guard#*|}
  grep -qF -- "$pattern" ".vllm_stage/site/$file" || { echo "guard gone: '$pattern' not in $file: re-check STRIP" >&2; exit 1; }
done
: > .vllm_stage/STRIPPED.txt
for member in "${STRIP[@]}"; do
  [ -e ".vllm_stage/site/$member" ] || { echo "nothing to strip at $member: re-check STRIP for this version" >&2; exit 1; }
  (cd .vllm_stage/site && du -sb "$member") >> .vllm_stage/STRIPPED.txt
  rm -rf ".vllm_stage/site/$member"
done
cp "$DL"/deps/*.whl .vllm_stage/wheels/
echo "$VLLM ${VLLM_DEPS[*]}" > .vllm_stage/PACKAGES.txt
tar -C .vllm_stage -cf - site wheels STRIPPED.txt PACKAGES.txt | xz -6 -T0 > "$DL/bundle.tar.xz"

rm -rf .vllm[0-9]*
split -b "${PART_MB}M" -d -a 1 "$DL/bundle.tar.xz" "$DL/bundle.part"
parts=("$DL"/bundle.part*)
total_sha=$(sha256sum "$DL/bundle.tar.xz" | cut -d' ' -f1)
for i in "${!parts[@]}"; do
  dir=".vllm$((i + 1))"
  grep -qx "/$dir/" "$(git rev-parse --git-path info/exclude)" || echo "/$dir/" >> "$(git rev-parse --git-path info/exclude)"
  mkdir -p "$dir" && mv "${parts[$i]}" "$dir/part"
  printf 'index %d\ncount %d\npart_sha256 %s\nbundle_sha256 %s\n' "$((i + 1))" "${#parts[@]}" \
    "$(sha256sum "$dir/part" | cut -d' ' -f1)" "$total_sha" > "$dir/MANIFEST"
done
rm -rf .vllm_stage
du -sh .vllm[0-9]* "$DL/bundle.tar.xz"
echo "carry each .vllmN in its own call: bash scripts/device/vllm_install.sh .vllmN"
# the last part travels with .whl (the recipe's call that installs it also runs the suite): check that it fits
last=".vllm${#parts[@]}"
python3 scripts/device/carry_size.py "$last" .whl || echo "$last and .whl do not fit one call: install $last alone, then run the suite in a call carrying .whl" >&2
