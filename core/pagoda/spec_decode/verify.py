"""Verifying drafts inside the model runner: one row of logits per drafted position.

A request verifying ``d`` drafts computed ``1 + d`` query tokens: ``[last token, x_1..x_d]``. The
hidden state at offset ``j`` gives ``p_{j+1}``, the target's distribution of the token after
``x_1..x_j``. Each such position becomes its own sampler row, whose history ends with
``x_1..x_j``, so the sampler's processing (temperature, top-k/top-p/min-p, penalties, min_tokens,
bad words, ...) is the one plain decoding would apply at that position.

Deterministic drafts (``req.draft_probs is None``: n-gram lookup, greedy draft models) are then
verified by sampling every position with the ordinary sampler and keeping the drafts while each
equals the token sampled before it (:func:`accepted_prefix`). With ``q`` one-hot at the draft,
that is the exact speculative-sampling rule: the sampler's draw at a position is ``x_j`` with
probability ``p_j(x_j)`` (accept), and given it is not, it follows ``p_j`` without ``x_j``, which
is ``normalize(max(0, p_j - q_j))`` (the residual). Greedy rows reduce to "keep the argmax prefix".
A seeded request's generator is wound back to just after the draws of the emitted tokens, so its
random stream, and therefore its output, is the one it has without speculation.

Under tensor parallelism every rank runs the verify step's forward pass and its LM head (whose
vocabulary-parallel gather every rank joins); rank 0 alone verifies: the other ranks learn the
outcome from the next step's message, which starts from the accepted tokens.

Drafts that come with the proposer's distributions (``req.draft_probs``, ``[d, V]``) go through
:func:`pagoda.spec_decode.rejection.rejection_sample` with the target's processed probabilities.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from pagoda.tensors import to_device
from pagoda.runner.model_runner import PendingStep, RunnerOutput
from pagoda.sampling.sampler import SamplingRow, needs_output_history, prompt_logprobs
from pagoda.interfaces.proposer import VerifyOutcome
from pagoda.spec_decode.rejection import rejection_sample

if TYPE_CHECKING:
    from pagoda.runner.model_runner import ModelRunner
    from pagoda.request import Request
    from pagoda.sampling.sampler import DeviceSample
    from pagoda.interfaces.scheduler import SchedulerOutput

TopLogprobs = list[tuple[int, float]]


@dataclass
class Verified:
    """One request's verification: the accepted drafts followed by the target's token."""

    num_accepted: int
    token_ids: list[int]  # num_accepted + 1 tokens
    logprobs: list[float] | None = None  # raw logprob of each, when the step computed logprobs
    top_logprobs: list[TopLogprobs | None] | None = None


@dataclass
class _Rewind:
    """A seeded generator's state before the verify step drew one noise row per position."""

    generator: torch.Generator
    state: torch.Tensor
    vocab: int

    def after(self, num_draws: int) -> None:
        """Restore the state, then draw ``num_draws`` rows as the sampler does (one ``[V]`` float32 each)."""
        self.generator.set_state(self.state)
        scratch = torch.empty(self.vocab, dtype=torch.float32, device=self.generator.device)
        for _ in range(num_draws):
            scratch.exponential_(generator=self.generator)


def accepted_prefix(drafts: list[int], sampled: list[int]) -> int:
    """How many leading drafts equal the tokens sampled at their positions."""
    for j, draft in enumerate(drafts):
        if sampled[j] != draft:
            return j
    return len(drafts)


def expand_row(row: SamplingRow, num_drafts: int) -> list[SamplingRow]:
    """The row of each of the ``1 + num_drafts`` positions: position ``j``'s history ends with the
    first ``j`` drafts (``row.output_token_ids`` ends with all of them)."""
    if num_drafts == 0:
        return [row]
    base = len(row.output_token_ids) - num_drafts
    if not needs_output_history(row.params) and row.params.min_tokens <= base:  # no position reads the history
        return [row] * (num_drafts + 1)
    return [dataclasses.replace(row, output_token_ids=row.output_token_ids[: base + j]) for j in range(num_drafts + 1)]


def launch_verify(runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor, sample_rows: list[int],
                  query_starts: list[int], prompt_lps: dict) -> PendingStep:
    """Queue the sampling of a step in which some requests verify drafts (see the module docstring)."""
    requests = [out.requests[i] for i in sample_rows]
    counts = [1 + req.num_draft_tokens for req in requests]  # rows per request: its drafted positions + 1
    logits = _position_logits(runner, out, hidden, sample_rows, query_starts, counts)  # [sum(counts), V]
    if runner.tp.rank > 0:  # the vocab-parallel LM head above met rank 0's; rank 0 alone verifies
        return PendingStep([], None, lambda: [], prompt_lps)
    rows = [r for req, count in zip(requests, counts) for r in expand_row(runner.sampling_row(req), count - 1)]
    runner.mask_rows(logits, requests, counts)  # each drafted position masked after the drafts before it
    exact = _verify_with_draft_probs(runner, requests, counts, logits, rows)
    spans, keep, rewinds = {}, [], {}  # the other requests: the sampler draws at each of their positions
    for req, count, first in zip(requests, counts, _offsets(counts)):
        if req.request_id in exact:
            continue
        spans[req.request_id] = (len(keep), count)
        keep += range(first, first + count)
        rewind = _rewind(rows[first], count, logits.shape[1])  # before the sampler draws
        if rewind is not None:
            rewinds[req.request_id] = rewind
    if keep and len(keep) != len(rows):
        logits = logits[to_device(keep, logits.device)]
    sample = runner.sampler.sample(logits, [rows[r] for r in keep]) if keep else None
    wait = runner.platform.copy_to_host_async(sample.tensors()) if sample is not None else (lambda: [])
    return VerifyStep(requests, sample, wait, prompt_lps, spans, rewinds, exact)


