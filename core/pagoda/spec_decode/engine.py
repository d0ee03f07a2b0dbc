"""Speculative decoding inside the engine core: drafts before scheduling, verification after.

Each step, unless the goodput controller has suspended speculation because steps with drafts have
lately yielded fewer tokens per second than plain ones (:mod:`pagoda.spec_decode.goodput`), the
:class:`Speculator` asks the proposer for drafts for the running requests that may
speculate (their budget from :class:`~pagoda.spec_decode.backoff.Backoff`) and appends them to the
requests as *draft tokens* (not known tokens: the prefix cache never hashes them). The scheduler
then schedules ``1 + d`` tokens for such a request like a short prefill chunk; :meth:`Speculator.fit`
drops the drafts the step will not compute. The model runner samples the target at every drafted
position and keeps the longest accepted prefix (:mod:`pagoda.spec_decode.verify`);
:meth:`Speculator.settle` truncates the rejected drafts, rolls the computed count back and releases
the KV blocks of the rejected positions. A step with drafts is read before the next one is
scheduled (the proposer needs the tokens); steps without drafts overlap as usual. Drafts a proposer
is still computing on the device (``Proposal.on_device``) go into the verify step there, unread; the
speculator reads them once that step is queued (:meth:`Speculator.read_drafts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

from pagoda.kv_cache.manager import KVCacheManager
from pagoda.request import Request, RequestStatus
from pagoda.sampling.sampler import needs_output_history
from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import DeviceDrafts, ProposalInput, Proposer, ProposerContext, VerifyOutcome
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.runner.features import StepFeature
from pagoda.spec_decode.backoff import Backoff
from pagoda.speculative_config import SpeculativeConfig, parse_speculative_config
from pagoda.spec_decode.goodput import GoodputController
from pagoda.spec_decode.hidden import HiddenStates

if TYPE_CHECKING:
    from pagoda.messages import StepStats
    from pagoda.spec_decode.verify import Verified


class Speculator:
    def __init__(self, config: SpeculativeConfig, proposer: Proposer, kv_cache: KVCacheManager,
                 max_model_len: int, masks: Sequence[StepFeature] = (), drafts_on_device: bool = True) -> None:
        self.config = config
        self.masks = list(masks)  # the runner's logits masks (grammars): they must roll back rejected drafts
        self.k = config.num_speculative_tokens
        self.proposer = proposer
        self.kv_cache = kv_cache
        self.max_model_len = max_model_len
        self.backoff = Backoff(self.k, enabled=config.backoff)
        self.goodput = GoodputController(enabled=config.backoff)  # whether this step may draft at all
        self.speculating = True  # this step's verdict
        # the target's hidden states per request, for proposers that read them (EAGLE); the runner fills it
        self.hidden = HiddenStates() if proposer.needs_hidden_states else None
        self._drafted: list[Request] = []
        # drafts the device is still computing may go into the verify step unread (this process runs it alone)
        self.drafts_on_device = drafts_on_device
        self._on_device: tuple[DeviceDrafts, dict[int, Request]] | None = None
        self.step_index = 0
        self.num_rounds = 0  # request-steps that verified drafts
        self.num_drafts = 0  # drafted tokens verified so far
        self.num_accepted = 0  # of them, accepted
        self.accepted_per_position = [0] * self.k  # rounds whose j-th draft was accepted

    # -- the step's bounds ---------------------------------------------------------------------
    def begin_step(self) -> None:
        """A step starts: the goodput controller times the one before and says whether this one drafts."""
        self.speculating = self.goodput.begin_step()

    def end_step(self, busy: bool) -> None:
        """The step is launched (and read, if it verified drafts); ``busy``: the engine has work left."""
        self.goodput.end_step(busy)

    # -- before scheduling -------------------------------------------------------------------
    def wants_tokens(self, requests: Iterable[Request]) -> bool:
        """Whether some running request will propose this step (its last token must be read first)."""
        return self.speculating and any(self._budget(req, self.step_index + 1) > 0 for req in requests)

    def propose(self, requests: Iterable[Request]) -> None:
        """Append drafts to the requests that may speculate this step."""
        self.step_index += 1
        self._drafted = []
        if not self.speculating:
            return
        eligible, budgets = [], []
        for req in requests:
            budget = self._budget(req, self.step_index) if not req.num_pending_tokens else 0
            if budget > 0:
                eligible.append(req)
                budgets.append(budget)
        if not eligible:
            return
        inputs = [ProposalInput(r.request_id, r.token_ids, self._hidden(r), b) for r, b in zip(eligible, budgets)]
        if self.hidden is not None:
            self.hidden.compact(keep=(r.request_id for r in eligible))
        proposal = self.proposer.propose(inputs, max(budgets))
        token_ids, device = proposal.token_ids, proposal.on_device
        if device is not None and not (self.drafts_on_device and all(_reads_no_drafts(r) for r in eligible)):
            token_ids, device = _with_drafts(token_ids, device.read()), None  # wait for them now
        on_device: dict[int, Request] = {}
        for i, (req, drafts, budget) in enumerate(zip(eligible, token_ids, budgets)):
            n = min(len(drafts), budget)
            if n <= 0:
                self.backoff.record(req.request_id, self.step_index, 0, 0)
                continue
            probs = proposal.probs[i, :n] if proposal.probs is not None else None
            req.add_drafts([int(t) for t in drafts[:n]], probs)
            if device is not None and i in device.index:
                req.draft_source = (device.tokens, device.index[i])
                on_device[i] = req
            self._drafted.append(req)
        if device is not None:
            self._on_device = (device, on_device)

    def read_drafts(self) -> None:
        """Put the values of the drafts the device computed in their requests (waiting for them): once
        the step that verifies them is queued, before it is read."""
        if self._on_device is None:
            return
        (device, requests), self._on_device = self._on_device, None
        values = device.read()
        for i, req in requests.items():
            req.draft_source = None
            if req.num_draft_tokens:
                req.token_ids[req.draft_span] = values[i][: req.num_draft_tokens]

    def fit(self, scheduled: SchedulerOutput) -> None:
        """Drop the drafts this step will not compute (cut by the token budget, unscheduled, preempted);
        tell the goodput controller what the step computes."""
        counts = {req.request_id: n for req, n in zip(scheduled.requests, scheduled.num_tokens)}
        for req in self._drafted:
            n = counts.get(req.request_id)
            running = n is not None and req.status is RequestStatus.RUNNING
            req.drop_drafts(keep=max(0, n - 1) if running else 0)
        decode_only = bool(scheduled.requests) and all(
            n == 1 + req.num_draft_tokens and req.num_computed_tokens >= req.num_prompt_tokens
            for req, n in zip(scheduled.requests, scheduled.num_tokens))
        self.goodput.on_scheduled(len(scheduled.requests), decode_only)

    def has_drafts(self, scheduled: SchedulerOutput) -> bool:
        return any(req.num_draft_tokens for req in scheduled.requests)

    # -- after the launch --------------------------------------------------------------------
    def prelaunch(self, pending: Any) -> None:
        """A step that verifies drafts is queued: the proposer may queue its next round behind it, for
        the requests whose back-off gives them drafts next step (as it stands before this outcome)."""
        outcome = pending.outcome() if hasattr(pending, "outcome") else None
        if outcome is None:
            return
        budgets = [self.backoff.budget(rid, self.step_index + 1) for rid in outcome.request_ids]
        rows = [i for i, budget in enumerate(budgets) if budget > 0]
        if rows:
            self.proposer.prelaunch(VerifyOutcome([outcome.request_ids[i] for i in rows], [outcome.drafts[i] for i in rows],
                                                  outcome.sampled, [outcome.offsets[i] for i in rows]), max(budgets))

    # -- after the step ----------------------------------------------------------------------
    def settle(self, req: Request, index: int, verified: "Verified") -> tuple[int, list[int]]:
        """Keep the verified drafts and put the target's token after them in place of the
        placeholder at ``index``. Returns (index of the first emitted token, emitted tokens)."""
        d, accepted = req.num_draft_tokens, verified.num_accepted
        rejected = d - accepted
        del req.token_ids[index - rejected : index]
        req.num_draft_tokens = 0
        req.draft_probs = None
        req.num_computed_tokens -= rejected
        index -= rejected
        req.resolve_placeholder(index, verified.token_ids[-1])
        self.kv_cache.trim(req, req.num_computed_tokens)
        self._count(req.request_id, d, accepted)
        return index - accepted, verified.token_ids

    def release(self, request_id: str) -> None:
        """Forget a finished request (its back-off state, the proposer's state)."""
        self.backoff.forget(request_id)
        self.proposer.release(request_id)
        if self.hidden is not None:
            self.hidden.forget(request_id)

    def fill_stats(self, stats: "StepStats") -> None:
        stats.spec_num_drafts = self.num_rounds
        stats.spec_num_draft_tokens = self.num_drafts
        stats.spec_num_accepted_tokens = self.num_accepted
        stats.spec_accepted_per_position = list(self.accepted_per_position)
        stats.spec_num_steps = self.goodput.num_steps
        stats.spec_num_suspended_steps = self.goodput.num_suspended_steps
        stats.spec_suspended = self.goodput.suspended
        stats.spec_goodput_ratio = self.goodput.goodput_ratio

    # -- helpers -----------------------------------------------------------------------------
    def _hidden(self, req: Request):
        """The target's hidden states of ``req``'s positions computed since it last proposed (or None)."""
        return self.hidden.take(req.request_id, req.num_tokens - 1) if self.hidden is not None else None

    def _count(self, request_id: str, num_drafts: int, num_accepted: int) -> None:
        self.num_rounds += 1
        self.num_drafts += num_drafts
        self.num_accepted += num_accepted
        self.goodput.on_accepted(num_accepted)
        for j in range(num_accepted):
            self.accepted_per_position[j] += 1
        self.backoff.record(request_id, self.step_index, num_drafts, num_accepted)

    def _budget(self, req: Request, step: int) -> int:
        """Drafts ``req`` may propose at ``step``: its back-off budget within its room; 0 if it may not."""
        if not self._may_speculate(req):
            return 0
        return min(self.backoff.budget(req.request_id, step), self._room(req))

    def _may_speculate(self, req: Request) -> bool:
        """Running, past its prompt (one new token to compute), no drafts yet, and no grammar unless
        its matcher can roll back (``GrammarMatcher.rollback``; xgrammar's can)."""
        if (req.status is not RequestStatus.RUNNING or req.num_draft_tokens
                or req.num_computed_tokens != req.num_tokens - 1 or getattr(req, "pooling_params", None) is not None):
            return False
        if getattr(req.sampling_params, "guided_decoding", None) is None:
            return True
        return bool(self.masks) and all(mask.can_roll_back(req.request_id) for mask in self.masks)

    def _room(self, req: Request) -> int:
        """Drafts that keep the step's last token short of max_tokens and the context (so length
        is decided after verification, never at launch)."""
        room = min(self.k, self.max_model_len - req.num_tokens - 2)
        max_tokens = req.sampling_params.max_tokens
        if max_tokens is not None:
            room = min(room, max_tokens - req.num_output_tokens - 2)
        return room


def _drafts_on_device(parts: Any, runner: Any) -> bool:
    """Whether verify steps may take drafts the device is still computing: the target's runner is in this
    process alone (no tensor-parallel ranks to send the values to)."""
    return runner is not None and parts.config.tensor_parallel_size == 1


def _reads_no_drafts(req: Request) -> bool:
    """Whether launching ``req``'s verify step reads no draft's value on the host (its sampling reads no
    output history: no penalties, grammar or multi-token bad words)."""
    return not needs_output_history(req.sampling_params)


def _with_drafts(token_ids: list[list[int]], values: dict[int, list[int]]) -> list[list[int]]:
    return [values.get(i, drafts) for i, drafts in enumerate(token_ids)]


def build_speculator(value: Any, parts: Any, runner: Any = None) -> Speculator | None:
    """The engine's Speculator for ``--speculative-config`` (``parts``: EngineParts), or None when
    it is not set. Builds the proposer (a draft model loads here) and connects it to the runner's
    :class:`~pagoda.spec_decode.step.SpecDecodeStep` (hidden states for proposers that read them)."""
    config = parse_speculative_config(value)
    if config is None:
        return None
    from pagoda.plugins.manager import get_plugin_manager
    from pagoda.spec_decode.step import SpecDecodeStep

    # under TP: checked before the workers started (check_proposer_tensor_parallel); errors name the plugin
    proposer = get_plugin_manager().registry("proposer").create(config.method, config)
    proposer.attach(ProposerContext(platform=parts.platform, engine_config=parts.config, hf_config=parts.hf_config,
                                    dtype=parts.dtype, max_model_len=parts.max_model_len,
                                    num_kv_blocks=parts.kv_cache.num_blocks, model=parts.model))
    masks = runner.masks if runner is not None else ()
    speculator = Speculator(config, proposer, parts.kv_cache, parts.max_model_len, masks,
                            drafts_on_device=_drafts_on_device(parts, runner))
    if speculator.hidden is not None:
        step = runner.feature(SpecDecodeStep) if runner is not None else None
        if step is None:
            raise ConfigError(f"the {config.method} proposer reads the target's hidden states, which this engine "
                              "does not expose (no model runner in this process)")
        step.hidden_reader = speculator.hidden.record
    return speculator


def check_proposer_tensor_parallel(config: Any) -> None:
    """ConfigError where ``--speculative-config`` names a proposer that cannot run beside a tensor-parallel
    target (checked before the worker ranks start, which capture verify graphs with the driver)."""
    spec = parse_speculative_config(config.speculative_config)
    if spec is None or config.tensor_parallel_size == 1:
        return
    from pagoda.plugins.manager import get_plugin_manager

    if not get_plugin_manager().registry("proposer").get(spec.method).supports_tensor_parallel:
        raise ConfigError(f"the {spec.method} proposer does not run with tensor parallelism (it does not set "
                          "supports_tensor_parallel); use ngram, draft or eagle, or --tensor-parallel-size 1")
