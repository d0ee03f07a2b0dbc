"""The batched sampler: one row of logits per request that samples this step -> one token each.

Processing order and semantics (vectorised over the batch; a step no row needs is skipped):

1. min_tokens (vLLM): while a row has fewer than ``min_tokens`` outputs, its ``stop_token_ids``
   are masked, and its EOS too unless ``ignore_eos``. Then ``allowed_token_ids``, ``bad_words``
   and ``logit_bias`` (``pagoda.sampling.token_controls``).
2. repetition_penalty (HF/vLLM): on tokens seen in prompt or output, positive logits are divided
   by the penalty and negative ones multiplied.
3. frequency/presence penalties (OpenAI/vLLM): on output tokens only,
   ``logit -= frequency_penalty * count + presence_penalty * (count > 0)``.
4. temperature, then top-k (ties with the k-th value are kept), then top-p (keep the smallest
   set of most likely tokens whose mass reaches top_p), then min-p (drop tokens whose probability
   is below ``min_p`` times the top probability). This is HF's warper order and vLLM V0's.
5. Greedy rows (temperature < 1e-5) take the argmax of the penalised logits. Other rows draw
   ``argmax(probs / E)`` with E ~ Exponential(1) per token (the Gumbel-max trick in its
   exponential form), E coming from the row's own generator when the request has a seed, else
   from the sampler-wide generator seeded at construction.

Reported logprobs are of the raw model distribution (log_softmax of the unprocessed logits),
vLLM's default ``raw_logprobs`` mode, which is also what HF's ``log_softmax(scores)`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from pagoda.tensors import fill_entries, to_device
from pagoda.sampling.token_controls import TokenControls, reads_output_tokens, uses_token_controls
from pagoda.layers.argmax import argmax
from pagoda.sampling_params import SamplingParams

NEG_INF = float("-inf")
TOP_P_OFF = 2.0  # a top_p no cumulative mass can reach, so float rounding never drops a token


@dataclass
class SamplingRow:
    """What the sampler needs to know about one request that samples this step."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator | None = None  # kept by the runner across steps when params.seed is set
    eos_token_id: int | None = None
    request_id: str | None = None  # keys the per-request tensors of token controls (None: not cached)


@dataclass
class SamplerOutput:
    """The sampled token of each row, with its raw logprob and the requested top logprobs."""

    token_ids: list[int]  # [N]
    logprobs: list[float]  # [N] under the raw model distribution; empty when no row asked for logprobs
    top_logprobs: list[list[tuple[int, float]] | None]  # per row, sorted desc; None if not asked


@dataclass
class _Plan:
    """Per-row parameter tensors for one call; None where every row is neutral for that step."""

    greedy: list[bool]
    temperature: torch.Tensor | None  # [N] float, 1.0 on greedy rows
    top_k: torch.Tensor | None  # [N] long, vocab size where disabled
    max_top_k: int  # the largest top_k of the rows that set one (1: none)
    top_p: torch.Tensor | None  # [N] float, TOP_P_OFF where disabled
    min_p: torch.Tensor | None  # [N] float, 0 where disabled


