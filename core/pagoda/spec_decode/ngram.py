"""Prompt lookup (n-gram) proposer: no extra model.

The last ``n`` tokens of a sequence (n from ``prompt_lookup_max`` down to ``prompt_lookup_min``)
are searched for earlier in the same sequence (prompt and output); the tokens that followed the
most recent earlier occurrence are the drafts. Works where outputs copy from the context:
summaries, code edits, retrieval answers, rewrites.
"""

from __future__ import annotations

from typing import Sequence

import torch

from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer


class NgramProposer(Proposer):
    description = "prompt lookup: drafts copied from the sequence's own earlier n-gram matches"

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        lo, hi = self.config.prompt_lookup_min, self.config.prompt_lookup_max
        return Proposal([lookup(inp.token_ids, k, lo, hi) for inp in inputs])


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
