"""Proposer: the draft side of speculative decoding.

Each step, for the requests that speculate, a proposer suggests up to ``k`` next tokens; the
engine verifies all drafts in one target forward pass and keeps the longest prefix the
rejection sampler accepts (:mod:`pagoda.spec_decode.rejection`), which preserves the target
model's distribution exactly whatever the proposer suggests. A proposer only affects speed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import torch

from pagoda.interfaces.base import Capability


@dataclass(frozen=True)
class ProposalInput:
    """One request that may speculate this step."""

    request_id: str
    token_ids: Sequence[int]  # prompt + output so far, ending with the last sampled token
    # proposers with ``needs_hidden_states``: the target's final hidden states [n, hidden_size] of the
    # positions ``len(token_ids) - 1 - n .. len(token_ids) - 2`` (the last computed ones), those computed
    # since the request last proposed (the prompt the first time); None when there are none
    hidden: torch.Tensor | None = None
    max_drafts: int | None = None  # this request's budget this step (<= k; back-off lowers it); None: k


@dataclass(frozen=True)
class ProposerContext:
    """The target engine a proposer serves (given to :meth:`Proposer.attach` once, at start)."""

    platform: Any  # pagoda.interfaces.Platform: where the target runs
    engine_config: Any  # pagoda.config.EngineConfig of the target
    hf_config: Any  # the target model's HF config (vocab_size, ...)
    dtype: torch.dtype  # the target's weights dtype
    max_model_len: int
    num_kv_blocks: int  # the target's KV cache blocks (of engine_config.block_size tokens)
    model: Any = None  # the target CausalLM (EAGLE heads use its embedding and LM head)


@dataclass
class Proposal:
    """Drafts for each input, in input order: ``token_ids[i]`` has 0..k tokens."""

    token_ids: list[list[int]]
    # [num_inputs, k, vocab] distributions the drafts were sampled from; None: deterministic
    # drafts (each one certain under the proposer, e.g. n-gram lookup)
    probs: torch.Tensor | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    # drafts still being computed on the device (a round queued behind the verify step): the inputs it
    # names hold placeholders of the right count in ``token_ids``; None: every draft is known
    on_device: DeviceDrafts | None = None


@dataclass
class DeviceDrafts:
    """Drafts the device is still computing. Input ``i`` of :attr:`index` drafted the tokens at flat
    positions ``index[i]`` of ``tokens``: the engine copies them into its verify step's input ids on the
    device, queued behind the round, so it need not wait for the round before launching the step.
    :attr:`read` waits for the round and returns each such input's drafts (called once, after that
    launch; the proposer updates its own state then)."""

    tokens: torch.Tensor  # on the device, int64, flat
    index: dict[int, list[int]]
    read: Callable[[], dict[int, list[int]]]


@dataclass(frozen=True)
class VerifyOutcome:
    """A verify step queued on the device, not yet read: what a proposer needs to start its next
    round there (:meth:`Proposer.prelaunch`). Request ``i`` verified ``drafts[i]``; the target's
    tokens sampled at its drafted positions and after them (``1 + len(drafts[i])``) start at
    ``offsets[i]`` of ``sampled``. Its outcome is the usual one for deterministic drafts: the
    leading drafts equal to the token sampled at their position are accepted, then the sampled
    token after them."""

    request_ids: list[str]
    drafts: list[list[int]]
    sampled: torch.Tensor  # [N] long, on the device
    offsets: list[int]


class Proposer(Capability, ABC):
    """Suggests draft tokens. ``config`` is the parsed ``--speculative-config``."""

    needs_hidden_states: ClassVar[bool] = False  # True: the engine fills ProposalInput.hidden
    # True: runs beside a tensor-parallel target, on rank 0 alone (token ids, a model of its own built
    # unsharded, the target's hidden states, or the target's vocabulary weights whole via
    # pagoda.spec_decode.vocab; not the target's sharded layers); the ranks verify together.
    supports_tensor_parallel: ClassVar[bool] = False

    def __init__(self, config: Any) -> None:
        self.config = config

    def attach(self, context: ProposerContext) -> None:
        """Prepare to serve the target engine in ``context`` (a draft model loads here); default: nothing."""

    @abstractmethod
    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        """Up to ``k`` draft tokens per input, and at most ``input.max_drafts`` where set (fewer,
        or none, where the proposer has no guess). Called once per engine step with the requests
        that speculate in it; ``token_ids`` never contain unverified tokens."""

    def prelaunch(self, outcome: VerifyOutcome, k: int) -> None:
        """Optionally queue the next round's drafts behind a verify step (``outcome``), before the host
        reads it, so that the device goes on from one to the other; the next :meth:`propose` then
        returns the drafts queued for the requests whose outcome they assumed. Default: nothing."""

    def release(self, request_id: str) -> None:
        """Forget per-request state once the request finished (default: none kept)."""