class Sampler:
    """Turns logits ``[N, V]`` into one token per row; see the module docstring for semantics."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}
        self.controls = TokenControls()  # logit_bias, allowed_token_ids, bad words

    def release(self, request_id: str) -> None:
        """Forget a finished request's cached tensors."""
        self.controls.release(request_id)

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        return self.sample(logits, rows).to_output()

    def sample(self, logits: torch.Tensor, rows: list[SamplingRow]) -> "DeviceSample":
        """Sample on the device without waiting for it (:meth:`DeviceSample.to_output` reads it)."""
        logits = logits.float()  # [N, V]
        if logits.shape[0] != len(rows):
            raise ValueError(f"got {logits.shape[0]} rows of logits for {len(rows)} sampling rows")
        ks = [r.params.logprobs for r in rows]
        if not rows:
            return DeviceSample(torch.empty(0, dtype=torch.long), ks)
        plan = _plan(rows, logits.shape[1], logits.device)
        processed = self._process(logits, rows, plan)
        token_ids = self._pick(processed, rows, plan)  # [N]
        if all(k is None for k in ks):  # no row reports logprobs: skip them
            return DeviceSample(token_ids, ks)
        return _with_logprobs(logits, token_ids, ks)

    @staticmethod
    def picks_alike(rows: list[SamplingRow]) -> bool:
        """Whether ranks holding the same logits pick the same tokens on their own: greedy rows that no
        processing step changes take the argmax, which is exact. Otherwise (draws, penalties, token
        controls, grammars: only rank 0 applies them) the tokens come from rank 0 under tensor
        parallelism. Every rank answers alike: it reads only what the ranks' mirrored requests hold."""
        return all(r.params.is_greedy and r.params.guided_decoding is None and not _row_processed(r) for r in rows)

    def process(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """The logits each row samples from (masked with -inf), before the random draw."""
        logits = logits.float()
        return self._process(logits, rows, _plan(rows, logits.shape[1], logits.device))

    def _process(self, logits: torch.Tensor, rows: list[SamplingRow], plan: _Plan) -> torch.Tensor:
        if not _changes_logits(rows, plan):
            return logits
        x = logits.clone()  # [N, V]; the raw logits stay intact for the logprobs
        _apply_min_tokens(x, rows)
        self.controls.apply(x, rows)
        _apply_penalties(x, rows)
        if plan.temperature is not None:
            x.div_(plan.temperature[:, None])
        if plan.top_k is not None or plan.top_p is not None:
            _apply_top_k_top_p(x, plan.top_k, plan.top_p, plan.max_top_k)
        if plan.min_p is not None:
            _apply_min_p(x, plan.min_p)
        return x

    def _pick(self, x: torch.Tensor, rows: list[SamplingRow], plan: _Plan) -> torch.Tensor:
        if all(plan.greedy):
            return argmax(x)
        probs = x.softmax(dim=1)  # [N, V]
        noise = self._exponential_noise(x, rows, plan.greedy)  # [N, V]
        sampled = argmax(probs.div_(noise))  # [N]
        if any(plan.greedy):
            greedy = to_device(plan.greedy, x.device, torch.bool)
            sampled = torch.where(greedy, argmax(x), sampled)
        return sampled

    def _exponential_noise(self, x: torch.Tensor, rows: list[SamplingRow], greedy: list[bool]) -> torch.Tensor:
        """Exp(1) noise per row: a seeded row's from its own generator, others' from the sampler's."""
        shared = [i for i, row in enumerate(rows) if row.generator is None and not greedy[i]]
        own = [i for i, row in enumerate(rows) if row.generator is not None and not greedy[i]]
        generator = self._generator(x.device)
        if len(shared) == len(rows):
            noise = torch.empty_like(x).exponential_(generator=generator)
        else:
            noise = torch.ones_like(x)
            if shared:
                block = torch.empty((len(shared), x.shape[1]), device=x.device)
                noise[to_device(shared, x.device)] = block.exponential_(generator=generator)
            for i in own:  # one draw per seeded row, so its stream ignores the rest of the batch
                noise[i].exponential_(generator=rows[i].generator)
        return noise.clamp_min_(torch.finfo(noise.dtype).tiny)  # an Exp draw of 0 would give 0/0

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device).manual_seed(self.seed)
        return self._generators[device]


def prompt_logprobs(
    logits: torch.Tensor, next_token_ids: torch.Tensor | list[int], k: int
) -> list[tuple[float, list[tuple[int, float]]]]:
    """For each prompt position: raw logprob of the actual next token and the top-k ``(id, logprob)``."""
    logits = logits.float()  # [P, V]
    ids = torch.as_tensor(next_token_ids, dtype=torch.long, device=logits.device)  # [P]
    out = _with_logprobs(logits, ids, [k] * logits.shape[0]).to_output()
    return [(lp, top or []) for lp, top in zip(out.logprobs, out.top_logprobs)]


