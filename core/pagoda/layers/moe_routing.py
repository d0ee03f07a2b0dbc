"""Grouped top-k routing (DeepSeek-V2/V3): the experts fall into ``num_groups`` groups, each token first keeps
its best ``top_groups`` groups, then its best ``top_k`` experts among them.

- DeepSeek-V2 (``topk_method`` ``greedy`` / ``group_limited_greedy``): softmax scores; a group scores its best
  expert (greedy: one group, so plain top-k).
- DeepSeek-V3 (``noaux_tc``): sigmoid scores; the choice adds the per-expert ``e_score_correction_bias`` (which
  only steers the choice: the weights are the unbiased scores), and a group scores its two best experts.

The chosen weights are renormalised to sum 1 when ``renormalize`` (V3's ``norm_topk_prob``), then multiplied by
``routed_scaling_factor``. Scores are computed in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from pagoda.errors import ModelLoadError

TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


@dataclass(frozen=True)
class GroupedRouting:
    """How a DeepSeek MoE layer picks and weights its experts."""

    num_experts: int
    top_k: int
    scoring: Literal["softmax", "sigmoid"] = "softmax"
    num_groups: int = 1
    top_groups: int = 1
    group_score: Literal["max", "top2_sum"] = "max"  # a group's score: its best expert, or its best two summed
    renormalize: bool = False
    scaling: float = 1.0  # routed_scaling_factor
    biased: bool = False  # the choice adds e_score_correction_bias

    @classmethod
    def from_hf(cls, cfg: Any) -> "GroupedRouting":
        """Read ``topk_method``, ``scoring_func``, ``n_group``/``topk_group``, ``norm_topk_prob`` and
        ``routed_scaling_factor`` from a DeepSeek config (V3's method when it names none)."""
        default = "noaux_tc" if getattr(cfg, "model_type", "") == "deepseek_v3" else "greedy"
        method = getattr(cfg, "topk_method", None) or default
        if method not in TOPK_METHODS:
            raise ModelLoadError(f"topk_method '{method}' in config.json is not supported "
                                 f"(supported: {', '.join(TOPK_METHODS)})")
        v3 = method == "noaux_tc"
        scoring = getattr(cfg, "scoring_func", None) or ("sigmoid" if v3 else "softmax")
        if scoring not in ("softmax", "sigmoid"):
            raise ModelLoadError(f"scoring_func '{scoring}' in config.json is not supported (softmax, sigmoid)")
        grouped = method != "greedy"
        routing = cls(
            num_experts=int(cfg.n_routed_experts), top_k=int(cfg.num_experts_per_tok), scoring=scoring,
            num_groups=int(getattr(cfg, "n_group", None) or 1) if grouped else 1,
            top_groups=int(getattr(cfg, "topk_group", None) or 1) if grouped else 1,
            group_score="top2_sum" if v3 else "max", renormalize=bool(getattr(cfg, "norm_topk_prob", False)),
            scaling=float(getattr(cfg, "routed_scaling_factor", None) or 1.0), biased=v3,
        )
        routing.check()
        return routing

    def check(self) -> None:
        """ModelLoadError unless the groups divide the experts and hold at least ``top_k`` of them."""
        if self.num_experts % self.num_groups:
            raise ModelLoadError(f"n_group ({self.num_groups}) does not divide n_routed_experts ({self.num_experts})")
        if not 1 <= self.top_groups <= self.num_groups:
            raise ModelLoadError(f"topk_group ({self.top_groups}) must be between 1 and n_group ({self.num_groups})")
        if self.top_k > self.top_groups * self.num_experts // self.num_groups:
            raise ModelLoadError(f"num_experts_per_tok ({self.top_k}) exceeds the experts of the topk_group "
                                 f"({self.top_groups}) groups a token keeps")


def grouped_topk(router_logits: torch.Tensor, routing: GroupedRouting,
                 bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``[T, num_experts]`` logits -> (weights ``[T, top_k]`` float32, expert ids ``[T, top_k]`` int64)."""
    logits = router_logits.float()
    scores = logits.softmax(dim=-1) if routing.scoring == "softmax" else logits.sigmoid()
    choice = scores + bias.float() if routing.biased and bias is not None else scores
    if routing.num_groups > 1:
        choice = _keep_top_groups(choice, routing)
    ids = torch.topk(choice, routing.top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if routing.renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * routing.scaling, ids


def _keep_top_groups(choice: torch.Tensor, routing: GroupedRouting) -> torch.Tensor:
    """``choice`` with the experts outside each token's ``top_groups`` best groups set to -inf."""
    grouped = choice.view(choice.shape[0], routing.num_groups, -1)  # [T, groups, experts per group]
    if routing.group_score == "max":
        group_scores = grouped.max(dim=-1).values
    else:
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [T, groups]
    kept = torch.topk(group_scores, routing.top_groups, dim=-1).indices
    mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)  # [T, groups]
    return grouped.masked_fill(~mask[..., None], float("-inf")).view_as(choice)
