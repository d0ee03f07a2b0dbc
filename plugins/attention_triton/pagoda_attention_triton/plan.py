"""Per-step launch plan: what ``prepare()`` derives once and every layer reuses.

The split-KV choice and the plan itself are shared with the other GPU backends: they live in
``pagoda.attention.split_kv`` (re-exported here).
"""

from __future__ import annotations

from pagoda.attention.split_kv import (  # noqa: F401 - re-exported
    MAX_SPLITS,
    MIN_KEYS_PER_SPLIT,
    MIN_SPLIT_CONTEXT,
    PROGRAMS_PER_SM,
    StepPlan,
    choose_num_splits,
)
