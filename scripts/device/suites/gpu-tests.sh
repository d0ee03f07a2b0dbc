# Every gpu-marked test of core and the plugins on one GPU (a test whose kernels did not build fails, not skips).
# Tests of two GPUs skip on one (the tp suite runs them on two). TESTS="PATH ..." replaces the paths.
ALL_PARTS="core plugins"
DEFAULT_PARTS="core plugins"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash plugins/quant_fp8 plugins/quant_awq)

suite_run() {
  local paths=() path
  has_part core && paths+=(tests)
  has_part plugins && paths+=(plugins/platform_cuda/tests plugins/attention_triton/tests plugins/attention_flash/tests
                               plugins/quant_fp8/tests plugins/quant_awq/tests)
  # the guided tests build tiny models on SmolLM2's vocabulary: its tokenizer travels as .smollm_tok (prepare.sh)
  [ -d .smollm_tok ] && export PAGODA_SMOLLM_TOKENIZER=$PWD/.smollm_tok
  for path in ${TESTS:-${paths[@]}}; do
    pytest_step "pytest_$(echo "$path" | tr '/.' '__')" 300 -m gpu "$path"
  done
}
