"""Prompt lookup (n-gram) proposer: no extra model.

The last ``n`` tokens of a sequence (n from ``prompt_lookup_max`` down to ``prompt_lookup_min``)
are searched for earlier in the same sequence (prompt and output); the tokens that followed the
most recent earlier occurrence are the drafts. Works where outputs copy from the context:
summaries, code edits, retrieval answers, rewrites.

Each request keeps an index (n-gram -> where it last ended), extended by the tokens added since
the previous step, so a lookup costs a few dictionary probes whatever the sequence length.
:func:`lookup` is the same search written directly (the reference the index is tested against).
"""

from __future__ import annotations

from typing import Sequence

import torch

from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer


class NgramIndex:
    """Where each n-gram (``min_n <= n <= max_n``) of a growing sequence last ended."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.last_end: dict[tuple[int, ...], int] = {}  # n-gram -> index of its last token
        self.num_indexed = 0  # n-grams ending before this index are in ``last_end``

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """The ``k`` tokens after the latest earlier occurrence of the longest matching suffix."""
        length = len(tokens)
        if length < self.num_indexed:  # not the sequence indexed so far
            self.last_end.clear()
            self.num_indexed = 0
        self._extend(tokens, length - 1)  # n-grams ending before the last token: "earlier" ones
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            end = self.last_end.get(tuple(tokens[length - n :]))
            if end is not None:
                return list(tokens[end + 1 : end + 1 + k])
        return []

    def _extend(self, tokens: Sequence[int], upto: int) -> None:
        for end in range(self.num_indexed, upto):
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self.last_end[tuple(tokens[end - n + 1 : end + 1])] = end
        self.num_indexed = max(self.num_indexed, upto)


class NgramProposer(Proposer):
    description = "prompt lookup: drafts copied from the sequence's own earlier n-gram matches"
    supports_tensor_parallel = True  # token ids only, on rank 0

    def __init__(self, config) -> None:
        super().__init__(config)
        self._indexes: dict[str, NgramIndex] = {}

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        return Proposal([self._index(inp.request_id).propose(inp.token_ids, inp.max_drafts or k) for inp in inputs])

    def release(self, request_id: str) -> None:
        self._indexes.pop(request_id, None)

    def _index(self, request_id: str) -> NgramIndex:
        index = self._indexes.get(request_id)
        if index is None:
            index = self._indexes[request_id] = NgramIndex(self.config.prompt_lookup_min, self.config.prompt_lookup_max)
        return index


def lookup(tokens: Sequence[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The ``k`` tokens after the latest earlier occurrence of the longest matching suffix n-gram."""
    seq = torch.as_tensor(list(tokens), dtype=torch.int64)  # [L]
    for n in range(min(max_n, len(seq) - 1), min_n - 1, -1):
        windows = seq[:-1].unfold(0, n, 1)  # [L - n, n]: every n-gram that starts before the suffix does
        hits = (windows == seq[-n:]).all(dim=1).nonzero()
        if len(hits):
            start = int(hits[-1]) + n  # the latest earlier occurrence
            return seq[start:start + k].tolist()
    return []
