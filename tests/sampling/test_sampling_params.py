"""SamplingParams: vLLM defaults, normalisation, validation messages, n > 1 fan-out."""

from __future__ import annotations

import pytest

from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams


def test_defaults_mirror_vllm():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_k, p.top_p, p.min_p) == (1, 1.0, 0, 1.0, 0.0)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.seed, p.max_tokens, p.min_tokens, p.ignore_eos) == (None, 16, 0, False)
    assert (p.logprobs, p.prompt_logprobs) == (None, None)
    assert p.skip_special_tokens is True and p.include_stop_str_in_output is False
    assert p.stop == [] and p.stop_token_ids == []
    assert not p.is_greedy and not p.uses_top_k


def test_stop_normalised_to_list():
    assert SamplingParams(stop="END").stop == ["END"]
    assert SamplingParams(stop=("a", "bc")).stop == ["a", "bc"]
    assert SamplingParams(stop_token_ids=(5, 7)).stop_token_ids == [5, 7]


def test_greedy_threshold_and_top_k_switch():
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=9e-6).is_greedy
    assert not SamplingParams(temperature=1e-5).is_greedy
    assert not SamplingParams(top_k=-1).uses_top_k and SamplingParams(top_k=3).uses_top_k


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1}, "temperature must be >= 0, got -1"),
        ({"temperature": float("nan")}, "temperature must be >= 0"),
        ({"n": 0}, "n must be >= 1, got 0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        ({"top_k": -2}, "top_k must be >= -1, got -2"),
        ({"min_p": 1.2}, "min_p must be in [0, 1], got 1.2"),
        ({"presence_penalty": 2.5}, "presence_penalty must be in [-2, 2], got 2.5"),
        ({"frequency_penalty": -3}, "frequency_penalty must be in [-2, 2], got -3"),
        ({"repetition_penalty": 0}, "repetition_penalty must be > 0, got 0"),
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ({"min_tokens": -1}, "min_tokens must be >= 0, got -1"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be <= max_tokens (4), got 5"),
        ({"logprobs": 21}, "logprobs must be in [0, 20], got 21"),
        ({"prompt_logprobs": -1}, "prompt_logprobs must be in [0, 20], got -1"),
        ({"seed": 1.5}, "seed must be an int or None, got 1.5"),
        ({"stop": ["ok", ""]}, "stop must be a non-empty string"),
        ({"stop_token_ids": [-3]}, "stop_token_ids must be ints >= 0"),
        ({"top_k": 2.0}, "top_k must be an int >= -1, got 2.0"),
    ],
)
def test_invalid_values_name_field_and_range(kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert isinstance(info.value, RequestError)
    assert message in str(info.value)


def test_valid_edges_accepted():
    SamplingParams(temperature=0, top_p=1.0, min_p=1.0, presence_penalty=-2, frequency_penalty=2)
    SamplingParams(max_tokens=None, min_tokens=100, logprobs=20, prompt_logprobs=0, seed=0)


def test_for_child_offsets_seed_and_sets_n_to_one():
    parent = SamplingParams(n=3, seed=10, temperature=0.7, stop="x")
    children = [parent.for_child(i) for i in range(3)]
    assert [c.seed for c in children] == [10, 11, 12]
    assert all(c.n == 1 and c.temperature == 0.7 and c.stop == ["x"] for c in children)
    assert parent.n == 3 and parent.seed == 10
    assert SamplingParams(n=2).for_child(1).seed is None
