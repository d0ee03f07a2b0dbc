"""Guided decoding inside the model runner: one grammar matcher per guided request, one bitmask per step.

The runner calls :meth:`GuidedSampling.mask` once per step, after it has queued the forward pass
and the logits on the device and before it queues sampling: each guided request's matcher first
catches up with the tokens the request accepted since the last step, then the backend fills the
rows of a CPU bitmask (xgrammar does it on native threads), and the packed bitmask is copied to
the device and applied there. On an asynchronous device (CUDA) the CPU work thus overlaps the
step's forward pass. With overlapped steps the previous step may still be in flight when this one
is launched (its last token is a placeholder on the host; the forward pass took it from the
device): the matcher then reads that step's tokens itself (``prev.result()``, which waits only for
the previous step, queued before this forward pass), so guided steps keep the cross-step overlap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pagoda.errors import RequestError
from pagoda.guided.bitmask import allocate_bitmask, apply_bitmask
from pagoda.interfaces.guided import GrammarMatcher, GuidedDecodingBackend

if TYPE_CHECKING:
    from pagoda.engine.model_runner import PendingStep
    from pagoda.engine.request import Request
    from pagoda.guided.params import GuidedDecodingParams

logger = logging.getLogger("pagoda")


@dataclass
class MatcherState:
    matcher: GrammarMatcher
    consumed: int = 0  # output tokens fed to the matcher so far
    off_grammar: bool = False  # a token the grammar forbids was accepted (e.g. min_tokens masked its end)


class GuidedSampling:
    """Grammar matchers of one engine's guided requests; masks a step's logits."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int], default_backend: str = "auto") -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = stop_token_ids
        self.default_backend = default_backend
        self.backends: dict[str, GuidedDecodingBackend] = {}  # built on first use
        self.states: dict[str, MatcherState] = {}  # request id -> its matcher
        self._bitmask = allocate_bitmask(0, vocab_size)

    def mask(self, logits: torch.Tensor, requests: list["Request"], prev: "PendingStep | None" = None) -> None:
        """Forbid, in ``logits`` (``[len(requests), V]``), the tokens each guided request's grammar
        forbids. ``prev``: the step still in flight, whose tokens are placeholders on the host."""
        rows = [i for i, req in enumerate(requests) if req.sampling_params.guided_decoding is not None]
        if not rows:
            return
        bitmask = self._bitmask_rows(len(rows))
        by_backend: dict[str, tuple[list[GrammarMatcher], list[int]]] = {}
        for slot, i in enumerate(rows):
            state = self._advance(requests[i], prev)
            if state.off_grammar or state.matcher.is_terminated():
                continue  # the row stays all-allowed (-1)
            name = self._backend_name(requests[i].sampling_params.guided_decoding)
            matchers, slots = by_backend.setdefault(name, ([], []))
            matchers.append(state.matcher)
            slots.append(slot)
        for name, (matchers, slots) in by_backend.items():
            self.backends[name].fill_bitmasks(matchers, bitmask, slots)
        apply_bitmask(logits, bitmask, rows)

    def mask_verify(self, logits: torch.Tensor, requests: list["Request"], counts: list[int]) -> None:
        """:meth:`mask` for a speculative verify step: ``counts[i]`` rows of ``logits`` belong to
        ``requests[i]`` in order; row ``j`` of a request verifying drafts is masked by its grammar
        after its first ``j`` drafts. The matcher accepts the drafts to fill those rows, then rolls
        them back (the tokens the target keeps are fed later, as any output)."""
        starts = [sum(counts[:i]) for i in range(len(counts))]
        guided = [i for i, req in enumerate(requests) if req.sampling_params.guided_decoding is not None]
        if not guided:
            return
        rows = [starts[i] + j for i in guided for j in range(counts[i])]
        bitmask = self._bitmask_rows(len(rows))
        slot = 0
        for i in guided:
            state = self._advance(requests[i])
            if not (state.off_grammar or state.matcher.is_terminated()):
                drafts = requests[i].token_ids[requests[i].num_tokens - counts[i] + 1:] if counts[i] > 1 else []
                self._fill_through_drafts(state.matcher, drafts, bitmask, slot)
            slot += counts[i]
        apply_bitmask(logits, bitmask, rows)

    def can_roll_back(self, request_id: str) -> bool:
        """Whether the request's matcher exists and can undo accepted tokens (needed to verify drafts)."""
        state = self.states.get(request_id)
        return state is not None and type(state.matcher).rollback is not GrammarMatcher.rollback

    def release(self, request_id: str) -> None:
        self.states.pop(request_id, None)

    @staticmethod
    def _fill_through_drafts(matcher: GrammarMatcher, drafts: list[int], bitmask: torch.Tensor, slot: int) -> None:
        """Rows ``slot + j``: the tokens allowed after the first ``j`` drafts. A draft the grammar
        forbids cannot be sampled (its row masks it), so the rows after it stay all-allowed."""
        accepted = 0
        for j in range(len(drafts) + 1):
            if matcher.is_terminated():
                break
            matcher.fill_bitmask(bitmask, slot + j)
            if j == len(drafts) or not matcher.accept(drafts[j]):
                break
            accepted += 1
        if accepted:
            matcher.rollback(accepted)

    def _advance(self, req: "Request", prev: "PendingStep | None" = None) -> MatcherState:
        """The request's matcher, fed every output token it has not seen yet (a trailing placeholder
        read from ``prev``, the step in flight that samples it)."""
        state = self.states.get(req.request_id)
        if state is None:
            state = MatcherState(self._backend(req.sampling_params.guided_decoding).new_matcher(req.sampling_params.guided_decoding))
            self.states[req.request_id] = state
        new = req.output_token_ids[state.consumed : req.num_output_tokens - req.num_draft_tokens]  # no drafts
        if new and new[-1] < 0 and prev is not None and req.request_id in prev.rows:
            new = [*new[:-1], in_flight_token(prev, req.request_id)]
        for token in new:
            if token < 0:
                raise RuntimeError("guided decoding needs the previous step's tokens: the step that samples "
                                   f"request {req.request_id}'s last token was not passed to mask()")
            if not state.off_grammar and not state.matcher.accept(token):
                state.off_grammar = True
                logger.warning("request %s: token %d is outside its grammar; the rest of it is unguided",
                               req.request_id, token)
        state.consumed += len(new)
        return state

    def _bitmask_rows(self, num_rows: int) -> torch.Tensor:
        if self._bitmask.shape[0] < num_rows:
            self._bitmask = allocate_bitmask(max(num_rows, 2 * self._bitmask.shape[0]), self.vocab_size)
        self._bitmask[:num_rows].fill_(-1)
        return self._bitmask

    def _backend_name(self, params: "GuidedDecodingParams") -> str:
        return params.backend or self.default_backend

    def _backend(self, params: "GuidedDecodingParams") -> GuidedDecodingBackend:
        name = self._backend_name(params)
        if name not in self.backends:
            self.backends[name] = backend_class(name)(self.tokenizer, self.vocab_size, self.stop_token_ids)
        return self.backends[name]


