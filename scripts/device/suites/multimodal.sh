# Vision-language models on one GPU: CUDA graphs with images (GPU tests), offline throughput with images.
# bench: Qwen2.5-VL-7B's config, dummy weights, 500 prompts of 64 words and one 448x448 image, 128 tokens out
# (benchmarks/multimodal_throughput.py). MODEL: another folder holding config.json and preprocessor_config.json.
ALL_PARTS="tests bench"
DEFAULT_PARTS="tests bench"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)

suite_run() {
  local model=${MODEL:-benchmarks/configs/qwen2.5-vl-7b}
  has_part tests && pytest_step pytest_multimodal 300 -m gpu tests/multimodal
  has_part bench && step throughput_images 480 "$PYTHON" benchmarks/multimodal_throughput.py "$model" \
    --load-format dummy --max-model-len 4096 ${ATTENTION:+--attention-backend "$ATTENTION"} \
    --num-prompts "$(quick 500 8)" --image-size "$(quick 448 112)" --input-len 64 --output-len "$(quick 128 8)" \
    --result-file "$WORK/throughput_images.json"
  return 0
}
