"""Tensor parallelism on CPU (two ranks over gloo: the driver and one spawned worker, which finds the
plugin through its entry point, so it must be installed): greedy tokens and logprobs at
tensor_parallel_size=2 equal those at 1. Column-parallel layers split the outputs (packed zero
points too); row-parallel ones split the inputs and keep every group's scales, and with act-order a
rank holds any number of each group's rows: its runs are padded."""

from __future__ import annotations

import importlib.metadata as md

import pytest
import torch
from int_quantizer import Layout
from tiny_checkpoints import write_tiny_llama

from tiny_models import random_prompts  # noqa: E402  (conftest puts tests/engine on the path)

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.testing import skip_unless_ci  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _installed() -> None:
    try:
        md.version("pagoda-quant-gptq")
    except md.PackageNotFoundError:
        skip_unless_ci("pagoda-quant-gptq is not installed (pip install -e plugins/quant_gptq): a TP worker "
                       "finds plugins through their entry points")


def _run(path, tp: int, prompts):
    llm = LLM(model=str(path), dtype="float32", block_size=8, max_num_batched_tokens=40, max_num_seqs=8,
              tensor_parallel_size=tp)
    try:
        outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, logprobs=0), use_tqdm=False)
        o_proj = dict(llm.engine.core.parts.model.named_modules())["model.layers.0.self_attn.o_proj"]
        return outputs, o_proj.int4_padded
    finally:
        llm.shutdown()


@pytest.mark.parametrize("layout", [Layout("gptq", 4, 32, sym=False, act_order=True),
                                    Layout("compressed-tensors", 8, 32, sym=False, act_order=True)], ids=str)
def test_tp2_equals_tp1(tmp_path, layout: Layout) -> None:
    quant, _, _ = write_tiny_llama(tmp_path, layout)
    prompts = random_prompts(6, range(4, 30), seed=3)
    expected, padded_tp1 = _run(quant, 1, prompts)
    got, padded_tp2 = _run(quant, 2, prompts)
    assert not padded_tp1 and padded_tp2, "act-order rows split over two ranks: uneven groups, padded runs"
    for a, b in zip(expected, got):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        lp_a = [next(iter(d.values())).logprob for d in a.outputs[0].logprobs]
        lp_b = [next(iter(d.values())).logprob for d in b.outputs[0].logprobs]
        assert torch.allclose(torch.tensor(lp_a), torch.tensor(lp_b), atol=1e-4)
