"""Adapters that cannot be served fail their request with a clear error naming the problem and the fix, nothing
of them is kept, and the engine keeps serving: a missing folder, a rank above max_lora_rank, modules the model
does not have, an adapter of another base model (shapes), a corrupt file, modules_to_save, DoRA, an id
already taken; requests naming an adapter on an engine without LoRA; bad settings."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from lora_models import make_adapter, make_base, random_prompts
from pagoda import LLM, LoRARequest, SamplingParams
from pagoda.errors import RequestError
from pagoda.lora.step import LoRAStep

PARAMS = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-errors")
    base = make_base(root / "base", "llama")
    good = make_adapter(base, root / "good", seed=1)
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True, enable_lora=True, max_loras=2, max_lora_rank=16)
    yield llm, root, base, good
    llm.shutdown()


def _bad_adapter(root, good, name, edit_config=None, edit_tensors=None):
    path = root / name
    if path.exists():
        return path
    shutil.copytree(good, path)
    if edit_config is not None:
        config = json.loads((path / "adapter_config.json").read_text())
        edit_config(config)
        (path / "adapter_config.json").write_text(json.dumps(config))
    if edit_tensors is not None:
        tensors = load_file(path / "adapter_model.safetensors")
        save_file(edit_tensors(tensors), path / "adapter_model.safetensors")
    return path


def _refused(llm, lora: LoRARequest, *fragments: str) -> None:
    """The request fails with all ``fragments`` in its message; nothing of the adapter is kept; the engine
    still serves the base model and a good adapter."""
    step = llm.engine.core.runner.feature(LoRAStep)
    with pytest.raises(RequestError) as failure:
        llm.generate([[1, 2, 3]], PARAMS, use_tqdm=False, lora_request=lora)
    for fragment in fragments:
        assert fragment in str(failure.value), str(failure.value)
    assert lora not in step.slots.host and llm.engine.core.adapters.known.get(lora.lora_int_id) != lora
    assert not llm.engine.has_unfinished_requests()
    assert len(llm.generate([[4, 5, 6]], PARAMS, use_tqdm=False)[0].outputs[0].token_ids) == 4


def test_missing_folder(setup, tmp_path):
    llm, *_ = setup
    _refused(llm, LoRARequest("nowhere", 90, str(tmp_path / "nowhere")), "no folder", "save_pretrained")


def test_rank_above_the_maximum(setup):
    llm, root, base, _ = setup
    big = root / "r32"
    if not big.exists():
        make_adapter(base, big, seed=5, r=32, alpha=32)
    _refused(llm, LoRARequest("r32", 91, str(big)), "rank 32", "--max-lora-rank 32")


def test_module_the_model_does_not_have(setup):
    llm, root, _, good = setup
    renamed = _bad_adapter(root, good, "fc1", edit_tensors=lambda t: {
        k.replace("mlp.down_proj", "mlp.fc1"): v for k, v in t.items()})
    _refused(llm, LoRARequest("fc1", 92, str(renamed)), "model.layers.0.mlp.fc1", "LlamaForCausalLM",
             "q_proj", "down_proj")


def test_adapter_of_another_base_model(setup, tmp_path):
    llm, *_ = setup
    other = make_base(tmp_path / "other-base", "qwen3")  # head_dim 32: q/k/v shapes differ from the Llama's
    adapter = make_adapter(other, tmp_path / "qwen-adapter", seed=6)
    _refused(llm, LoRARequest("qwen", 93, str(adapter)), "trained for another base model", "the base model's layer maps 64 -> 32")


def test_corrupt_file(setup):
    llm, root, _, good = setup
    corrupt = _bad_adapter(root, good, "corrupt")
    data = (corrupt / "adapter_model.safetensors").read_bytes()
    (corrupt / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    _refused(llm, LoRARequest("corrupt", 94, str(corrupt)), "not a readable safetensors file")


def test_modules_to_save_refused(setup):
    llm, root, _, good = setup
    saving = _bad_adapter(root, good, "saves", edit_config=lambda c: c.update(modules_to_save=["lm_head"]))
    _refused(llm, LoRARequest("saves", 95, str(saving)), "modules_to_save", "merge the adapter")


def test_dora_refused(setup):
    llm, root, _, good = setup
    dora = _bad_adapter(root, good, "dora", edit_config=lambda c: c.update(use_dora=True))
    _refused(llm, LoRARequest("dora", 96, str(dora)), "DoRA")


def test_id_of_another_adapter(setup):
    llm, root, _, good = setup
    llm.generate([[1, 2]], PARAMS, use_tqdm=False, lora_request=LoRARequest("good", 1, str(good)))
    copy = _bad_adapter(root, good, "copy")
    _refused(llm, LoRARequest("copy", 1, str(copy)), "id 1 is already 'good'", "an id of its own")


def test_failed_adapter_in_a_batch_queues_nothing(setup, tmp_path):
    """The third prompt's adapter is missing: generate raises and no request of the batch keeps running."""
    llm, _, _, good = setup
    ok = LoRARequest("good", 1, str(good))
    loras = [ok, None, LoRARequest("gone", 97, str(tmp_path / "gone")), ok]
    with pytest.raises(RequestError, match="no folder"):
        llm.generate(random_prompts(4, range(3, 9), seed=1), PARAMS, use_tqdm=False, lora_request=loras)
    assert not llm.engine.has_unfinished_requests() and not llm.engine.core.scheduler.has_unfinished()