def _plan(rows: list[SamplingRow], vocab: int, device: torch.device) -> _Plan:
    params = [row.params for row in rows]
    greedy = [p.is_greedy for p in params]
    temps = [1.0 if g else p.temperature for p, g in zip(params, greedy)]
    ks = [vocab if g or not p.uses_top_k else min(p.top_k, vocab) for p, g in zip(params, greedy)]
    ps = [TOP_P_OFF if g or p.top_p >= 1.0 else p.top_p for p, g in zip(params, greedy)]
    mins = [0.0 if g else p.min_p for p, g in zip(params, greedy)]
    return _Plan(
        greedy=greedy,
        temperature=_tensor_unless(temps, 1.0, torch.float32, device),
        top_k=_tensor_unless(ks, vocab, torch.long, device),
        max_top_k=max((k for k in ks if k < vocab), default=1),
        top_p=_tensor_unless(ps, TOP_P_OFF, torch.float32, device),
        min_p=_tensor_unless(mins, 0.0, torch.float32, device),
    )


def _changes_logits(rows: list[SamplingRow], plan: _Plan) -> bool:
    """Whether any processing step applies to any row (greedy rows without penalties need none)."""
    if any(t is not None for t in (plan.temperature, plan.top_k, plan.top_p, plan.min_p)):
        return True
    return any(_row_processed(r) for r in rows)


def _row_processed(row: SamplingRow) -> bool:
    """Whether a penalty, min_tokens or a token control changes this row's logits this step."""
    params = row.params
    return _has_penalty(params) or len(row.output_token_ids) < params.min_tokens or uses_token_controls(params)


