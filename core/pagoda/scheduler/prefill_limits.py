"""Latency-aware limits on the prefills of one step (:class:`~pagoda.scheduler.PolicyScheduler`).

A step's time grows with the prompt tokens it computes, and every decode in the step waits for it. Four
settings of :class:`~pagoda.interfaces.scheduler.SchedulerConfig` bound that work:

- ``max_num_partial_prefills``: prompts that may be mid-prefill (split over several steps) at once. A new
  prompt whose chunk this step would not finish it is admitted only below this count; a prompt that
  finishes its prefill within the step is always admitted (the token budget permitting).
- ``long_prefill_token_threshold`` (0: off): a prompt with more tokens left to compute (after its
  prefix-cache hits) is *long*; it computes at most this many tokens a step, so it never fills a step alone.
- ``max_long_partial_prefills``: long prompts mid-prefill at once. A long prompt that must wait for this
  limit (or the one above) steps aside: the shorter prompts queued behind it are admitted ahead of it, and
  it keeps its place at the head of the queue for the next step.
- ``max_prefill_tokens_while_decoding`` (0: off): the prompt tokens a step that runs decodes may compute
  at most (a step of prefills alone keeps the whole token budget).

With the defaults (1, 0, 1, 0) the schedule is the one without these limits but in rare cases (a prompt
that waits a step to keep an image whole): a split prompt takes what is left of the budget, so only one
prompt is split over steps at a time without them too.
"""

from __future__ import annotations

import sys

from pagoda.interfaces.scheduler import SchedulerConfig
from pagoda.request import Request

UNCAPPED = sys.maxsize


def tokens_to_compute(request: Request) -> int:
    """Tokens ``request`` computes before it samples again: its prompt (or, preempted, all its tokens) less
    what is computed; 1 for a decode (speculative drafts not counted)."""
    return request.num_tokens - request.num_draft_tokens - request.num_computed_tokens


def is_prefilling(request: Request) -> bool:
    return tokens_to_compute(request) > 1


class StepPrefills:
    """The prefill allowance of the step being scheduled: created from the running requests before it."""

    def __init__(self, config: SchedulerConfig, running: list[Request]) -> None:
        self.config = config
        prefilling = [tokens_to_compute(r) for r in running if is_prefilling(r)]
        self.partial = len(prefilling)  # prompts mid-prefill after this step, as scheduled so far
        self.long = sum(self.is_long(n) for n in prefilling)
        decoding = len(prefilling) < len(running)
        cap = config.max_prefill_tokens_while_decoding
        self.tokens_left = cap if cap and decoding else UNCAPPED  # prompt tokens the step may still take

    def is_long(self, remaining: int) -> bool:
        threshold = self.config.long_prefill_token_threshold
        return 0 < threshold < remaining

    def cap(self, remaining: int, n: int) -> int:
        """A chunk of at most ``n`` tokens of a prompt with ``remaining`` left, within the limits (0: none now)."""
        if remaining <= 1:
            return n  # a decode
        if self.is_long(remaining):
            n = min(n, self.config.long_prefill_token_threshold)
        return max(0, min(n, self.tokens_left))

    def scheduled_running(self, remaining: int, n: int) -> None:
        """A running request with ``remaining`` tokens to compute takes ``n`` of them this step."""
        if remaining <= 1:
            return
        self.tokens_left -= min(n, self.tokens_left)
        if n >= remaining:  # its prefill ends in this step
            self.partial -= 1
            self.long -= self.is_long(remaining)

    def allows(self, remaining: int, n: int) -> bool:
        """Whether a waiting prompt with ``remaining`` tokens to compute may start with a chunk of ``n``."""
        if n >= remaining:
            return True
        if self.partial >= self.config.max_num_partial_prefills:
            return False
        return not self.is_long(remaining) or self.long < self.config.max_long_partial_prefills

    def admitted(self, remaining: int, n: int) -> None:
        self.tokens_left -= min(n, self.tokens_left)
        if n < remaining:
            self.partial += 1
            self.long += self.is_long(remaining)
