"""The n-gram (prompt lookup) proposer and --speculative-config parsing."""

from __future__ import annotations

import pytest
import torch

from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import ProposalInput
from pagoda.speculative_config import SpeculativeConfig, parse_speculative_config
from pagoda.spec_decode.ngram import NgramProposer, lookup


def test_lookup_copies_what_followed_the_latest_longest_match() -> None:
    #          0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [5, 6, 7, 8, 9, 1, 6, 7, 3, 4, 6, 7]
    assert lookup(tokens, k=3, min_n=1, max_n=3) == [3, 4, 6]  # "6 7" last seen at 6..7, followed by 3 4 6
    assert lookup([1, 2, 3, 9, 1, 2, 3], k=2, min_n=2, max_n=4) == [9, 1]  # the 3-gram "1 2 3" wins
    assert lookup([1, 2, 3, 4], k=2, min_n=1, max_n=3) == []  # nothing repeats
    assert lookup([4, 4], k=5, min_n=1, max_n=3) == [4]  # runs to the end of the sequence
    assert lookup([7], k=2, min_n=1, max_n=3) == []


def test_min_n_limits_short_matches() -> None:
    assert lookup([1, 2, 9, 3, 2], k=2, min_n=2, max_n=3) == []  # only the 1-gram "2" repeats
    assert lookup([1, 2, 9, 3, 2], k=2, min_n=1, max_n=3) == [9, 3]


def test_proposer_keeps_input_order() -> None:
    config = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1}')
    proposal = NgramProposer(config).propose([ProposalInput("a", [1, 2, 1]), ProposalInput("b", [3, 4])], k=2)
    assert proposal.token_ids == [[2, 1], []] and proposal.probs is None


def test_config_parsing_and_errors() -> None:
    config = parse_speculative_config({"method": "draft", "num_speculative_tokens": 3, "model": "/m", "temp": 1})
    assert config == SpeculativeConfig("draft", 3, model="/m", options={"temp": 1})
    assert parse_speculative_config(None) is None
    for bad, match in [("{", "not valid JSON"), ("[1]", "must be a JSON object"),
                       ('{"method": "ngram"}', 'needs "method" and "num_speculative_tokens"'),
                       ('{"method": "ngram", "num_speculative_tokens": 0}', "from 1 to 16"),
                       ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, '
                        '"prompt_lookup_max": 2}', "1 <= min <= max")]:
        with pytest.raises(ConfigError, match=match):
            parse_speculative_config(bad)


def test_ngram_is_registered_through_the_proposer_hook() -> None:
    from pagoda.plugins.manager import PluginManager

    proposers = PluginManager(entry_points=False).registry("proposer")
    assert proposers.get("ngram") is NgramProposer


def test_incremental_index_finds_what_lookup_finds() -> None:
    """The per-request index, grown token by token (as a request generates), proposes exactly what
    the direct search does at every length; a shorter sequence (not the one indexed) starts over."""
    from pagoda.spec_decode.ngram import NgramIndex

    gen = torch.Generator().manual_seed(0)
    for vocab, (lo, hi) in ((4, (1, 3)), (9, (2, 5)), (30, (1, 1))):
        tokens = torch.randint(0, vocab, (160,), generator=gen).tolist()
        index = NgramIndex(lo, hi)
        for length in range(1, len(tokens) + 1, 3):
            assert index.propose(tokens[:length], 4) == lookup(tokens[:length], 4, lo, hi), (vocab, length)
        other = [9, 9, 1, 2, 9, 9]
        assert index.propose(other, 3) == lookup(other, 3, lo, hi)


def test_proposer_honours_each_budget_and_forgets() -> None:
    config = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1}')
    proposer = NgramProposer(config)
    seq = [1, 2, 3, 4, 5, 6, 1]
    proposal = proposer.propose([ProposalInput("a", seq, max_drafts=2), ProposalInput("b", seq)], k=4)
    assert proposal.token_ids == [[2, 3], [2, 3, 4, 5]]
    proposer.release("a")
    assert "a" not in proposer._indexes and "b" in proposer._indexes
