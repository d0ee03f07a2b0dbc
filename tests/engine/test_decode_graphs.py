"""Decode-graph replay logic on CPU: a platform whose "graph" reruns the step on the static buffers.

This checks what the CUDA path relies on (static buffers, padding to captured sizes, slot -1 for
padding rows, block tables copied in place) without a GPU; the real CUDA graphs are tested in
plugins/platform_cuda/tests/test_cuda_graphs.py.
"""

from __future__ import annotations

import contextlib
import types

import pytest

from pagoda import LLM, SamplingParams
from pagoda.hookspecs import hookimpl
from pagoda.plugins import manager as plugin_manager
from pagoda.platforms.cpu import CpuPlatform
from graph_replay import REPLAYS, GraphSafeTorchBackend, ReplayPlatform
from tiny_models import random_prompts

@contextlib.contextmanager
def graph_test_plugins(name: str, platform: type[CpuPlatform]):
    """Only the platform ``name`` and the attention backend "torch-graphs" are registered inside."""
    module = types.SimpleNamespace(
        register_platforms=hookimpl(lambda register: register(name, platform)),
        register_attention_backends=hookimpl(lambda register: register("torch-graphs", GraphSafeTorchBackend)),
    )
    previous = plugin_manager._MANAGER
    plugin_manager._MANAGER = plugin_manager.PluginManager(modules={"graph_test": module}, entry_points=False)
    try:
        yield
    finally:
        plugin_manager._MANAGER = previous


@pytest.fixture
def replay_plugins():
    with graph_test_plugins("replay-cpu", ReplayPlatform):
        yield


@pytest.mark.parametrize("family", ["llama", "deepseek_v3"])  # DeepSeek: latent rows, padding slots -1
def test_replayed_decode_steps_equal_eager(replay_plugins, tiny_models, family):
    path = tiny_models[family][0]
    prompts = random_prompts(11, range(3, 30), seed=17)  # 11 sequences: padded to the captured size 16
    params = [SamplingParams(temperature=0, max_tokens=8 + i) for i in range(len(prompts))]  # batch shrinks
    args = dict(model=path, block_size=8, platform="replay-cpu", attention_backend="torch-graphs", max_num_seqs=16)
    eager = LLM(**args, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    graphed_llm = LLM(**args)
    assert sorted(graphed_llm.engine.core.runner.graphs.graphs) == [1, 2, 4, 8, 16]
    REPLAYS[0] = 0
    graphed = graphed_llm.generate(prompts, params, use_tqdm=False)
    assert REPLAYS[0] > 10  # decode steps went through the graphs
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_padding_inputs_of_each_size_are_clean(replay_plugins, tiny_models):
    """Sizes share one static buffer with overlapping layouts: what a larger size wrote (slot -1,
    length 1) must not leak into a smaller size's block table or token ids (a GPU reads page -1)."""
    llm = LLM(model=tiny_models["llama"][0], block_size=8, platform="replay-cpu", attention_backend="torch-graphs",
              max_num_seqs=16)
    graphs = llm.engine.core.runner.graphs
    for size in graphs.sizes[::-1]:
        t = graphs._padding_inputs(size)
        assert (t["block_tables"] == 0).all() and (t["input_ids"] == 0).all() and (t["positions"] == 0).all()
        assert (t["slot_mapping"] == -1).all() and (t["seq_lens"] == 1).all()
        assert t["query_start_loc"].tolist() == list(range(size + 1))
