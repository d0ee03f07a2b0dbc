"""Speculative verify steps replayed from (emulated) graphs with the Triton kernels: each request
padded to k + 1 query slots and the batch to a captured size, over the paged cache, gives the
tokens of eager steps. On CPU the kernels run under the interpreter and the "graph" reruns the
recorded step on its static buffers (the replaying platform of tests/engine/graph_replay.py); the CUDA twin
is tests/engine/test_speculative_draft.py::test_verify_graphs_on_cuda_match_eager."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "engine"))
from graph_replay import ReplayPlatform  # noqa: E402
from tiny_models import make_tiny_model, random_prompts  # noqa: E402

import pagoda.plugins.manager as manager  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.hookspecs import hookimpl  # noqa: E402
from pagoda.spec_decode.step import SpecDecodeStep  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; its CUDA twin runs on GPUs")
def test_verify_graph_replays_equal_eager_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tiny_model(tmp_path, "llama")
    platform = types.SimpleNamespace(register_platforms=hookimpl(lambda register: register("replay-cpu", ReplayPlatform)))
    triton = importlib.import_module("pagoda_attention_triton.plugin")
    monkeypatch.setattr(manager, "_MANAGER", manager.PluginManager(
        modules={"replay": platform, "attention-triton": triton}, entry_points=False))
    prompts = [p * 3 for p in random_prompts(2, range(6, 10), seed=3)]  # repeated: the n-gram proposer drafts
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    common = dict(model=str(tmp_path), skip_tokenizer_init=True, block_size=8, max_num_seqs=2, kv_cache_memory=1 << 20,
                  platform="replay-cpu", attention_backend="triton", dtype="float32")
    eager = LLM(**common, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False}
    llm = LLM(**common, speculative_config=spec)
    graphs = llm.engine.core.runner.feature(SpecDecodeStep).step_graphs
    replayed, replay = [], graphs.replay
    graphs.replay = lambda size: replayed.append(size) or replay(size)
    out = llm.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in eager]
    assert replayed and llm.engine.stats.spec_num_accepted_tokens > 0
