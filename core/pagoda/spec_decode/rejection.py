"""Exact verification of draft tokens: the accepted tokens follow the target distribution.

For each request, the target model scored ``n`` draft tokens ``x_1..x_n`` in one pass, giving
distributions ``p_1..p_{n+1}`` (``p_i`` is the target's next-token distribution before ``x_i``;
``p_{n+1}`` follows the last draft). The drafts were drawn from ``q_1..q_n`` (one-hot for a
deterministic proposer such as n-gram lookup). Left to right:

- sampled rows accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first
  rejection they emit one token from ``normalize(max(0, p_i - q_i))`` and stop; if every draft is
  accepted they emit a bonus token from ``p_{n+1}``. The emitted tokens are distributed exactly as
  tokens sampled one at a time from the target (speculative sampling, Leviathan et al. 2023;
  Chen et al. 2023).
- greedy rows accept ``x_i`` while it is the target's argmax, then emit the argmax: the tokens of
  plain greedy decoding.

A round therefore emits between 1 and ``n + 1`` tokens. Random numbers come in as tensors (uniforms
for the tests, exponential noise for the final draw, as the sampler's Gumbel-max form) so seeded
requests stay reproducible.
"""

from __future__ import annotations

import torch

from pagoda.layers.argmax import argmax


def rejection_sample(
    target_probs: torch.Tensor,  # [R, K + 1, V] float32: the target's processed distributions
    draft_ids: torch.Tensor,  # [R, K] int64, any value beyond a row's num_drafts
    num_drafts: torch.Tensor,  # [R] int64, 0..K
    draft_probs: torch.Tensor | None,  # [R, K, V]: q; None: each draft was certain under the proposer
    greedy: torch.Tensor,  # [R] bool
    uniform: torch.Tensor,  # [R, K] in [0, 1): acceptance tests
    noise: torch.Tensor,  # [R, V] Exponential(1): the final draw, argmax(dist / noise)
) -> list[list[int]]:
    """Per row: the accepted drafts followed by one target-distributed token."""
    rows, k, _ = target_probs.shape[0], draft_ids.shape[1], target_probs.shape[2]
    valid = torch.arange(k, device=draft_ids.device) < num_drafts[:, None]  # [R, K]
    ids = torch.where(valid, draft_ids, 0)
    p_x = target_probs[:, :k].gather(-1, ids[..., None])[..., 0]  # [R, K]
    q_x = draft_probs.gather(-1, ids[..., None])[..., 0] if draft_probs is not None else torch.ones_like(p_x)
    target_argmax = argmax(target_probs)  # [R, K + 1]
    accept = torch.where(greedy[:, None], ids == target_argmax[:, :k], uniform * q_x < p_x) & valid
    num_accepted = accept.int().cumprod(dim=1).sum(dim=1)  # [R]: leading accepted drafts
    final = _final_tokens(target_probs, ids, draft_probs, num_accepted, num_drafts, greedy, noise, target_argmax)
    accepted, final = num_accepted.tolist(), final.tolist()
    return [ids[r, :accepted[r]].tolist() + [final[r]] for r in range(rows)]


def _final_tokens(target_probs: torch.Tensor, ids: torch.Tensor, draft_probs: torch.Tensor | None,
                  num_accepted: torch.Tensor, num_drafts: torch.Tensor, greedy: torch.Tensor,
                  noise: torch.Tensor, target_argmax: torch.Tensor) -> torch.Tensor:
    """The token after the accepted drafts: from the residual at a rejection, else the bonus."""
    rows = torch.arange(target_probs.shape[0], device=target_probs.device)
    at = num_accepted  # [R]: position of the rejection, or num_drafts (the bonus)
    p = target_probs[rows, at]  # [R, V]
    rejected = at < num_drafts
    if ids.shape[1] == 0:  # no drafts at all: every row takes the bonus draw
        q = torch.zeros_like(p)
    elif draft_probs is not None:
        q = draft_probs[rows, at.clamp(max=draft_probs.shape[1] - 1)]
    else:  # one-hot at the rejected draft
        q = torch.zeros_like(p).scatter_(1, ids[rows, at.clamp(max=ids.shape[1] - 1)][:, None], 1.0)
    residual = (p - q).clamp_(min=0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp(min=1e-30), p)  # p == q: nothing left, keep p
    dist = torch.where(rejected[:, None], residual, p)
    sampled = argmax(dist / noise)
    return torch.where(greedy, target_argmax[rows, at], sampled)
