"""Mixture-of-experts: top-k routing and the fused expert MLPs (one ``CustomOps.fused_moe`` call).

:class:`FusedMoE` stores all experts of a layer in two stacked parameters,
``w13_weight`` ``[num_experts, 2 * inter, hidden]`` (each expert's gate rows, then its up rows)
and ``w2_weight`` ``[num_experts, hidden, inter]``, so a kernel can run one grouped GEMM per
projection over all experts. Checkpoints hold one tensor per expert and projection
(``experts.<e>.w1.weight``); :meth:`FusedMoE.load_weight` writes each into its slice, addressed
by the shard id ``"<e>.gate"``, ``"<e>.up"`` or ``"<e>.down"``.

Tensor parallelism: each rank keeps a slice of every expert's intermediate features (the
gate/up rows are column-parallel, the down projection row-parallel) and the partial outputs are
summed with one all-reduce, like the dense MLP. Expert parallelism (whole experts per rank) would
instead narrow the expert axis at load and route tokens to their experts' ranks; see docs/models.md.
"""

from __future__ import annotations

import torch
from torch import nn

from pagoda.interfaces.parallel import SINGLE, TensorParallel
from pagoda.errors import ModelLoadError
from pagoda.layers.linear import copy_checked
from pagoda.interfaces.ops import CustomOps
from pagoda.layers.sharding import CheckpointTensor, narrow

EXPERT_PROJECTIONS = ("gate", "up", "down")


def select_experts(
    router_logits: torch.Tensor, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[num_tokens, num_experts]`` logits -> (weights [T, top_k] float32, expert ids [T, top_k] int64).

    Softmax over all experts in float32, keep the ``top_k`` largest, optionally rescale them to sum to 1.
    """
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class FusedMoE(nn.Module):
    """The experts of one MoE layer: ``x``, routing -> weighted sum of the chosen experts' SiLU MLPs."""

    def __init__(
        self, num_experts: int, hidden_size: int, intermediate_size: int, *, ops: CustomOps, dtype: torch.dtype,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        if intermediate_size % tp.size:
            raise ModelLoadError(f"tensor_parallel_size {tp.size} does not divide the experts' intermediate size "
                                 f"({intermediate_size})")
        self.num_experts, self.tp, self.ops = num_experts, tp, ops
        self.inter = intermediate_size // tp.size  # this rank's intermediate features per expert
        self.w13_weight = nn.Parameter(torch.empty(num_experts, 2 * self.inter, hidden_size, dtype=dtype),
                                       requires_grad=False)
        self.w2_weight = nn.Parameter(torch.empty(num_experts, hidden_size, self.inter, dtype=dtype),
                                      requires_grad=False)

    def forward(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        """``x`` [T, hidden], routing [T, top_k] -> [T, hidden] (summed over tensor-parallel ranks)."""
        y = self.ops.fused_moe(x, self.w13_weight, self.w2_weight, topk_weights, topk_ids)
        return self.tp.all_reduce(y) if self.tp.size > 1 else y

    def required_shards(self, param_name: str) -> set[str]:
        """The shard ids that together fill ``param_name`` (for the loader's completeness check)."""
        kinds = ("gate", "up") if param_name == "w13_weight" else ("down",)
        return {f"{e}.{kind}" for e in range(self.num_experts) for kind in kinds}

    def load_weight(self, param_name: str, tensor: CheckpointTensor, shard_id: str | None = None) -> None:
        """Copy one expert's checkpoint projection (``[out, in]``) into its slice of ``param_name``."""
        expert, kind = _parse_shard(shard_id, self.num_experts)
        start = self.tp.rank * self.inter
        if kind == "down":  # [hidden, inter]: this rank's input features
            copy_checked(self.w2_weight.data[expert], narrow(tensor, 1, start, self.inter))
            return
        rows = slice(0, self.inter) if kind == "gate" else slice(self.inter, 2 * self.inter)
        copy_checked(self.w13_weight.data[expert, rows], narrow(tensor, 0, start, self.inter))

    def extra_repr(self) -> str:
        tp = f", rank {self.tp.rank}/{self.tp.size}" if self.tp.size > 1 else ""
        return f"experts={self.num_experts}, inter={self.inter}{tp}"


def _parse_shard(shard_id: str | None, num_experts: int) -> tuple[int, str]:
    expert, _, kind = (shard_id or "").partition(".")
    if not expert.isdigit() or kind not in EXPERT_PROJECTIONS:
        raise ModelLoadError(f"expert weights need a shard id '<expert>.<gate|up|down>', got {shard_id!r}")
    if int(expert) >= num_experts:
        raise ModelLoadError(f"expert {expert} is out of range (the config has {num_experts} experts)")
    return int(expert), kind
