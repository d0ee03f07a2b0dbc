"""The goodput controller inside the engine: with a fake clock on which a step carrying drafts costs
as much as five plain steps, the n-gram proposer's rounds (accepted or not) never pay, so most
steps run without drafts; when rounds cost what plain steps do, accepted drafts pay and speculation
stays on. Greedy outputs equal those without speculation either way."""

from __future__ import annotations

import pytest

from pagoda import LLM, SamplingParams
from tiny_models import random_prompts

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
PARAMS = SamplingParams(temperature=0, max_tokens=160, ignore_eos=True)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _llm(path: str, spec: dict | None) -> LLM:
    return LLM(model=path, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
               kv_cache_memory=1 << 20, max_model_len=256, speculative_config=spec)


def _prompts() -> list[list[int]]:
    return [p * 3 for p in random_prompts(4, range(6, 14), seed=3)]  # repeated text: lookups find drafts


def _tokens(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(), PARAMS, use_tqdm=False)]


def _timed_by_fake_clock(llm: LLM, monkeypatch, round_cost: float) -> None:
    """Each launched step moves the controller's clock by 1 (plain) or ``round_cost`` (drafts)."""
    core = llm.engine.core
    clock = FakeClock()
    core.speculator.goodput.clock = clock
    launch = core.executor.launch

    def costed_launch(scheduled, *args):
        clock.now += round_cost if any(req.num_draft_tokens for req in scheduled.requests) else 1.0
        return launch(scheduled, *args)

    monkeypatch.setattr(core.executor, "launch", costed_launch)


@pytest.mark.parametrize("round_cost", [5.0, 1.0])
def test_costly_rounds_are_suspended_and_outputs_unchanged(tiny_models, monkeypatch, round_cost: float) -> None:
    path, _ = tiny_models["llama"]
    plain = _tokens(_llm(path, None))
    llm = _llm(path, SPEC)
    _timed_by_fake_clock(llm, monkeypatch, round_cost)
    assert _tokens(llm) == plain
    s = llm.engine.stats
    assert s.spec_num_accepted_tokens > 0 and s.spec_num_steps >= 60
    if round_cost > 1:  # probes of 5 steps between pauses of 32, 64... steps (a new cycle as the batch shrinks)
        assert s.spec_num_suspended_steps > 0.75 * s.spec_num_steps and 0 < s.spec_goodput_ratio <= 1
    else:  # plain probes of 5 steps between runs of 32, 64... steps
        assert s.spec_num_suspended_steps < 0.25 * s.spec_num_steps
