"""Guided decoding backends: grammar engines that say which tokens may come next.

A backend turns a request's :class:`~pagoda.sampling_params.GuidedDecodingParams` into a
:class:`GrammarMatcher` (one per request). Each step the engine asks every guided request's
matcher to fill its row of a token bitmask, masks the logits with it before sampling, and feeds
the matcher the tokens the request accepted.

The bitmask format is the one xgrammar and llguidance share: ``int32`` of shape
``[num_rows, ceil(vocab_size / 32)]`` on the CPU; bit ``t % 32`` of word ``t // 32`` set means
token ``t`` is allowed (:func:`pagoda.guided.bitmask.apply_bitmask` applies it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from pagoda.interfaces.base import Capability

if TYPE_CHECKING:
    from pagoda.sampling_params import GuidedDecodingParams


class GrammarMatcher(ABC):
    """The grammar state of one request."""

    @abstractmethod
    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) if the grammar forbids it."""

    @abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into ``bitmask[row]`` (``[num_rows, words]`` int32, CPU)."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """Whether the grammar is complete and its stop token accepted: nothing may follow."""

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (speculative drafts the target rejected)."""
        raise NotImplementedError(f"{type(self).__name__} cannot roll back accepted tokens")


class GuidedDecodingBackend(Capability, ABC):
    """A grammar engine, built once per engine for its tokenizer.

    ``vocab_size`` is the model's logits width (it may exceed the tokenizer's length);
    ``stop_token_ids`` end the output once the grammar is complete.
    """

    needs_tokenizer: ClassVar[bool] = True

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = stop_token_ids

    @classmethod
    @abstractmethod
    def validate(cls, params: "GuidedDecodingParams") -> None:
        """Raise ``RequestError`` naming what is wrong with the schema/regex/grammar (no tokenizer
        needed: the front end calls this before the request reaches the engine)."""

    @abstractmethod
    def new_matcher(self, params: "GuidedDecodingParams") -> GrammarMatcher:
        """A matcher at the start of the grammar (may compile it; compiled grammars may be cached)."""

    def fill_bitmasks(self, matchers: list[GrammarMatcher], bitmask: torch.Tensor, rows: list[int]) -> None:
        """Fill ``bitmask[rows[i]]`` from ``matchers[i]``; backends may override to do it in parallel."""
        for matcher, row in zip(matchers, rows):
            matcher.fill_bitmask(bitmask, row)
