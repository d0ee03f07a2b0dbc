"""Tensor parallelism of an INT8 W8A8 checkpoint on CPU (two ranks over gloo: the driver and one spawned worker,
which finds the plugin through its entry point, so it must be installed): greedy tokens at
tensor_parallel_size=2 equal those at 1, and the logprobs agree within the bound below.

Why not bit-equal: a row-parallel layer (o_proj, down_proj) quantizes its input per token on each rank, over
that rank's half of the features, so each half gets its own scale (finer than one rank's single scale); a
shared scale would cost an all-reduce of every token's maximum before each such layer.
"""

from __future__ import annotations

import importlib.metadata as md

import pytest
import torch

from fp8_checkpoints import write_fp8
from hf_tiny import hf_config, hf_model
from pagoda import LLM, SamplingParams
from pagoda.testing import skip_unless_ci

LOGPROB_BOUND = 0.1  # the int8 rounding of the row-parallel inputs' halves (measured on this model: up to 0.065)


@pytest.fixture(autouse=True, scope="module")
def _installed() -> None:
    try:
        md.version("pagoda-quant-fp8")
    except md.PackageNotFoundError:
        skip_unless_ci("pagoda-quant-fp8 is not installed (pip install -e plugins/quant_fp8): a TP worker "
                       "finds plugins through their entry points")


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 96, (int(n),), generator=g).tolist() for n in torch.randint(4, 30, (6,), generator=g)]


def _run(path, tp: int, prompts):
    llm = LLM(model=str(path), dtype="float32", block_size=8, max_num_batched_tokens=40, max_num_seqs=8,
              tensor_parallel_size=tp, skip_tokenizer_init=True)
    try:
        return llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=0, max_tokens=16, logprobs=0), use_tqdm=False)
    finally:
        llm.shutdown()


def test_tp2_equals_tp1(tmp_path) -> None:
    prompts = _prompts()
    write_fp8(hf_model(hf_config("llama")), tmp_path, "int8-channel-token", prompts)
    expected, got = _run(tmp_path, 1, prompts), _run(tmp_path, 2, prompts)
    for a, b in zip(expected, got):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        lp_a = torch.tensor([next(iter(d.values())).logprob for d in a.outputs[0].logprobs])
        lp_b = torch.tensor([next(iter(d.values())).logprob for d in b.outputs[0].logprobs])
        assert (lp_a - lp_b).abs().max() < LOGPROB_BOUND
