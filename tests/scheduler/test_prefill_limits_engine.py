"""The prefill limits end to end: a tiny random Llama generates the same greedy tokens with them on, its
scheduler splits prompts as they say, and the CLI flags reach the engine's config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from tiny_models import make_tiny_model, random_prompts  # noqa: E402

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.cli.main import build_parser  # noqa: E402
from pagoda.entrypoints.engine_args import engine_config  # noqa: E402
from pagoda.plugins import get_plugin_manager  # noqa: E402

LIMITS = dict(long_prefill_token_threshold=8, max_num_partial_prefills=2, max_long_partial_prefills=1,
              max_prefill_tokens_while_decoding=12)


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(path, "llama")
    return str(path)


def test_greedy_tokens_are_unchanged_with_the_limits_on(llama_path):
    prompts = random_prompts(12, range(3, 60), seed=9)
    params = SamplingParams(temperature=0, max_tokens=12)
    plain = LLM(model=llama_path, block_size=8, max_num_batched_tokens=32)
    limited = LLM(model=llama_path, block_size=8, max_num_batched_tokens=32, **LIMITS)
    chunks: list[int] = []
    scheduler = limited.engine.core.scheduler
    schedule = scheduler.schedule

    def recording_schedule():
        out = schedule()
        chunks.extend(n for n in out.num_tokens if n > 1)
        return out

    scheduler.schedule = recording_schedule
    expected = [o.outputs[0].token_ids for o in plain.generate(prompts, params, use_tqdm=False)]
    got = [o.outputs[0].token_ids for o in limited.generate(prompts, params, use_tqdm=False)]
    assert got == expected
    assert chunks and max(chunks) == 8  # every prompt longer than 8 tokens went in chunks of at most 8


def test_cli_flags_reach_the_engine_config():
    parser = build_parser(get_plugin_manager())
    args = parser.parse_args(["generate", "x", "--long-prefill-token-threshold", "8",
                              "--max-num-partial-prefills", "2", "--max-long-partial-prefills", "1",
                              "--max-prefill-tokens-while-decoding", "12"])
    config = engine_config(args, None)
    assert {name: getattr(config, name) for name in LIMITS} == LIMITS
    defaults = engine_config(parser.parse_args(["generate", "x"]), None)
    assert (defaults.max_num_partial_prefills, defaults.max_long_partial_prefills,
            defaults.long_prefill_token_threshold, defaults.max_prefill_tokens_while_decoding) == (1, 1, 0, 0)