def backend_class(name: str | None) -> type[GuidedDecodingBackend]:
    """The registered backend class for ``name`` (``auto``/None: the best usable one)."""
    from pagoda.plugins.manager import get_plugin_manager

    try:
        return get_plugin_manager().registry("guided_decoding").select(name)[1]
    except (LookupError, ValueError) as exc:
        raise RequestError(str(exc)) from exc


def validate_guided(params: "GuidedDecodingParams", default_backend: str = "auto") -> None:
    """The front end's check of a request's grammar: RequestError naming what is wrong."""
    backend_class(params.backend or default_backend).validate(params)


def guided_sampling_for(parts: Any) -> GuidedSampling | None:
    """The engine's GuidedSampling (``parts``: EngineParts); None without a tokenizer (no grammar can apply)."""
    if parts.tokenizer is None:
        return None
    eos = getattr(parts.tokenizer, "eos_token_id", None)
    if eos is None:
        eos = getattr(parts.hf_config, "eos_token_id", None)
    stops = [t for t in (eos if isinstance(eos, (list, tuple)) else [eos]) if t is not None]
    return GuidedSampling(parts.tokenizer, parts.hf_config.vocab_size, stops, parts.config.guided_decoding_backend)


def in_flight_token(prev: "PendingStep", request_id: str) -> int:
    """The token the in-flight step ``prev`` samples for a request (waits for that step only)."""
    return prev.result().sampled[request_id]
