"""Decode steps of requests with images replay device graphs and give the eager tokens: on CPU through a
platform whose "graph" reruns the step on the static buffers (tests/engine/test_decode_graphs.py), and on a
GPU through real CUDA graphs. Qwen2.5-VL's decode positions are shifted in place in the graph's buffers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagoda import LLM, SamplingParams
from tiny_vlm import PLACEHOLDERS, random_images, save_tiny_vlm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from test_decode_graphs import REPLAYS, ReplayPlatform, graph_test_plugins  # noqa: E402

FAMILIES = ["llava", "llava_next", "qwen2_5_vl", "gemma3"]


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"graphs-{request.param}")
    save_tiny_vlm(request.param, folder)
    return request.param, str(folder)


def requests(family: str) -> tuple[list, list[SamplingParams]]:
    """Prompts with 2, 0 and 1 images and different lengths of output: the decode batch shrinks."""
    ph, images = PLACEHOLDERS[family], random_images([(40, 60), (90, 50), (56, 112)], seed=21)
    prompts = [{"prompt": f"t1 t2 {ph} t3 {ph} t4", "multi_modal_data": {"image": images[:2]}}, "t7 t8 t9 t10",
               {"prompt": f"t5 {ph} t6", "multi_modal_data": {"image": images[2]}}]
    return prompts, [SamplingParams(temperature=0, max_tokens=n, logprobs=0) for n in (12, 9, 6)]


def outputs(llm: LLM, family: str) -> list[tuple[list[int], list[float]]]:
    prompts, params = requests(family)
    done = llm.generate(prompts, params, use_tqdm=False)
    return [(o.outputs[0].token_ids, [lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)])
            for o in done]


def test_replayed_decode_steps_with_images_equal_eager(vlm):
    family, folder = vlm
    args = dict(model=folder, dtype="float32", block_size=4, max_model_len=256, max_num_seqs=4)
    with graph_test_plugins("replay-cpu", ReplayPlatform):
        args.update(platform="replay-cpu", attention_backend="torch-graphs")
        eager = outputs(LLM(**args, enforce_eager=True), family)
        graphed_llm = LLM(**args)
        assert graphed_llm.engine.core.runner.graphs is not None
        REPLAYS[0] = 0
        graphed = outputs(graphed_llm, family)
    assert REPLAYS[0] >= 10  # the decode steps went through the graphs
    assert [tokens for tokens, _ in graphed] == [tokens for tokens, _ in eager]
    for (_, ours), (_, theirs) in zip(graphed, eager):
        assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-5


@pytest.mark.gpu
def test_cuda_graphs_with_images_equal_eager(vlm):
    family, folder = vlm
    args = dict(model=folder, dtype="float32", block_size=16, max_model_len=256, max_num_seqs=4)
    eager = outputs(LLM(**args, enforce_eager=True), family)
    graphed_llm = LLM(**args)
    assert graphed_llm.engine.core.runner.graphs is not None  # decode steps are captured on this GPU
    graphed = outputs(graphed_llm, family)
    assert [tokens for tokens, _ in graphed] == [tokens for tokens, _ in eager]
    for (_, ours), (_, theirs) in zip(graphed, eager):
        assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-3
