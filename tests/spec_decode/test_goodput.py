"""The engine-wide goodput controller (pagoda.spec_decode.goodput) on a fake clock: it suspends
speculation while steps with drafts yield fewer tokens per second than plain steps, doubles the
pause while they keep losing, probes again and resumes when drafting wins."""

from __future__ import annotations

import itertools
from typing import Callable

from pagoda.spec_decode.goodput import GoodputController

BATCH = 8


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


Cost = Callable[[int, bool], tuple[float, int]]  # (step number, speculating) -> (seconds, accepted drafts)


def run(controller: GoodputController, clock: FakeClock, cost: Cost, steps: int, batch: int = BATCH,
        decode_only: bool = True, busy: bool = True) -> list[bool]:
    """``steps`` engine steps; each one's verdict (whether it could draft)."""
    verdicts = []
    for i in range(steps):
        speculating = controller.begin_step()
        seconds, accepted = cost(i, speculating)
        controller.on_scheduled(batch, decode_only)
        controller.on_accepted(accepted if speculating else 0)
        controller.end_step(busy)
        clock.now += seconds
        verdicts.append(speculating)
    return verdicts


def stretches(verdicts: list[bool]) -> list[tuple[bool, int]]:
    """Runs of equal verdicts: (speculating, length)."""
    return [(v, len(list(g))) for v, g in itertools.groupby(verdicts)]


def slow_drafts(step: int, speculating: bool) -> tuple[float, int]:
    """A round takes 3 plain steps' time for 2 tokens per request: 0.67x."""
    return (3.0, BATCH) if speculating else (1.0, 0)


def test_losing_drafts_suspend_with_doubling_pauses() -> None:
    clock = FakeClock()
    controller = GoodputController(clock=clock)
    verdicts = run(controller, clock, slow_drafts, 900)
    # probe drafting (4 samples after an untimed first step), then plain steps (1 untimed + 4) and a
    # pause of 32; then a probe of 4 drafting steps (1 untimed) between pauses of 64, 128, 256, 256
    assert stretches(verdicts)[:10] == [(True, 5), (False, 37), (True, 5), (False, 65), (True, 5), (False, 129),
                                        (True, 5), (False, 257), (True, 5), (False, 257)]
    assert controller.suspended and 0 < controller.goodput_ratio < 0.7
    assert controller.num_suspended_steps == verdicts.count(False) > 0.9 * len(verdicts)


def test_drafting_resumes_once_it_wins() -> None:
    """The first rounds are slow (compilation, say): speculation is suspended, but the probe after
    the first pause finds rounds of 4 tokens per request in 1.2 plain steps and resumes."""
    clock = FakeClock()
    controller = GoodputController(clock=clock)
    drafted = itertools.count()

    def warming_up(step: int, speculating: bool) -> tuple[float, int]:
        if not speculating:
            return 1.0, 0
        return (20.0 if next(drafted) < 5 else 1.2), 3 * BATCH

    verdicts = run(controller, clock, warming_up, 400)
    runs = stretches(verdicts)
    assert runs[:3] == [(True, 5), (False, 37), (True, 37)]  # the probe (1 untimed + 4) goes on into a run of 32
    assert runs[3:6] == [(False, 5), (True, 65), (False, 5)]  # plain probes between runs twice as long
    assert verdicts[-1] and controller.goodput_ratio > 3


def test_unsteady_steps_are_not_timed() -> None:
    """Prompt chunks, idle waits after a step and steps at another batch size do not count."""
    clock = FakeClock()
    controller = GoodputController(clock=clock)
    assert run(controller, clock, slow_drafts, 3, decode_only=False) == [True] * 3
    assert run(controller, clock, slow_drafts, 3, busy=False) == [True] * 3
    assert controller.goodput_ratio == 0.0
    run(controller, clock, slow_drafts, 60)
    assert controller.suspended
    # a batch half as large resets the averages but not the pause in progress (64 steps, 14 spent):
    # it goes on, then drafting, not measured at this size, is probed (1 untimed step + 4)
    assert stretches(run(controller, clock, slow_drafts, 60, batch=BATCH // 2))[:2] == [(False, 51), (True, 5)]


def test_speculating_without_drafts_counts_as_lost_overlap() -> None:
    """The proposer finds nothing, but each speculating step reads the tokens in flight first and
    costs 1.5 plain steps for one token per request: speculation is suspended after its probe."""
    clock = FakeClock()
    controller = GoodputController(clock=clock)
    verdicts = run(controller, clock, lambda step, speculating: (1.5 if speculating else 1.0, 0), 100)
    assert stretches(verdicts)[:2] == [(True, 5), (False, 37)]
    assert controller.suspended and abs(controller.goodput_ratio - 1 / 1.5) < 1e-9


def test_backoff_false_never_suspends() -> None:
    clock = FakeClock()
    controller = GoodputController(enabled=False, clock=clock)
    assert all(run(controller, clock, slow_drafts, 300))
    assert controller.num_steps == 300 and controller.num_suspended_steps == 0 and not controller.suspended