def test_engine_without_lora_refuses_adapters(tmp_path):
    base = make_base(tmp_path / "base", "llama")
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True)
    with pytest.raises(RequestError, match="enable_lora=True"):
        llm.generate([[1, 2]], PARAMS, use_tqdm=False, lora_request=LoRARequest("a", 1, str(tmp_path)))


@pytest.mark.parametrize("args, message", [
    (("", 1, "/x"), "non-empty name"), (("a", 0, "/x"), "integer >= 1"), (("a", 1, ""), "lora_path")])
def test_bad_lora_request(args, message):
    with pytest.raises(RequestError, match=message):
        LoRARequest(*args)


@pytest.mark.parametrize("settings, message", [
    (dict(max_loras=0), "max_loras"), (dict(max_lora_rank=0), "max_lora_rank"),
    (dict(max_loras=4, max_cpu_loras=2), "max_cpu_loras")])
def test_bad_settings(settings, message):
    from pagoda.config import EngineConfig

    with pytest.raises(ValueError, match=message):
        EngineConfig(enable_lora=True, **settings)


def test_two_stages_refuse_an_adapter_that_misfits_the_other_stage(setup):
    """Under pipeline parallelism the driver holds layer 0 only; an adapter wrong in layer 1 (the other stage's)
    is still refused by the driver before it runs: a module the model does not have, or a shape of another model."""
    _, root, base, good = setup
    renamed = _bad_adapter(root, good, "fc1-layer1", edit_tensors=lambda t: {
        k.replace("layers.1.mlp.down_proj", "layers.1.mlp.fc1"): v for k, v in t.items()})
    narrowed = _bad_adapter(root, good, "q-layer1", edit_tensors=lambda t: {
        k: v[:-8] if "layers.1.self_attn.q_proj.lora_B" in k else v for k, v in t.items()})
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True, enable_lora=True, max_loras=2, max_lora_rank=16,
              pipeline_parallel_size=2)
    try:
        _refused(llm, LoRARequest("fc1", 92, str(renamed)), "model.layers.1.mlp.fc1", "LlamaForCausalLM")
        _refused(llm, LoRARequest("q1", 93, str(narrowed)), "model.layers.1.self_attn.q_proj",
                 "trained for another base model")
        out = llm.generate([[1, 2, 3]], PARAMS, use_tqdm=False, lora_request=LoRARequest("good", 1, str(good)))
        assert len(out[0].outputs[0].token_ids) == 4
    finally:
        llm.shutdown()
