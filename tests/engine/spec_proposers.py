"""Test proposers for speculative decoding, registered in-process by the ``proposers`` fixture.

- ``oracle``: proposes the tokens a reference run (without speculation) produced next, with one
  draft in three changed, so that rounds end in both acceptances and rejections even for sampled
  requests (whose drafts a tiny random model rarely guesses otherwise).
- ``wrong``: proposes tokens the target never picks greedily (a back-off test).
- ``sampled-q``: drafts drawn from a random distribution ``q`` that it returns (``Proposal.probs``).
"""

from __future__ import annotations

import types

import torch

from pagoda.hookspecs import hookimpl
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer
from tiny_models import VOCAB


class OracleProposer(Proposer):
    reference: dict[str, list[int]] = {}  # request id -> prompt + the output of a run without speculation

    def __init__(self, config) -> None:
        super().__init__(config)
        self.calls = 0

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        drafts = []
        for inp in inputs:
            self.calls += 1
            ahead = list(self.reference.get(inp.request_id, [])[len(inp.token_ids) : len(inp.token_ids) + k])
            if ahead and self.calls % 3 == 0:  # a wrong draft somewhere in one proposal in three
                j = self.calls % len(ahead)
                ahead[j] = (ahead[j] + 1) % VOCAB
            drafts.append(ahead[: inp.max_drafts or k])
        return Proposal(drafts)


class WrongProposer(Proposer):
    """Proposes copies of ``token``, which the test picks among those its reference run never produced."""

    token = 0

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        return Proposal([[self.token] * (inp.max_drafts or k) for inp in inputs])


class SampledQProposer(Proposer):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.generator = torch.Generator().manual_seed(5)

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        q = torch.rand((len(inputs), k, VOCAB), generator=self.generator) ** 4
        q /= q.sum(-1, keepdim=True)
        drafts = torch.multinomial(q.view(-1, VOCAB), 1, generator=self.generator).view(len(inputs), k)
        return Proposal([row[: inp.max_drafts or k] for row, inp in zip(drafts.tolist(), inputs)], probs=q)


def proposer_module() -> types.SimpleNamespace:
    def register(register):
        register("oracle", OracleProposer)
        register("wrong", WrongProposer)
        register("sampled-q", SampledQProposer)

    return types.SimpleNamespace(register_proposers=hookimpl(register))
