"""Engine-wide back-off by cost: steps carry drafts only while that yields more tokens per second.

The per-request back-off (:mod:`pagoda.spec_decode.backoff`) looks at acceptance only, but a step
carrying drafts costs more than a plain decode step: it is read before the next step is scheduled
(no host/device overlap), computes ``1 + d`` tokens per request and leaves the decode graphs. Where
a step is host-bound (a small model), a round accepting a token or two is slower than two plain
steps. This controller measures both kinds of step and decides, each step, whether any request
may draft.

**Samples.** A step's cost is the wall-clock time from its start to the start of the next step.
With overlapped steps that interval holds this step's host work and the wait for the step before
it: in a steady run, one step's worth either way. Only steady decode steps count: the step and the
one before it computed decode tokens only (``1 + drafts`` per request, no prompt chunk), both ran
in the same phase (the first step after a switch pays for draining or refilling the pipeline), and
the engine still had work after the step (no idle wait in the interval). While speculating, steps
without drafts count too (tokens: 1 per request): the proposer found nothing, yet the step read the
tokens in flight before proposing and so lost its overlap; that is the cost of speculating where
drafts are rare (measured on an H100 when only drafted steps counted: 0.78x at batch 8 with drafts
now and then, the controller judging drafted steps alone at 0.94x). A sample is the seconds
and the tokens emitted per request (1 in a plain step, ``1 + accepted`` in a round); it goes into
the average of its phase, speculating or suspended (each phase is measured afresh: the mean of its
first samples, then a moving average). Goodput = tokens per request per second.

**Phases.** A cycle starts by probing both phases (``probe_steps`` samples speculating, then as
many suspended). The winner (speculation must beat suspension by ``margin``) then runs for
``first_run`` samples, the other phase is probed again, and the winner runs again: twice as long
each time it wins again (up to ``max_run``), ``first_run`` when the other phase took over. While
drafts lose, speculation is suspended for 32, 64, 128, then 256 steps, with a probe of 4 drafting
steps in between; while they win, 4 plain steps between runs keep the plain figure fresh. Slow
first steps (compilation) decide one run at most: every run ends in a probe.

**Batch size.** A request's share of a step depends on the batch: the averages hold samples of
batch sizes within ``batch_band`` of the first since they were reset; a sample outside resets both
(the phase in progress and the length of the next pause or run stay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class GoodputPolicy:
    probe_steps: int = 4  # samples of a probe
    first_run: int = 32  # samples of the winner's first run
    max_run: int = 256  # samples of the longest run
    margin: float = 0.05  # speculation must yield this much more goodput than plain steps
    decay: float = 0.25  # weight of the newest sample in the moving averages
    batch_band: float = 1.5  # batch sizes compared: at most this factor apart


@dataclass
class _Average:
    """A phase's step time and tokens per request: the mean of its first ``1 / decay`` samples,
    then moving averages."""

    seconds: float = 0.0
    tokens: float = 0.0
    samples: int = 0

    def add(self, seconds: float, tokens: float, decay: float) -> None:
        weight = max(decay, 1 / (self.samples + 1))
        self.seconds += weight * (seconds - self.seconds)
        self.tokens += weight * (tokens - self.tokens)
        self.samples += 1

    @property
    def goodput(self) -> float:
        """Tokens per request per second."""
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class _Step:
    start: float
    speculating: bool
    batch: int = 0  # requests computed
    tokens: int = 0  # tokens emitted
    decode_only: bool = False  # no prompt tokens computed
    busy: bool = False  # the engine had work left after it


class GoodputController:
    """Whether each step may carry drafts (``enabled=False``: always)."""

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic,
                 policy: GoodputPolicy = GoodputPolicy()) -> None:
        self.enabled = enabled
        self.clock = clock
        self.policy = policy
        self.num_steps = 0
        self.num_suspended_steps = 0  # steps in which no request could draft
        self.goodput_ratio = 0.0  # goodput speculating over suspended at the latest verdict (0: none yet)
        self._open: _Step | None = None  # begun, not yet timed
        self._last: _Step | None = None  # the step before it
        self._rebase(batch=0)
        self._winner: bool | None = None  # the last verdict (None: none yet)
        self._run = 0  # samples of the winner's last run
        self._start_phase(True, policy.probe_steps, is_run=False)  # the first cycle probes drafting first

    def begin_step(self) -> bool:
        """Start a step (this times the one before): whether it may carry drafts."""
        self.num_steps += 1
        if not self.enabled:
            return True
        now = self.clock()
        self._close(now)
        self.num_suspended_steps += not self.speculating
        self._open = _Step(now, self.speculating)
        return self.speculating

    def on_scheduled(self, batch: int, decode_only: bool) -> None:
        """What the open step computes: ``batch`` requests, one token each plus accepted drafts;
        ``decode_only``: no prompt tokens."""
        if self._open is not None:
            self._open.batch = self._open.tokens = batch
            self._open.decode_only = decode_only

    def on_accepted(self, num_drafts: int) -> None:
        """Drafts of the open step accepted: tokens emitted beyond one per request."""
        if self._open is not None:
            self._open.tokens += num_drafts

    def end_step(self, busy: bool) -> None:
        """The open step is launched (and read, if it verified drafts); ``busy``: the engine has
        work left, so the next step follows at once."""
        if self._open is not None:
            self._open.busy = busy

    @property
    def suspended(self) -> bool:
        return self.enabled and not self.speculating

    # -- samples ---------------------------------------------------------------------------------
    def _close(self, now: float) -> None:
        """Time the open step (from its start to ``now``) if it was a steady one."""
        step, before = self._open, self._last
        self._open, self._last = None, step
        if step is not None and before is not None and _steady(step, before):
            self._record(step, now - step.start)

    def _record(self, step: _Step, seconds: float) -> None:
        if not self._similar(step.batch):
            self._rebase(step.batch)
        self._batch = self._batch or step.batch
        if step.speculating != self.speculating:  # a phase the new cycle left
            return
        self._averages[step.speculating].add(seconds, step.tokens / step.batch, self.policy.decay)
        self._left -= 1
        if self._left <= 0:
            self._next_phase()

    def _similar(self, batch: int) -> bool:
        return not self._batch or max(batch, self._batch) <= self.policy.batch_band * min(batch, self._batch)

    # -- phases ----------------------------------------------------------------------------------
    def _rebase(self, batch: int) -> None:
        """Another batch size: what was measured no longer compares, so both averages start afresh.
        The phase in progress goes on (a pause keeps its length, and a server's changing batch does
        not set off probe after probe); once it ends, the phase not yet measured is probed."""
        self._averages = {True: _Average(), False: _Average()}
        self._batch = batch

    def _next_phase(self) -> None:
        on, off = self._averages[True], self._averages[False]
        if not (on.samples and off.samples):  # the cycle's first probes
            self._start_phase(not self.speculating, self.policy.probe_steps, is_run=False)
            return
        self.goodput_ratio = on.goodput / off.goodput
        winner = self.goodput_ratio > 1 + self.policy.margin
        if self._in_run and winner == self.speculating:  # the winner's run is over: probe the other phase
            self._start_phase(not winner, self.policy.probe_steps, is_run=False)
            return
        self._run = min(self.policy.max_run, 2 * self._run) if winner == self._winner else self.policy.first_run
        self._winner = winner
        self._start_phase(winner, self._run, is_run=True)

    def _start_phase(self, speculating: bool, samples: int, is_run: bool) -> None:
        """Run ``speculating`` (or not) for ``samples`` samples, measured afresh."""
        self._averages[speculating] = _Average()
        self.speculating = speculating
        self._left = samples
        self._in_run = is_run


def _steady(step: _Step, before: _Step) -> bool:
    """Decode steps in a row, in the same phase, with no idle wait after ``step``."""
    return step.busy and step.decode_only and before.decode_only and step.speculating == before.speculating
