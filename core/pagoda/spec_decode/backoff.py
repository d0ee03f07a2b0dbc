"""Per-request back-off: how many drafts a request asks for, from how many it has been accepting.

Verifying a draft costs a query token in the target's step (cheap while the step is bound by
reading the weights, not free), and a step with drafts gives up the overlap of host and device
work. So each request keeps a moving average of the drafts accepted per round and asks for one
more than that (``ceil(mean) + 1``, at most ``k``): a request whose drafts are all accepted keeps
``k``; one accepting a token or two asks for two or three. A round that gains nothing (no draft
accepted, or the proposer had no guess) is a miss; after two misses in a row the request stops
proposing for a pause that doubles with each further miss (2, 4, ... up to ``max_pause`` steps)
and then probes again. Pauses end on multiples of their length, so requests that back off alike
probe in the same steps and the steps in between run as plain (overlapped, graphed) decodes.
With nothing ever accepted, about one step in ``max_pause`` carries a draft. Whether a step may
carry drafts at all, given what drafted and plain steps cost, is decided engine-wide
(:mod:`pagoda.spec_decode.goodput`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY = 0.5  # weight of the newest round in the moving average
MISSES_BEFORE_PAUSE = 2
MAX_PAUSE = 32


@dataclass
class _State:
    mean_accepted: float  # moving average of drafts accepted per round
    misses: int = 0  # consecutive rounds that gained nothing
    resume_step: int = 0  # no drafts before this step


class Backoff:
    """Draft budgets per request (``enabled=False``: always ``k``, never a pause)."""

    def __init__(self, k: int, enabled: bool = True, max_pause: int = MAX_PAUSE) -> None:
        self.k = k
        self.enabled = enabled
        self.max_pause = max_pause
        self._states: dict[str, _State] = {}

    def budget(self, request_id: str, step: int) -> int:
        """Drafts the request may propose at ``step`` (0 while it pauses)."""
        state = self._states.get(request_id)
        if not self.enabled or state is None:
            return self.k
        if step < state.resume_step:
            return 0
        return max(1, min(self.k, math.ceil(state.mean_accepted) + 1))

    def paused(self, request_id: str, step: int) -> bool:
        state = self._states.get(request_id)
        return self.enabled and state is not None and step < state.resume_step

    def record(self, request_id: str, step: int, num_drafts: int, num_accepted: int) -> None:
        """One round of ``request_id``: ``num_drafts`` proposed (0: the proposer had none), ``num_accepted`` kept."""
        state = self._states.setdefault(request_id, _State(mean_accepted=float(self.k)))
        if num_drafts:
            state.mean_accepted = (1 - DECAY) * state.mean_accepted + DECAY * num_accepted
        if num_accepted:
            state.misses = state.resume_step = 0
            return
        state.misses += 1
        if state.misses >= MISSES_BEFORE_PAUSE:
            pause = min(self.max_pause, 2 ** (state.misses - MISSES_BEFORE_PAUSE + 1))
            state.resume_step = (step // pause + 1) * pause

    def forget(self, request_id: str) -> None:
        self._states.pop(request_id, None)