def _tensor_unless(values: list, neutral: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    if all(v == neutral for v in values):
        return None
    return to_device(values, device, dtype)


def _apply_min_tokens(x: torch.Tensor, rows: list[SamplingRow]) -> None:
    """Mask stop tokens (and EOS unless ignore_eos) of rows still short of min_tokens."""
    row_index: list[int] = []
    token_index: list[int] = []
    for i, row in enumerate(rows):
        p = row.params
        if len(row.output_token_ids) >= p.min_tokens:
            continue
        banned = list(p.stop_token_ids)
        if row.eos_token_id is not None and not p.ignore_eos:
            banned.append(row.eos_token_id)
        banned = [t for t in banned if t < x.shape[1]]
        row_index += [i] * len(banned)
        token_index += banned
    if token_index:
        fill_entries(x, row_index, token_index, NEG_INF)


def _apply_penalties(x: torch.Tensor, rows: list[SamplingRow]) -> None:
    """Repetition, frequency and presence penalties, on the rows that set any of them."""
    picked = [i for i, r in enumerate(rows) if _has_penalty(r.params)]
    if not picked:
        return
    vocab, device = x.shape[1], x.device
    params = [rows[i].params for i in picked]
    index = to_device(picked, device)
    sub = x.index_select(0, index)  # [M, V]
    counts = _token_counts([rows[i].output_token_ids for i in picked], vocab, device)  # [M, V]
    if any(p.repetition_penalty != 1.0 for p in params):
        rep = to_device([p.repetition_penalty for p in params], device, torch.float32)[:, None]  # [M, 1]
        seen = counts > 0
        seen |= _token_counts([rows[i].prompt_token_ids for i in picked], vocab, device) > 0
        penalised = torch.where(sub > 0, sub / rep, sub * rep)
        sub = torch.where(seen, penalised, sub)
    freq = to_device([p.frequency_penalty for p in params], device, torch.float32)[:, None]  # [M, 1]
    pres = to_device([p.presence_penalty for p in params], device, torch.float32)[:, None]  # [M, 1]
    sub = sub - freq * counts - pres * (counts > 0).float()
    x.index_copy_(0, index, sub)


def needs_output_history(p: SamplingParams) -> bool:
    """Whether sampling for ``p`` reads the values of earlier output tokens (penalties, grammars and
    multi-token bad words do)."""
    return needs_tokens_before_launch(p) or p.guided_decoding is not None


def needs_tokens_before_launch(p: SamplingParams) -> bool:
    """Whether a step sampling for ``p`` can only be launched once the previous step's tokens are on
    the host. Grammars need not: the runner reads the in-flight step's tokens while the next
    step's forward pass runs (pagoda.guided.runtime), so guided steps keep the overlap."""
    return _has_penalty(p) or reads_output_tokens(p)


def _has_penalty(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0


def _token_counts(token_lists: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """How often each vocabulary entry occurs in each list: ``[len(token_lists), vocab]`` float."""
    seqs = [torch.tensor(t, dtype=torch.long) for t in token_lists]
    ids = to_device(pad_sequence(seqs, batch_first=True, padding_value=vocab), device)  # [M, L]; pad -> spare column
    counts = torch.zeros((len(token_lists), vocab + 1), device=device)
    counts.scatter_add_(1, ids, torch.ones(ids.shape, device=device))
    return counts[:, :vocab]


def _apply_top_k_top_p(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, max_k: int) -> None:
    """Mask, in place, tokens outside each row's top-k (``max_k``: the largest that applies) and
    outside its top-p nucleus."""
    if top_p is None:  # top-k alone needs only the k-th largest value per row
        enabled = (top_k < x.shape[1])[:, None]  # [N, 1]
        top = x.topk(max_k, dim=1).values  # [N, max_k]
        kth = top.gather(1, top_k.clamp(max=max_k)[:, None] - 1).masked_fill_(~enabled, NEG_INF)
        x.masked_fill_(x < kth, NEG_INF)
        return
    sorted_x, order = x.sort(dim=1, descending=True)  # [N, V]
    if top_k is not None:
        sorted_x.masked_fill_(sorted_x < sorted_x.gather(1, top_k[:, None] - 1), NEG_INF)
    probs = sorted_x.softmax(dim=1)  # [N, V]
    mass_before = probs.cumsum(dim=1) - probs  # mass of the strictly more likely tokens
    sorted_x.masked_fill_(mass_before >= top_p[:, None], NEG_INF)  # the top token always stays
    x.scatter_(1, order, sorted_x)


def _apply_min_p(x: torch.Tensor, min_p: torch.Tensor) -> None:
    probs = x.softmax(dim=1)  # [N, V]
    floor = min_p[:, None] * probs.max(dim=1, keepdim=True).values  # [N, 1]
    x.masked_fill_(probs < floor, NEG_INF)


def _with_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, ks: list[int | None]) -> "DeviceSample":
    """Raw logprob of each chosen token, plus the top-k ``(id, logprob)`` of rows with k not None."""
    lse = torch.logsumexp(logits, dim=1)  # [N]
    chosen = logits.gather(1, token_ids[:, None])[:, 0] - lse  # [N]
    max_k = max((k for k in ks if k is not None), default=None)
    if max_k is None:
        return DeviceSample(token_ids, ks, chosen)
    values, ids = logits.topk(max_k, dim=1)  # [N, max_k], sorted desc
    return DeviceSample(token_ids, ks, chosen, values - lse[:, None], ids)


@dataclass
class DeviceSample:
    """A step's sampled tokens (and logprobs) still on the device."""

    token_ids: torch.Tensor  # [N] long
    ks: list[int | None]  # top logprobs asked per row
    logprobs: torch.Tensor | None = None  # [N] raw logprob of each sampled token
    top_values: torch.Tensor | None = None  # [N, max_k] top logprobs, sorted desc
    top_ids: torch.Tensor | None = None  # [N, max_k]

    def tensors(self) -> list[torch.Tensor]:
        """The tensors to copy to the host, in the order :meth:`to_output` takes them."""
        return [t for t in (self.token_ids, self.logprobs, self.top_values, self.top_ids) if t is not None]

    def to_output(self, host: list[torch.Tensor] | None = None) -> SamplerOutput:
        """Lists from ``host`` (copies of :meth:`tensors`), or from the device tensors (waits)."""
        token_ids, logprobs, top_values, top_ids = [*(host or self.tensors()), None, None, None][:4]
        if logprobs is None:
            return SamplerOutput(token_ids.tolist(), [], [None] * len(self.ks))
        top: list[list[tuple[int, float]] | None] = [None] * len(self.ks)
        if top_values is not None:
            values, ids = top_values.tolist(), top_ids.tolist()
            top = [None if k is None else list(zip(ids[i][:k], values[i][:k])) for i, k in enumerate(self.ks)]
        return SamplerOutput(token_ids.tolist(), logprobs.tolist(), top)
