"""``LLM(..., attention_backend="flash")`` greedy generation against the ``triton`` backend on tiny
random Llamas (head sizes 64 and 128, GQA 4 and 8) in float16 and bfloat16 (``gpu``).

The two backends round differently, so greedy paths may part at a near tie: tokens must be equal
up to the first divergence, with the chosen tokens' logprobs within ``TIE`` of each other on the
way, and at the divergence the token flash chose must be within ``TIE`` of triton's choice in
triton's own top logprobs.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "engine"))
from tiny_models import VOCAB, random_prompts, save_word_tokenizer  # noqa: E402

import pagoda.plugins.manager as manager  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402

pytestmark = pytest.mark.gpu

TIE = {"float16": 0.1, "bfloat16": 0.25}  # logprob difference that rounding may explain
WEIGHT_STD = 0.4  # larger than the default init: fewer near ties in greedy decoding
PLUGINS = {
    "attention-flash": "pagoda_attention_flash.plugin",
    "attention-triton": "pagoda_attention_triton.plugin",
    "platform-cuda": "pagoda_platform_cuda.plugin",
}
MODELS = {"d64-gqa4": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=64),
          "d128-gqa8": dict(num_attention_heads=8, num_key_value_heads=1, head_dim=128)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def tiny_llama(request, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp(f"tiny-llama-{request.param}")
    torch.manual_seed(1234)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2, max_position_embeddings=512,
        eos_token_id=None, bos_token_id=None, pad_token_id=None, **MODELS[request.param],
    )
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # larger weights than the default init make greedy decoding less flat
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, WEIGHT_STD)
    model.save_pretrained(path)
    save_word_tokenizer(path)
    return str(path)


def _use_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        loaded = {name: importlib.import_module(module) for name, module in PLUGINS.items()}
    except ImportError as error:
        pytest.skip(f"a plugin is not installed: {error}")
    monkeypatch.setattr(manager, "_MANAGER", PluginManager(modules=loaded, entry_points=False))


def _generate(path: str, backend: str, dtype: str, prompts: list[list[int]]):
    llm = LLM(model=path, attention_backend=backend, dtype=dtype, platform="cuda", block_size=16,
              max_num_batched_tokens=64, max_model_len=512, kv_cache_memory=1 << 28, max_num_seqs=16)
    expected = {"flash": "FlashAttentionBackend", "triton": "TritonAttentionBackend"}[backend]
    assert type(llm.engine.runner.attention).__name__ == expected
    params = SamplingParams(temperature=0, max_tokens=16, logprobs=5)
    outs = [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)]
    del llm
    torch.cuda.empty_cache()
    return outs


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_flash_greedy_matches_triton(tiny_llama: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_plugins(monkeypatch)
    prompts = random_prompts(8, range(5, 200), seed=4)  # a 64-token budget chunks the longer prompts
    flash = _generate(tiny_llama, "flash", dtype, prompts)
    triton = _generate(tiny_llama, "triton", dtype, prompts)
    identical, worst = 0, 0.0
    for i, (f, t) in enumerate(zip(flash, triton)):
        same = next((k for k, (a, b) in enumerate(zip(f.token_ids, t.token_ids)) if a != b), len(t.token_ids))
        for k in range(same):  # the common path: both backends give the chosen token the same logprob
            tok = t.token_ids[k]
            worst = max(worst, abs(f.logprobs[k][tok].logprob - t.logprobs[k][tok].logprob))
        if same == len(t.token_ids):
            identical += 1
            continue
        top, chosen, other = t.logprobs[same], t.token_ids[same], f.token_ids[same]
        assert other in top, f"prompt {i} step {same}: flash chose {other}, not in triton's top-5 {sorted(top)}"
        gap = top[chosen].logprob - top[other].logprob
        print(f"FLASHERR e2e-{dtype} prompt {i} parts at step {same}: logprob gap {gap:.3f}")
        assert gap < TIE[dtype], f"prompt {i} step {same}: flash chose a token {gap:.3f} below triton's"
    print(f"FLASHERR e2e-{dtype} identical {identical}/{len(prompts)}, max logprob difference on common paths {worst:.3f}")
    assert worst < TIE[dtype], f"logprobs differ by {worst:.3f} on the common path"
