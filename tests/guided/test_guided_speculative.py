"""Guided decoding with speculative decoding: each drafted position is masked by the grammar as it
stands after the drafts before it (the matcher accepts them, fills the rows, rolls back), so a
seeded guided request's output with speculation equals the one without, drafts accepted or not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from guided_models import make_tiny_smollm_vocab_model  # noqa: E402
from spec_proposers import OracleProposer, proposer_module  # noqa: E402

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.sampling_params import GuidedDecodingParams  # noqa: E402
from pagoda.plugins import manager as plugin_manager  # noqa: E402
from schemas import SCHEMAS  # noqa: E402


@pytest.fixture
def proposers():
    previous = plugin_manager._MANAGER
    plugin_manager._MANAGER = plugin_manager.PluginManager(modules={"spec-tests": proposer_module()},
                                                           entry_points=False)
    yield
    plugin_manager._MANAGER = previous


def test_guided_outputs_with_drafts_equal_those_without(proposers, tmp_path) -> None:
    path = make_tiny_smollm_vocab_model(tmp_path)
    names = ["flat", "enum", "array"]
    params = [SamplingParams(n=2, temperature=1.0, seed=i, max_tokens=120,
                             guided_decoding=GuidedDecodingParams(json=SCHEMAS[name])) for i, name in enumerate(names)]
    prompt = "Describe it:"
    config = dict(model=path, max_model_len=512, kv_cache_memory=64 << 20, max_num_seqs=8)
    llm = LLM(**config)
    plain = llm.generate([prompt] * len(names), params, use_tqdm=False)
    prompt_ids = llm.get_tokenizer().encode(prompt)
    OracleProposer.reference = {f"{i}#{j}": prompt_ids + c.token_ids
                                for i, o in enumerate(plain) for j, c in enumerate(o.outputs)}
    spec = LLM(**config, speculative_config={"method": "oracle", "num_speculative_tokens": 4, "backoff": False})
    speculated = spec.generate([prompt] * len(names), params, use_tqdm=False)
    assert [[c.token_ids for c in o.outputs] for o in speculated] == [[c.token_ids for c in o.outputs] for o in plain]
    for name, result in zip(names, speculated):
        for out in result.outputs:
            if out.finish_reason == "stop":  # else max_tokens cut the JSON (as it did without drafts)
                jsonschema.validate(json.loads(out.text), SCHEMAS[name])
    assert any(out.finish_reason == "stop" for result in speculated for out in result.outputs)
    stats = spec.engine.stats
    assert 0 < stats.spec_num_accepted_tokens < stats.spec_num_draft_tokens
