"""Per-request back-off of the draft count (pagoda.spec_decode.backoff)."""

from __future__ import annotations

from pagoda.spec_decode.backoff import MAX_PAUSE, Backoff


def test_budget_follows_the_accepted_count() -> None:
    backoff = Backoff(k=5)
    assert backoff.budget("r", 1) == 5  # unknown request: optimistic
    backoff.record("r", 1, num_drafts=5, num_accepted=5)
    assert backoff.budget("r", 2) == 5
    for step in range(2, 6):
        backoff.record("r", step, num_drafts=3, num_accepted=1)
    assert backoff.budget("r", 6) == 3  # ceil(mean ~1.3) + 1
    backoff.record("r", 6, num_drafts=3, num_accepted=2)
    assert backoff.budget("r", 7) == 3


def test_misses_pause_with_doubling_aligned_pauses() -> None:
    backoff = Backoff(k=4)
    backoff.record("r", 10, num_drafts=4, num_accepted=0)
    assert backoff.budget("r", 11) > 0  # one miss: keep trying
    backoff.record("r", 11, num_drafts=0, num_accepted=0)  # the proposer had nothing: a miss too
    assert backoff.paused("r", 11) and backoff.budget("r", 11) == 0
    assert backoff.budget("r", 12) > 0  # pause 2, ends on a multiple of 2
    backoff.record("r", 12, num_drafts=2, num_accepted=0)
    assert backoff.budget("r", 15) == 0 and backoff.budget("r", 16) > 0  # pause 4
    steps, probes = 16, 0
    while steps < 2000:
        if backoff.budget("r", steps):
            probes += 1
            backoff.record("r", steps, num_drafts=2, num_accepted=0)
        steps += 1
    assert probes <= 2000 // MAX_PAUSE + 6  # at most one probe per MAX_PAUSE steps in the long run
    backoff.record("r", steps, num_drafts=2, num_accepted=1)  # a hit resets the misses
    assert backoff.budget("r", steps + 1) > 0


def test_disabled_and_forgotten() -> None:
    backoff = Backoff(k=3, enabled=False)
    for step in range(10):
        backoff.record("r", step, num_drafts=3, num_accepted=0)
    assert backoff.budget("r", 10) == 3
    on = Backoff(k=3)
    on.record("r", 1, 3, 0)
    on.record("r", 2, 3, 0)
    on.forget("r")
    assert on.budget("r", 3) == 3
