"""LoRA adapters on vision-language models: an adapter on the language model (as PEFT saves it from
transformers' model) gives HF + peft's greedy tokens and logprobs on image prompts, beside the base model in the
same batch, for every VLM family; an adapter on the vision tower is refused, naming what adapters may target."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lora"))
from lora_models import randomise_lora  # noqa: E402
from pagoda import LLM, LoRARequest, SamplingParams  # noqa: E402
from pagoda.errors import RequestError  # noqa: E402
from tiny_vlm import PLACEHOLDERS, hf_greedy, random_images, save_tiny_vlm  # noqa: E402

MAX_TOKENS = 8
DECODER_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


def _adapter(hf, folder, targets, seed: int = 3):
    """A peft adapter of ``hf`` (random A and B) saved to ``folder``; returns the peft model."""
    from peft import LoraConfig, get_peft_model

    peft_model = randomise_lora(
        get_peft_model(hf, LoraConfig(r=8, lora_alpha=16, target_modules=targets, init_lora_weights=False)), seed)
    peft_model.save_pretrained(folder)
    return peft_model.eval()


def _llm(folder) -> LLM:
    return LLM(model=str(folder), dtype="float32", block_size=4, max_model_len=256, enable_lora=True, max_lora_rank=8)


@pytest.mark.parametrize("family", ["llava", "llava_next", "qwen2_5_vl", "gemma3"])
def test_decoder_adapter_with_images_matches_hf_peft(family, tmp_path):
    hf = save_tiny_vlm(family, tmp_path / "base")
    peft_model = _adapter(hf, tmp_path / "adapter", DECODER_TARGETS)
    image = random_images([(40, 60)])[0]
    prompt = {"prompt": f"t1 t2 {PLACEHOLDERS[family]} t3 t4", "multi_modal_data": {"image": image}}
    llm = _llm(tmp_path / "base")
    try:
        outputs = llm.generate([prompt, prompt], SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0),
                               use_tqdm=False, lora_request=[LoRARequest("a", 1, str(tmp_path / "adapter")), None])
        processed = llm.engine.process_images(prompt["prompt"], [image])
    finally:
        llm.shutdown()
    ids, items = processed.prompt_token_ids, [item.inputs() for item in processed.items]
    with_adapter = hf_greedy(family, peft_model, ids, items, MAX_TOKENS)
    with peft_model.disable_adapter():
        without = hf_greedy(family, peft_model, ids, items, MAX_TOKENS)
    assert with_adapter[0] != without[0], "the adapter should change the tokens"
    for out, (tokens, logits) in zip(outputs, (with_adapter, without)):
        completion = out.outputs[0]
        assert completion.token_ids == tokens
        expected = torch.log_softmax(logits.double(), dim=-1)[torch.arange(len(tokens)), torch.tensor(tokens)]
        ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(tokens)], dtype=torch.float64)
        assert torch.allclose(ours, expected, atol=1e-4), (ours - expected).abs().max()


def test_vision_tower_adapter_is_refused(tmp_path):
    hf = save_tiny_vlm("llava", tmp_path / "base")
    _adapter(hf, tmp_path / "adapter", r".*vision_tower.*\.(q_proj|v_proj)")
    llm = _llm(tmp_path / "base")
    try:
        with pytest.raises(RequestError, match=r"vision_tower.*does not have as a linear layer.*qkv_proj"):
            llm.generate("t1 t2", SamplingParams(max_tokens=2), use_tqdm=False,
                         lora_request=LoRARequest("tower", 1, str(tmp_path / "adapter")))
        assert llm.generate("t1 t2", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids  # serving
    finally:
        llm.shutdown()