def _position_logits(runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor, sample_rows: list[int],
                     query_starts: list[int], counts: list[int]) -> torch.Tensor:
    """Logits at each sampling request's last ``count`` scheduled tokens (its drafted positions)."""
    index: list[int] = []
    for i, count in zip(sample_rows, counts):
        first = query_starts[i] + out.num_tokens[i] - count
        index.extend(range(first, first + count))
    return runner.model.compute_logits(hidden[to_device(index, hidden.device)])


def _offsets(counts: list[int]) -> list[int]:
    return [sum(counts[:j]) for j in range(len(counts))]


def _rewind(row: SamplingRow, count: int, vocab: int) -> _Rewind | None:
    """Where a seeded sampled request's generator must resume once its accepted count is known."""
    if count == 1 or row.generator is None or row.params.is_greedy:
        return None
    return _Rewind(row.generator, row.generator.get_state(), vocab)


def _verify_with_draft_probs(runner: "ModelRunner", requests: list["Request"], counts: list[int],
                             logits: torch.Tensor, rows: list[SamplingRow]) -> dict[str, Verified]:
    """Standard rejection sampling for the requests whose drafts came with ``q`` (waits for the device)."""
    found: dict[str, Verified] = {}
    start = 0
    for req, count in zip(requests, counts):
        probs = getattr(req, "draft_probs", None)
        if probs is not None and count > 1:
            found[req.request_id] = _rejection_verify(runner, req, logits[start : start + count],
                                                      rows[start : start + count], probs)
        start += count
    return found


def _rejection_verify(runner: "ModelRunner", req: "Request", logits: torch.Tensor, rows: list[SamplingRow],
                      draft_probs: torch.Tensor) -> Verified:
    d, vocab = len(rows) - 1, logits.shape[1]
    target = runner.sampler.process(logits, rows).softmax(dim=-1)  # [d + 1, V]
    generator = rows[0].generator or runner.sampler._generator(logits.device)  # as unseeded rows draw
    uniform = torch.rand((1, d), generator=generator, device=logits.device)
    noise = torch.empty((1, vocab), device=logits.device).exponential_(generator=generator)
    q = draft_probs.to(device=logits.device, dtype=torch.float32)[None, :d, :vocab]
    ids = torch.tensor([req.token_ids[req.num_tokens - d:]], device=logits.device)
    greedy = torch.tensor([rows[0].params.is_greedy], device=logits.device)
    tokens = rejection_sample(target[None], ids, torch.tensor([d], device=logits.device), q, greedy, uniform,
                              noise.clamp_min_(torch.finfo(torch.float32).tiny))[0]
    verified = Verified(len(tokens) - 1, tokens)
    k = rows[0].params.logprobs
    if k is not None:
        scored = prompt_logprobs(logits[: len(tokens)], tokens, k)
        verified.logprobs = [lp for lp, _ in scored]
        verified.top_logprobs = [top for _, top in scored]
    return verified


class VerifyStep(PendingStep):
    """A launched step with drafts: :meth:`result` decides how many drafts each request keeps."""

    def __init__(self, requests: list["Request"], sample: "DeviceSample | None", wait: Callable[[], list[torch.Tensor]],
                 prompt_lps: dict, spans: dict[str, tuple[int, int]], rewinds: dict[str, _Rewind],
                 exact: dict[str, Verified]) -> None:
        super().__init__(requests, sample, wait, prompt_lps)  # (self.rows: never read, the step is resolved at once)
        self.spans, self.rewinds, self.exact = spans, rewinds, exact

    @functools.cached_property
    def drafts(self) -> dict[str, list[int]]:
        """Each request's drafts, taken from it when first needed: the values of drafts that went into
        the step on the device are filled in after its launch (:meth:`Speculator.read_drafts`)."""
        return {req.request_id: req.token_ids[req.draft_span] for req in self.requests}

    def result(self) -> RunnerOutput:
        result = RunnerOutput(prompt_logprobs=self._prompt_logprobs)
        sampled = self.sample.to_output(self._wait()) if self.sample is not None else None
        for req in self.requests:
            rid = req.request_id
            verified = self.exact.get(rid) or self._verified(rid, sampled)
            result.sampled[rid] = verified.token_ids[-1]
            if self.drafts[rid]:
                result.verified[rid] = verified
            elif verified.logprobs is not None:
                result.logprobs[rid] = verified.logprobs[0]
                if verified.top_logprobs is not None and verified.top_logprobs[0] is not None:
                    result.top_logprobs[rid] = verified.top_logprobs[0]
        return result

    def outcome(self) -> VerifyOutcome | None:
        """The requests whose drafts the sampler verifies (not those with draft distributions), for
        a proposer's next round on the device (None: none)."""
        ids = [rid for rid in self.spans if self.drafts[rid]]
        if self.sample is None or not ids:
            return None
        return VerifyOutcome(ids, [self.drafts[rid] for rid in ids], self.sample.token_ids,
                             [self.spans[rid][0] for rid in ids])

    def _verified(self, rid: str, sampled) -> Verified:
        row, count = self.spans[rid]
        tokens = sampled.token_ids[row : row + count]
        accepted = accepted_prefix(self.drafts[rid], tokens)
        rewind = self.rewinds.get(rid)
        if rewind is not None:
            rewind.after(accepted + 1)
        verified = Verified(accepted, tokens[: accepted + 1])
        if sampled.logprobs:
            verified.logprobs = sampled.logprobs[row : row + accepted + 1]
            verified.top_logprobs = sampled.top_logprobs[row : row + accepted + 1]  # None where not asked
        return verified
