"""Speculative decoding inside the engine core: drafts before scheduling, verification after.

Each step, the :class:`Speculator` asks the proposer for drafts for the running requests that may
speculate and appends them to the requests as *draft tokens* (not known tokens: the prefix cache
never hashes them). The scheduler then schedules ``1 + d`` tokens for such a request like a short
prefill chunk; :meth:`Speculator.fit` drops the drafts the step will not compute. The model runner
returns the target's greedy token at each drafted position (``RunnerOutput.draft_argmax``) and the
sampled token after the last one; :meth:`Speculator.settle` keeps the longest matching prefix,
appends the target's token after it, rolls the computed count back and releases the KV blocks of
the rejected positions. Greedy requests only for now (their tokens equal plain greedy decoding);
the others run normally in the same steps. Steps run serially (no overlap) while speculating.
"""

from __future__ import annotations

from typing import Iterable

from pagoda.engine.kv_cache import KVCacheManager
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.sampler import needs_output_history
from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import ProposalInput, Proposer
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.spec_decode.config import SpeculativeConfig, parse_speculative_config

GREEDY = 1e-5  # the sampler's greedy threshold on temperature


class Speculator:
    def __init__(self, config: SpeculativeConfig, proposer: Proposer, kv_cache: KVCacheManager,
                 max_model_len: int) -> None:
        self.k = config.num_speculative_tokens
        self.proposer = proposer
        self.kv_cache = kv_cache
        self.max_model_len = max_model_len
        self._drafted: list[Request] = []
        self.num_drafts = 0  # drafted tokens verified so far
        self.num_accepted = 0  # of them, accepted

    def propose(self, requests: Iterable[Request]) -> None:
        """Append drafts to the requests that may speculate this step."""
        eligible = [req for req in requests if self._eligible(req)]
        self._drafted = []
        if not eligible:
            return
        proposal = self.proposer.propose([ProposalInput(r.request_id, r.token_ids) for r in eligible], self.k)
        for req, drafts in zip(eligible, proposal.token_ids):
            n = min(len(drafts), self._room(req))
            if n > 0:
                req.add_drafts(list(drafts[:n]))
                self._drafted.append(req)

    def fit(self, scheduled: SchedulerOutput) -> None:
        """Drop the drafts this step will not compute (cut by the token budget, unscheduled, preempted)."""
        counts = {req.request_id: n for req, n in zip(scheduled.requests, scheduled.num_tokens)}
        for req in self._drafted:
            n = counts.get(req.request_id)
            running = n is not None and req.status is RequestStatus.RUNNING
            req.drop_drafts(keep=max(0, n - 1) if running else 0)

    def settle(self, req: Request, index: int, argmax: list[int], sampled: int) -> tuple[int, list[int]]:
        """After the step: keep the verified drafts, put the target's token after them in place of
        the placeholder at ``index``. Returns (index of the first emitted token, emitted tokens)."""
        d = req.num_draft_tokens
        drafts = req.token_ids[index - d : index]
        accepted = next((j for j in range(d) if drafts[j] != argmax[j]), d)
        final = argmax[accepted] if accepted < d else sampled
        rejected = d - accepted
        del req.token_ids[index - rejected : index]
        req.num_draft_tokens = 0
        req.num_computed_tokens -= rejected
        index -= rejected
        req.resolve_placeholder(index, final)
        self.kv_cache.trim(req, req.num_computed_tokens)
        self.num_drafts += d
        self.num_accepted += accepted
        return index - accepted, drafts[:accepted] + [final]

    def _eligible(self, req: Request) -> bool:
        params = req.sampling_params
        return (req.status is RequestStatus.RUNNING and not req.num_pending_tokens and not req.num_draft_tokens
                and req.num_computed_tokens == req.num_tokens - 1 and params.temperature < GREEDY
                and not needs_output_history(params) and params.logprobs is None and params.prompt_logprobs is None
                and not getattr(params, "guided_decoding", None))

    def _room(self, req: Request) -> int:
        """Drafts that keep the step's last token short of max_tokens and the context (so length
        is decided after verification, never at launch)."""
        room = min(self.k, self.max_model_len - req.num_tokens - 2)
        max_tokens = req.sampling_params.max_tokens
        if max_tokens is not None:
            room = min(room, max_tokens - req.num_output_tokens - 2)
        return room


def build_speculator(value, kv_cache: KVCacheManager, max_model_len: int, tp_size: int) -> Speculator | None:
    """The engine's Speculator for ``--speculative-config``, or None when it is not set."""
    config = parse_speculative_config(value)
    if config is None:
        return None
    if tp_size > 1:
        raise ConfigError("speculative decoding does not run with tensor parallelism yet; "
                          "drop --speculative-config or use --tensor-parallel-size 1")
    from pagoda.plugins.manager import get_plugin_manager

    proposer_cls = get_plugin_manager().registry("proposer").get(config.method)
    return Speculator(config, proposer_cls(config), kv_cache, max_model_len)
