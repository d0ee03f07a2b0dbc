"""Per-token controls of a request in the sampler: ``allowed_token_ids``, ``bad_words``, ``logit_bias``.

Semantics (applied to a row's logits after min_tokens and before the penalties and temperature,
so they shape what is sampled while the reported logprobs stay those of the raw model):

- ``allowed_token_ids`` (vLLM): every other token's logit is set to -inf.
- ``bad_words`` (vLLM): each word is tokenized as written and with a leading space (the form it
  takes inside a sentence; kept when it tokenizes differently), without special tokens
  (:func:`bad_words_token_ids`). A one-token sequence is never sampled; for a longer one, its last
  token is banned whenever the request's output so far ends with the rest of the sequence, so the
  whole sequence can never be completed. Only output tokens count (not the prompt).
- ``logit_bias`` (OpenAI): the bias of each listed token is added to its logit (-100 bans it in
  practice, +100 all but forces it).

Per-request tensors (the allowed-token mask, the bias ids and values) are built once, on the
logits' device, and kept until the request is released; a step with no such request costs one
scan of the rows' params.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Sequence

import torch

from pagoda.tensors import fill_entries, to_device
from pagoda.errors import RequestError

if TYPE_CHECKING:
    from pagoda.sampling.sampler import SamplingRow
    from pagoda.sampling_params import SamplingParams

NEG_INF = float("-inf")


def uses_token_controls(p: "SamplingParams") -> bool:
    """Whether ``p`` sets any of logit_bias, allowed_token_ids or bad words."""
    return bool(p.logit_bias or p.allowed_token_ids or p.bad_words_token_ids)


def reads_output_tokens(p: "SamplingParams") -> bool:
    """Whether the controls of ``p`` depend on earlier output tokens (a bad word of two or more tokens)."""
    return any(len(seq) > 1 for seq in p.bad_words_token_ids or ())


def bad_words_token_ids(words: Sequence[str], tokenizer: Any) -> list[list[int]]:
    """The token sequences a request's ``bad_words`` ban (see the module docstring); no duplicates."""
    if tokenizer is None:
        raise RequestError("bad_words needs the model's tokenizer to find the words' tokens; pass "
                           "bad_words_token_ids instead, or run without skip_tokenizer_init")
    found: list[list[int]] = []
    for word in words:
        for text in (word.lstrip(), " " + word.lstrip()):
            ids = list(tokenizer.encode(text, add_special_tokens=False))
            if ids and ids not in found:
                found.append(ids)
    return found


def resolve_token_controls(params: "SamplingParams", tokenizer: Any, vocab_size: int) -> "SamplingParams":
    """The params the engine core gets: ``bad_words`` tokenized into ``bad_words_token_ids`` (on a
    copy), every token id checked against the vocabulary (RequestError naming the field)."""
    if params.bad_words:
        ids = list(params.bad_words_token_ids or [])
        ids += [seq for seq in bad_words_token_ids(params.bad_words, tokenizer) if seq not in ids]
        params = copy.copy(params)  # not dataclasses.replace: no second validation (grammars are checked once)
        params.bad_words, params.bad_words_token_ids = None, ids
    params.check_vocab(vocab_size)
    return params


def banned_next_tokens(bad: list[list[int]], output: list[int]) -> list[int]:
    """Tokens that would complete one of the ``bad`` sequences right after ``output``."""
    banned = []
    for seq in bad:
        n = len(seq) - 1
        if n == 0 or (len(output) >= n and output[len(output) - n :] == seq[:-1]):
            banned.append(seq[-1])
    return banned


class _Tensors:
    """One request's controls as device tensors."""

    def __init__(self, p: "SamplingParams", vocab: int, device: torch.device) -> None:
        self.allowed: torch.Tensor | None = None  # [V] bool
        if p.allowed_token_ids:
            ids = torch.tensor([t for t in p.allowed_token_ids if t < vocab], dtype=torch.long)
            self.allowed = torch.zeros(vocab, dtype=torch.bool).index_fill_(0, ids, True).to(device)
        self.bias_ids: torch.Tensor | None = None  # [K] long
        self.bias_values: torch.Tensor | None = None  # [K] float
        if p.logit_bias:
            items = [(t, b) for t, b in p.logit_bias.items() if t < vocab]
            self.bias_ids = torch.tensor([t for t, _ in items], dtype=torch.long).to(device)
            self.bias_values = torch.tensor([b for _, b in items], dtype=torch.float32).to(device)


class TokenControls:
    """Applies the controls of a batch's rows to its logits; caches per-request tensors."""

    def __init__(self) -> None:
        self._cache: dict[str, _Tensors] = {}

    def release(self, request_id: str) -> None:
        self._cache.pop(request_id, None)

    def apply(self, x: torch.Tensor, rows: list["SamplingRow"]) -> None:
        """Mask and bias ``x`` (``[N, V]``, in place) for the rows that use controls."""
        picked = [i for i, row in enumerate(rows) if uses_token_controls(row.params)]
        if not picked:
            return
        tensors = {i: self._tensors(rows[i], x.shape[1], x.device) for i in picked}
        _mask_disallowed(x, {i: t.allowed for i, t in tensors.items() if t.allowed is not None})
        _ban(x, [(i, t) for i in picked for t in banned_next_tokens(rows[i].params.bad_words_token_ids or [],
                                                                       rows[i].output_token_ids) if t < x.shape[1]])
        _add_bias(x, {i: t for i, t in tensors.items() if t.bias_ids is not None})

    def _tensors(self, row: "SamplingRow", vocab: int, device: torch.device) -> _Tensors:
        key = row.request_id
        cached = self._cache.get(key) if key is not None else None
        if cached is None:
            cached = _Tensors(row.params, vocab, device)
            if key is not None:
                self._cache[key] = cached
        return cached


def _mask_disallowed(x: torch.Tensor, allowed: dict[int, torch.Tensor]) -> None:
    if not allowed:
        return
    index = to_device(list(allowed), x.device)  # [M]
    keep = torch.stack(list(allowed.values()))  # [M, V]
    x[index] = x[index].masked_fill_(~keep, NEG_INF)


def _ban(x: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
    if pairs:
        rows, tokens = zip(*pairs)
        fill_entries(x, rows, tokens, NEG_INF)


def _add_bias(x: torch.Tensor, biased: dict[int, _Tensors]) -> None:
    if not biased:
        return
    rows = to_device([i for i, t in biased.items() for _ in range(t.bias_ids.numel())], x.device)  # [K total]
    ids = torch.cat([t.bias_ids for t in biased.values()])
    values = torch.cat([t.bias_values for t in biased.values()])
    x.index_put_((rows, ids), values, accumulate=True)
