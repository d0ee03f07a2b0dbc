"""Greedy tokens and logprobs with LoRA adapters equal HF transformers + peft (the adapter applied in HF):
three adapters and the base model mixed in one batch on tiny Llama and Qwen3 (chunked prefills mixed with
decodes, so steps run decode rows and prefill segments together); the same when two slots and a host cache
of two make adapters swap out and be read again; tensor and pipeline parallelism (two ranks over gloo) equal to
one rank; an
adapter trained on Phi-3's fused qkv/gate_up projections."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lora_models import hf_greedy, hf_reference, make_adapter, make_base, random_prompts
from pagoda import LLM, LoRARequest, SamplingParams
from pagoda.lora.step import LoRAStep

MAX_TOKENS = 14


def _requests(adapters: dict) -> list[LoRARequest | None]:
    """Each adapter, and the base model, twice over: 8 prompts."""
    loras = [LoRARequest(name, i + 1, str(path)) for i, (name, path) in enumerate(adapters.items())]
    return [*loras, None, *loras, None]


def _generate(base, loras, prompts, **engine):
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True, enable_lora=True, max_lora_rank=16, block_size=8,
              max_num_batched_tokens=24, **engine)
    try:
        outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0),
                               use_tqdm=False, lora_request=loras)
        step = llm.engine.core.runner.feature(LoRAStep)
        return outputs, (step.slots.loads, step.slots.swaps)
    finally:
        llm.shutdown()


def _logprobs(completion) -> torch.Tensor:
    return torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(completion.token_ids)],
                        dtype=torch.float64)


def _assert_hf_parity(base, prompts, loras, outputs) -> None:
    references = {}
    for prompt, lora, out in zip(prompts, loras, outputs):
        key = None if lora is None else lora.lora_path
        if key not in references:
            references[key] = hf_reference(base, key)
        tokens, logprobs = hf_greedy(references[key], prompt, MAX_TOKENS)
        completion = out.outputs[0]
        assert completion.token_ids == tokens, (lora, completion.token_ids, tokens)
        assert torch.allclose(_logprobs(completion), logprobs, atol=1e-4), (_logprobs(completion) - logprobs).abs().max()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_mixed_adapters_match_hf_peft(lora_models, family):
    base, adapters = lora_models[family]
    prompts = random_prompts(8, range(6, 30), seed=5)
    loras = _requests(adapters)
    outputs, _ = _generate(base, loras, prompts, max_loras=3)
    _assert_hf_parity(base, prompts, loras, outputs)
    base_tokens = {tuple(p): o.outputs[0].token_ids for p, lora, o in zip(prompts, loras, outputs) if lora is None}
    tokens_with = [out.outputs[0].token_ids for out, lora in zip(outputs, loras) if lora is not None]
    assert len({tuple(t) for t in tokens_with}) == len(tokens_with), "the adapters should change the outputs"
    assert base_tokens


def test_evicted_adapters_are_read_again_and_match(lora_models):
    """Two device slots and two host copies for three adapters: the scheduler keeps two adapters running,
    the third waits; slots are taken over and host copies dropped, then read again from the folders."""
    base, adapters = lora_models["llama"]
    prompts = random_prompts(8, range(6, 30), seed=6)
    loras = _requests(adapters)
    outputs, (loads, swaps) = _generate(base, loras, prompts, max_loras=2, max_cpu_loras=2, max_num_seqs=3)
    assert swaps > len(adapters) and loads > len(adapters), (loads, swaps)
    _assert_hf_parity(base, prompts, loras, outputs)


@pytest.mark.parametrize("family, parallel", [("qwen3", dict(tensor_parallel_size=2)),
                                              ("llama", dict(pipeline_parallel_size=2))])
def test_two_ranks_equal_one_rank(lora_models, family, parallel):
    """Tensor parallelism slices every adapter as its layer; pipeline parallelism gives each stage its layers'
    part, and each micro-batch of requests in flight its own two adapters at most."""
    base, adapters = lora_models[family]
    prompts = random_prompts(8, range(6, 30), seed=7)
    loras = _requests(adapters)
    one, _ = _generate(base, loras, prompts, max_loras=2)
    two, _ = _generate(base, loras, prompts, max_loras=2, **parallel)
    for a, b in zip(one, two):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        assert torch.allclose(_logprobs(b.outputs[0]), _logprobs(a.outputs[0]), atol=1e-4)


def test_two_stages_replaying_decode_graphs_with_lora_rows_equal_eager(lora_models, tmp_path, monkeypatch):
    """Each stage replays decode steps with adapters from graphs captured with LoRA rows, their plan written into
    a static buffer before each replay (a CPU platform whose "graphs" rerun the step on static buffers,
    installed for every rank's process)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    import graph_replay

    graph_replay.install_for_every_rank(tmp_path, monkeypatch)
    base, adapters = lora_models["llama"]
    prompts = random_prompts(8, range(6, 30), seed=8)
    loras = _requests(adapters)
    args = dict(max_loras=2, platform="replay-pp", attention_backend="torch-graphs-pp")
    eager, _ = _generate(base, loras, prompts, enforce_eager=True, **args)
    graph_replay.REPLAYS[0] = 0
    replayed, _ = _generate(base, loras, prompts, pipeline_parallel_size=2, **args)
    assert graph_replay.REPLAYS[0] > 5, "the first stage's decode steps should replay graphs"
    for a, b in zip(eager, replayed):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        assert torch.allclose(_logprobs(b.outputs[0]), _logprobs(a.outputs[0]), atol=1e-4)


def test_adapter_of_fused_projections_matches_hf_peft(tmp_path):
    """Phi-3's HF model fuses q/k/v and gate/up itself: peft adapts qkv_proj and gate_up_proj whole."""
    base = make_base(tmp_path / "base", "phi3")
    adapter = make_adapter(base, tmp_path / "fused", seed=4, r=8, alpha=16,
                           targets=["qkv_proj", "gate_up_proj", "o_proj", "down_proj"])
    prompts = random_prompts(3, range(6, 30), seed=8)
    loras = [LoRARequest("fused", 1, str(adapter)), None, LoRARequest("fused", 1, str(adapter))]
    outputs, _ = _generate(base, loras, prompts, max_loras=1)
    _assert_hf_parity(base, prompts, loras, outputs)
