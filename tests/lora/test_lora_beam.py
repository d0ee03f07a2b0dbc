"""Beam search with LoRA adapters: every beam of a prompt runs with the prompt's adapter (forks keep it), so the
beams and their scores equal HF transformers' ``generate(num_beams=4)`` on the peft model, for two adapters and
the base model in one call."""

from __future__ import annotations

import pytest
import torch

from lora_models import hf_reference, random_prompts
from pagoda import LLM, BeamSearchParams, LoRARequest

MAX_TOKENS = 12


@torch.no_grad()
def _hf_beams(model, prompt: list[int], eos: int) -> tuple[list[list[int]], list[float]]:
    """HF's 4 beams (generated tokens, cut after EOS) and their scores, best first."""
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)), num_beams=4,
                         num_return_sequences=4, do_sample=False, max_new_tokens=MAX_TOKENS, eos_token_id=eos,
                         pad_token_id=eos, output_scores=True, return_dict_in_generate=True)
    beams = []
    for row in out.sequences.tolist():
        generated = row[len(prompt):]
        beams.append(generated[: generated.index(eos) + 1] if eos in generated else generated)
    return beams, out.sequences_scores.tolist()


def test_beams_with_adapters_equal_hf_peft(lora_models):
    base, adapters = lora_models["llama"]
    names = list(adapters)[:2]
    loras = [LoRARequest(name, i + 1, str(adapters[name])) for i, name in enumerate(names)]
    per_prompt = [loras[0], None, loras[1]]
    prompts = random_prompts(3, range(4, 10), seed=21)
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True, enable_lora=True, max_loras=2, max_lora_rank=16,
              block_size=4)
    try:
        eos = llm.engine.core.eos_token_id
        results = llm.beam_search(prompts, BeamSearchParams(beam_width=4, max_tokens=MAX_TOKENS),
                                  lora_request=per_prompt)
    finally:
        llm.shutdown()
    for prompt, lora, result in zip(prompts, per_prompt, results):
        beams, scores = _hf_beams(hf_reference(base, None if lora is None else lora.lora_path), prompt, eos)
        assert [o.token_ids for o in result.outputs] == beams, lora
        ours = [o.cumulative_logprob / len(o.token_ids) for o in result.outputs]
        assert ours == pytest.approx(scores, abs=1e-4)
    assert results[0].outputs[0].token_ids != results[1].outputs[0].token_ids  # the adapters change the beams
