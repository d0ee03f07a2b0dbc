"""Per-step launch plan: what ``prepare()`` derives once and every layer reuses.

The split-KV choice and the plan itself are shared with the other GPU backends: they live in
``pagoda.attention.split_kv`` (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.attention.split_kv import (  # noqa: F401 - re-exported
    MAX_SPLITS,
    MIN_KEYS_PER_SPLIT,
    MIN_SPLIT_CONTEXT,
    PROGRAMS_PER_SM,
    StepPlan,
    choose_num_splits,
)


@dataclass
class TritonStepPlan(StepPlan):
    """The decodes' plan, and the other sequences' path: ``short_splits > 0`` where each of them has
    at most ``decode.SHORT_QUERY`` query tokens (a verify step's ``k + 1``): the decode kernel, its
    KV split that many ways; 0: the prefill kernel."""

    short_splits: int = 0
    short_scratch: tuple[torch.Tensor, torch.Tensor] | None = None
