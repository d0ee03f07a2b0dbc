"""Straightforward per-row float64 reference of the sampler's logits processing."""

from __future__ import annotations

import torch

from pagoda.sampling.sampler import SamplingRow

INF = float("inf")


def reference_logits(raw: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    """Processed logits of one row, in float64, one rule at a time."""
    x = raw.double().clone()  # [V]
    p = row.params
    if len(row.output_token_ids) < p.min_tokens:
        banned = list(p.stop_token_ids)
        if row.eos_token_id is not None and not p.ignore_eos:
            banned.append(row.eos_token_id)
        for t in banned:
            x[t] = -INF
    for t in set(row.prompt_token_ids) | set(row.output_token_ids):
        r = p.repetition_penalty
        x[t] = x[t] / r if x[t] > 0 else x[t] * r
    for t in set(row.output_token_ids):
        x[t] -= p.frequency_penalty * row.output_token_ids.count(t) + p.presence_penalty
    if p.is_greedy:
        return x
    x = x / p.temperature
    if p.top_k > 0:
        kth = sorted(x.tolist(), reverse=True)[min(p.top_k, len(x)) - 1]
        x[x < kth] = -INF
    if p.top_p < 1:
        probs = torch.softmax(x, 0)
        mass = 0.0
        for t in sorted(range(len(x)), key=lambda i: -x[i].item()):
            if mass >= p.top_p:
                x[t] = -INF
            mass += probs[t].item()
    if p.min_p > 0:
        probs = torch.softmax(x, 0)
        x[probs < p.min_p * probs.max()] = -INF
    return x


def assert_same_processing(got: torch.Tensor, want: torch.Tensor) -> None:
    """Same -inf mask exactly, finite values within float32 error."""
    assert torch.equal(torch.isinf(got), torch.isinf(want)), (got, want)
    finite = ~torch.isinf(want)
    torch.testing.assert_close(got[finite].double(), want[finite], rtol=1e-5, atol=1e-5)
