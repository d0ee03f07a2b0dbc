"""--kv-cache-dtype fp8 end to end on CPU (torch backend): the prompt logprobs stay within a stated bound
of a float32 cache, the same KV memory holds twice the blocks of a bf16 cache, the checkpoint's k_scale /
v_scale are loaded, and --calculate-kv-scales calibrates them on the first step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pagoda import LLM, SamplingParams
from pagoda.errors import ModelLoadError
from pagoda.layers.attention import Attention
from tiny_models import make_tiny_model, random_prompts

# Largest |logprob difference| of any prompt token against a float32 cache, and the mean over tokens, on the
# tiny Llama (measured: e4m3 0.084 / 0.016, calibrated 0.059 / 0.017; e5m2 0.098 / 0.029, calibrated 0.18 / 0.036)
BOUNDS = {"fp8": (0.15, 0.03), "fp8_e5m2": (0.3, 0.06)}
PROMPTS = random_prompts(6, range(20, 60), seed=3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-llama-fp8kv")
    make_tiny_model(path, "llama")
    return str(path)


def engine(model: str, **kwargs) -> LLM:
    return LLM(model, skip_tokenizer_init=True, max_num_seqs=4, max_num_batched_tokens=32,
               **{"kv_cache_memory": 1 << 20, "attention_backend": "torch", **kwargs})


def prompt_logprobs(llm: LLM) -> torch.Tensor:
    """The logprob of every prompt token after the first, prompts chunked by 32 tokens (later chunks read the cache)."""
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], SamplingParams(max_tokens=1, prompt_logprobs=0),
                        use_tqdm=False)
    return torch.tensor([lp[tok].logprob for o, p in zip(outs, PROMPTS) for tok, lp in zip(p[1:], o.prompt_logprobs[1:])])


def attention_layers(llm: LLM) -> list[Attention]:
    return [m for m in llm.engine.core.runner.model.modules() if isinstance(m, Attention)]


@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("calibrate", [False, True], ids=["scales-1", "calibrated"])
def test_logprobs_stay_within_the_bound_of_a_float32_cache(tiny: str, kv_dtype: str, calibrate: bool) -> None:
    exact = prompt_logprobs(engine(tiny))
    diff = (prompt_logprobs(engine(tiny, kv_cache_dtype=kv_dtype, calculate_kv_scales=calibrate)) - exact).abs()
    worst, mean = BOUNDS[kv_dtype]
    assert diff.max() < worst and diff.mean() < mean
    assert diff.max() > 0  # the cache really is quantized


def test_the_same_memory_holds_twice_the_blocks_of_a_bf16_cache(tiny: str) -> None:
    def blocks(**kwargs) -> int:
        return engine(tiny, dtype="bfloat16", kv_cache_memory=64 * 1024, **kwargs).engine.core.kv_cache.num_blocks

    assert blocks(kv_cache_dtype="fp8") == 2 * blocks() == 32  # 2 layers x 2 x 16 tokens x 2 heads x 16 dims


def test_calibration_maps_the_first_steps_largest_key_to_half_the_range(tiny: str) -> None:
    llm = engine(tiny, kv_cache_dtype="fp8", calculate_kv_scales=True)
    llm.generate([{"prompt_token_ids": PROMPTS[0]}], SamplingParams(max_tokens=1), use_tqdm=False)
    for layer, cache in zip(attention_layers(llm), llm.engine.core.runner.kv_caches):
        assert layer.kv_scales.k_scale.item() not in (0.0, 1.0) and not layer.kv_scales.calibrating
        assert cache[0].float().abs().max().item() == 224.0  # 448 / CALIBRATION_HEADROOM
        assert cache[1].float().abs().max().item() == 224.0


def test_calculate_kv_scales_needs_an_fp8_cache(tiny: str) -> None:
    with pytest.raises(ValueError, match="calculate_kv_scales calibrates the scales of an FP8 KV cache"):
        engine(tiny, calculate_kv_scales=True)


def with_scales(tiny: str, folder: Path, scales: dict[str, torch.Tensor]) -> str:
    """A copy of the tiny checkpoint with extra tensors (KV cache scales)."""
    for f in Path(tiny).iterdir():
        if f.suffix != ".safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    tensors = load_file(str(Path(tiny) / "model.safetensors"))
    save_file({**tensors, **scales}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return str(folder)


def test_checkpoint_scales_are_loaded_in_each_naming(tiny: str, tmp_path: Path) -> None:
    scales = {"model.layers.0.self_attn.k_scale": torch.tensor(0.25), "model.layers.0.self_attn.v_scale": torch.tensor([0.5]),
              "model.layers.1.self_attn.k_proj.output_scale": torch.tensor(2.0),
              "model.layers.1.self_attn.v_proj.v_scale": torch.tensor(4.0)}
    llm = engine(with_scales(tiny, tmp_path, scales), kv_cache_dtype="fp8")
    loaded = [(a.kv_scales.k_scale.item(), a.kv_scales.v_scale.item()) for a in attention_layers(llm)]
    assert loaded == [(0.25, 0.5), (2.0, 4.0)]
    exact = prompt_logprobs(engine(tiny))
    assert (prompt_logprobs(llm) - exact).abs().max() < BOUNDS["fp8"][0]  # scales used on write and read
    ignored = engine(with_scales(tiny, tmp_path, scales))  # a bf16/fp32 cache keeps them unused
    assert torch.equal(prompt_logprobs(ignored), exact)


def test_a_per_head_scale_is_refused(tiny: str, tmp_path: Path) -> None:
    bad = with_scales(tiny, tmp_path, {"model.layers.0.self_attn.k_scale": torch.ones(2)})
    with pytest.raises(ModelLoadError, match=r"k_scale must hold one per-tensor scale, not a tensor of shape \[2\]"):
        engine(bad, kv_cache_dtype="fp8")


@pytest.fixture(scope="module")
def tiny_head64(tmp_path_factory) -> str:
    """A tiny bf16 Llama whose heads the GPU kernels take (head size 64; flash: 64, 128 or 256)."""
    import transformers

    from tiny_models import VOCAB, save_word_tokenizer

    path = tmp_path_factory.mktemp("tiny-llama-head64")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    model.save_pretrained(path)
    save_word_tokenizer(path)
    return str(path)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("backend", ["flash", "triton"])
def test_gpu_backends_stay_within_the_bound_of_a_bf16_cache(tiny_head64: str, backend: str, kv_dtype: str) -> None:
    """The same bound on the GPU kernels, in bfloat16, against their own bf16 cache."""
    pytest.importorskip(f"pagoda_attention_{backend}")
    if backend == "triton" and kv_dtype == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("triton converts e4m3 from compute capability 8.9 on")
    settings = dict(attention_backend=backend, dtype="bfloat16", kv_cache_memory=64 << 20)
    exact = prompt_logprobs(engine(tiny_head64, **settings))
    diff = (prompt_logprobs(engine(tiny_head64, kv_cache_dtype=kv_dtype, **settings)) - exact).abs()
    worst, mean = BOUNDS[kv_dtype]
    assert 0 < diff.max() < worst and diff.mean() < mean
    torch_ref = prompt_logprobs(engine(tiny_head64, kv_cache_dtype=kv_dtype, dtype="bfloat16"))
    assert (prompt_logprobs(engine(tiny_head64, kv_cache_dtype=kv_dtype, **settings)) - torch_ref).abs().max() < worst


def test_calibrated_scales_are_the_same_at_tp2(tiny: str) -> None:
    """Ranks agree on the largest magnitudes before storing: the layer's scales, as one rank computes them (to
    the float32 sums of the layers before, in another order), so the logprobs equal TP=1's."""
    runs = []
    for tp in (1, 2):
        llm = engine(tiny, kv_cache_dtype="fp8", calculate_kv_scales=True, tensor_parallel_size=tp)
        try:
            runs.append(prompt_logprobs(llm))
            scales = [(a.kv_scales.k_scale.item(), a.kv_scales.v_scale.item()) for a in attention_layers(llm)]
            runs.append(torch.tensor(scales))
        finally:
            llm.shutdown()
    torch.testing.assert_close(runs[3], runs[1], rtol=1e-6, atol=0)
    torch.testing.assert_close(runs[2], runs[0], rtol=0, atol=2e-4)
