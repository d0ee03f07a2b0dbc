"""logit_bias, allowed_token_ids and bad words in the sampler (no model): exact logits, skipping,
caching, validation messages, and how bad words become token sequences."""

from __future__ import annotations

import pytest
import torch

from pagoda.sampling.sampler import Sampler, SamplingRow, needs_output_history
from pagoda.sampling.token_controls import bad_words_token_ids, banned_next_tokens, resolve_token_controls
from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams as SP

V = 40
INF = float("-inf")


def logits(n: int) -> torch.Tensor:
    return torch.randn(n, V, generator=torch.Generator().manual_seed(0))  # [n, V]


def row(params: SP, output=(), request_id: str | None = None) -> SamplingRow:
    return SamplingRow(params, [1, 2], list(output), None, None, request_id=request_id)


def test_each_control_changes_exactly_its_row_and_tokens() -> None:
    x = logits(4)
    rows = [row(SP(temperature=0)),
            row(SP(temperature=0, logit_bias={3: 2.5, 7: -100})),
            row(SP(temperature=0, allowed_token_ids=[0, 5, 9])),
            row(SP(temperature=0, bad_words_token_ids=[[11], [4, 5, 6], [5, 8]]), output=[9, 4, 5])]
    got = Sampler().process(x, rows)
    expected = x.clone()
    expected[1, 3] += 2.5
    expected[1, 7] -= 100
    keep = torch.zeros(V, dtype=torch.bool)
    keep[[0, 5, 9]] = True
    expected[2] = expected[2].masked_fill(~keep, INF)
    expected[3, [11, 6, 8]] = INF  # 11 always; 6 after "4 5"; 8 after "5"
    assert torch.equal(got, expected)


def test_a_batch_without_controls_is_not_copied() -> None:
    x = logits(2)
    rows = [row(SP(temperature=0)), row(SP(temperature=0, stop_token_ids=[3]))]
    assert Sampler().process(x, rows) is x  # nothing to apply: no clone, no mask built


def test_controls_combine_with_temperature_and_sampling_respects_them() -> None:
    x = logits(64)
    params = SP(temperature=1.5, seed=1, allowed_token_ids=[2, 3, 30], logit_bias={30: -100})
    rows = [row(params) for _ in range(64)]
    sampled = Sampler(seed=3).sample(x, rows).to_output().token_ids
    assert set(sampled) <= {2, 3} and len(set(sampled)) == 2  # 30 is allowed but biased away


def test_per_request_tensors_are_cached_and_released() -> None:
    sampler = Sampler()
    params = SP(temperature=0, logit_bias={1: 1.0}, allowed_token_ids=[1, 2])
    sampler.process(logits(1), [row(params, request_id="r1")])
    cached = sampler.controls._cache["r1"]
    sampler.process(logits(1), [row(params, request_id="r1")])
    assert sampler.controls._cache["r1"] is cached
    sampler.release("r1")
    assert "r1" not in sampler.controls._cache


@pytest.mark.parametrize("bad, output, banned", [
    ([[7]], [], [7]),
    ([[4, 5, 6]], [1, 4, 5], [6]),
    ([[4, 5, 6]], [4, 5, 1], []),
    ([[4, 5, 6]], [5], []),  # too short to end with the prefix
    ([[5, 5]], [5], [5]),
])
def test_banned_next_tokens(bad, output, banned) -> None:
    assert banned_next_tokens(bad, output) == banned


def test_multi_token_bad_words_need_the_output_history() -> None:
    assert needs_output_history(SP(bad_words_token_ids=[[1, 2]]))
    assert not needs_output_history(SP(bad_words_token_ids=[[1]], logit_bias={1: 1.0}, allowed_token_ids=[1]))


def byte_level_bpe():
    """A small byte-level BPE tokenizer (GPT-2 style): "hello" and " hello" are different tokens."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["hello world, say hello to the world"] * 20, vocab_size=300, min_frequency=1,
                            show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)


def test_bad_words_are_tokenized_plain_and_after_a_space() -> None:
    tok = byte_level_bpe()
    plain, spaced = tok.encode("hello", add_special_tokens=False), tok.encode(" hello", add_special_tokens=False)
    assert plain != spaced
    assert bad_words_token_ids(["  hello"], tok) == [plain, spaced]
    resolved = resolve_token_controls(SP(bad_words=["hello"], bad_words_token_ids=[[3]]), tok, len(tok))
    assert resolved.bad_words_token_ids == [[3], plain, spaced] and resolved.bad_words is None


@pytest.mark.parametrize("kwargs, message", [
    ({"logit_bias": {5: 101}}, "logit_bias values must be numbers in [-100, 100], got 101 for token 5"),
    ({"logit_bias": {"x": 1}}, "logit_bias keys must be token ids (ints >= 0), got 'x'"),
    ({"logit_bias": {-1: 1}}, "logit_bias keys must be token ids"),
    ({"allowed_token_ids": []}, "allowed_token_ids must not be empty"),
    ({"allowed_token_ids": [1, -2]}, "allowed_token_ids must hold token ids (ints >= 0), got -2"),
    ({"bad_words": ["ok", " "]}, "bad_words must be a list of non-blank strings"),
    ({"bad_words_token_ids": [[]]}, "bad_words_token_ids must hold non-empty token sequences"),
    ({"n": 3, "best_of": 2}, "best_of must be >= 3, got 2"),
    ({"best_of": 2, "temperature": 0}, "best_of > 1 needs sampling (temperature > 0), got best_of=2"),
])
def test_invalid_controls_name_the_field(kwargs, message) -> None:
    with pytest.raises(RequestError) as info:
        SP(**kwargs)
    assert message in str(info.value)


def test_string_keys_of_logit_bias_are_token_ids_and_ids_are_checked_against_the_vocabulary() -> None:
    assert SP(logit_bias={"12": -3}).logit_bias == {12: -3.0}
    with pytest.raises(RequestError, match=r"allowed_token_ids has token ids outside the vocabulary \[0, 40\): \[40, 99\]"):
        SP(allowed_token_ids=[1, 99, 40]).check_vocab(V)
    with pytest.raises(RequestError, match="bad_words needs the model's tokenizer"):
        resolve_token_controls(SP(bad_words=["x"]), None, V)
