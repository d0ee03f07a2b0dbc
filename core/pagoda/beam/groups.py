"""Beam search inside the engine core: each beam is a Request; beams fork by sharing KV blocks.

A beam request samples like any other (greedy, with the top ``K`` raw logprobs of its row); when
its token is read, :meth:`BeamGroups.on_sampled` takes the token back out and keeps the
candidates, so the request *waits*: all its tokens are computed and the scheduler gives it no
work. Once every live beam of a prompt has reported, :meth:`BeamGroups.advance` runs one
:class:`~pagoda.beam.search.BeamSearch` step and applies it:

- the first continuation of a beam reuses that beam's request: the chosen token is appended and
  decoded next step, like any decode;
- every further continuation *forks* it: a new request whose block table starts with the
  parent's full, computed KV blocks (one more reference each in the block pool, no copy,
  ``Scheduler.fork`` / ``KVCacheManager.fork``); the parent's partial last block is recomputed by
  the child (at most ``block_size - 1`` tokens, plus the new one) rather than copied;
- beams with no continuation are finished, which drops their block references.

When the search is done its best ``beam_width`` sequences go out as the outputs of the request's
sequences (``id`` or ``id#i``, best first), each ending on EOS (finish reason ``stop``) or at the
length limit (``length``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

from pagoda.sampling_params import BeamSearchParams
from pagoda.beam.search import BeamSearch, Hypothesis, TopList
from pagoda.request import Request, RequestStatus
from pagoda.messages import AddRequest, EngineCoreOutput, sequence_ids
from pagoda.errors import RequestError
from pagoda.interfaces.scheduler import Scheduler, SchedulerOutput
from pagoda.sampling_params import SamplingParams


@dataclass
class BeamGroup:
    """One prompt's beams."""

    request_id: str
    output_ids: list[str]
    search: BeamSearch
    beams: list[Request]  # the live beams' requests, in ``search.live`` order
    reported: dict[str, TopList] = field(default_factory=dict)  # beam request id -> its candidates this round


class BeamGroups:
    """Every beam search of an engine core."""

    def __init__(self, scheduler: Scheduler, release: Callable[[str], None], max_model_len: int,
                 vocab_size: int) -> None:
        self.scheduler = scheduler
        self.release = release  # forget a finished beam's per-request state in the model runner
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.groups: dict[str, BeamGroup] = {}  # by request id
        self._group_of: dict[str, BeamGroup] = {}  # beam request id, or output id -> its group
        self._ids = itertools.count()

    @property
    def active(self) -> bool:
        return bool(self.groups)

    def any_in(self, scheduled: SchedulerOutput) -> bool:
        """Whether a step runs beams (their tokens are read at once: the next step depends on them)."""
        return bool(self._group_of) and any(req.request_id in self._group_of for req in scheduled.requests)

    def owns(self, request_id: str) -> bool:
        """Whether ``request_id`` names a beam request (or a beam search's request or output)."""
        return request_id in self._group_of or request_id in self.groups

    def add(self, add: AddRequest, eos_token_id: int | None) -> None:
        """Start a beam search for ``add`` (``add.beam`` set); RequestError if it cannot run."""
        beam: BeamSearchParams = add.beam
        refusal = self.scheduler.fork_refusal()
        if refusal is not None:
            raise RequestError(f"beam search forks sequences: {refusal}")
        stops = set() if beam.ignore_eos or eos_token_id is None else {eos_token_id}
        room = self.max_model_len - len(add.prompt_token_ids)
        max_new = room if beam.max_tokens is None else min(beam.max_tokens, room)
        top = add.params.logprobs or 0
        search = BeamSearch(beam.beam_width, max_new, stops, beam.length_penalty, beam.early_stopping, top)
        if search.num_candidates > self.vocab_size:
            raise RequestError(f"beam_width {beam.beam_width} needs {search.num_candidates} candidate tokens per step, "
                               f"more than the vocabulary's {self.vocab_size}; lower beam_width")
        params = SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True)
        params.logprobs = max(search.num_candidates, top)  # past SamplingParams' bound of 20: set after validation
        root = Request(self._beam_id(add.request_id), list(add.prompt_token_ids), params,
                       arrival_time=add.arrival_time, priority=add.priority, eos_token_id=eos_token_id,
                       lora_request=add.lora_request)
        group = BeamGroup(add.request_id, sequence_ids(add.request_id, beam.beam_width), search, [root])
        self.groups[add.request_id] = group
        for name in (root.request_id, *group.output_ids):
            self._group_of[name] = group
        self.scheduler.add_request(root)

    def on_sampled(self, req: Request, top: TopList) -> None:
        """Keep a beam's candidates and take its sampled token back out (it waits for the others)."""
        group = self._group_of[req.request_id]
        req.token_ids.pop()
        group.reported[req.request_id] = top

    def advance(self) -> list[EngineCoreOutput]:
        """Step every beam search whose live beams have all reported; outputs of those that finished."""
        outputs: list[EngineCoreOutput] = []
        for group in list(self.groups.values()):
            if any(req.request_id not in group.reported for req in group.beams):
                continue
            tops = [group.reported[req.request_id] for req in group.beams]
            group.reported.clear()
            continuations = group.search.step(tops)
            self._apply(group, [(c.parent, c.token) for c in continuations])
            if group.search.done:
                outputs += self._outputs(group)
                self._forget(group)
        return outputs

    def requeue_waiting(self) -> bool:
        """For a step that could schedule nothing: beams that wait for their siblings give their KV
        blocks back and queue again (to recompute, keeping their reported candidates), so a sibling
        preempted for lack of blocks can run. True if any did."""
        moved = False
        for group in self.groups.values():
            for i, req in enumerate(group.beams):
                if req.request_id in group.reported and req.status is RequestStatus.RUNNING:
                    self.scheduler.finish(req.request_id, RequestStatus.FINISHED_ABORTED)
                    group.beams[i] = Request(req.request_id, req.prompt_token_ids, req.sampling_params,
                                             arrival_time=req.arrival_time, priority=req.priority,
                                             eos_token_id=req.eos_token_id, token_ids=list(req.token_ids),
                                             lora_request=req.lora_request)
                    self.scheduler.add_request(group.beams[i])
                    moved = True
        return moved

    def abort(self, request_id: str) -> bool:
        """Stop the beam search that ``request_id`` names (its id or an output id); False if none."""
        group = self._group_of.get(request_id) or self.groups.get(request_id)
        if group is None or group.request_id not in self.groups:
            return False
        self._end(group.beams)
        self._forget(group)
        return True

    # -- internals --------------------------------------------------------------------------------
    def _apply(self, group: BeamGroup, continuations: list[tuple[int, int]]) -> None:
        """Turn the step's continuations into requests: forks first (from the parents as they are),
        then the first continuation of each parent extends it in place; parents left over end."""
        parents = group.beams
        first = {}
        for i, (parent, _) in enumerate(continuations):
            first.setdefault(parent, i)
        beams: list[Request] = []
        for i, (parent, token) in enumerate(continuations):
            beams.append(parents[parent] if first[parent] == i else self._fork(group, parents[parent], token))
        for parent, i in first.items():
            parents[parent].token_ids.append(continuations[i][1])
        self._end([req for j, req in enumerate(parents) if j not in first])
        group.beams = beams

    def _fork(self, group: BeamGroup, parent: Request, token: int) -> Request:
        child = Request(self._beam_id(group.request_id), parent.prompt_token_ids, parent.sampling_params,
                        arrival_time=parent.arrival_time, priority=parent.priority, eos_token_id=parent.eos_token_id,
                        token_ids=[*parent.token_ids, token], lora_request=parent.lora_request)
        self._group_of[child.request_id] = group
        if parent.status is RequestStatus.RUNNING:
            self.scheduler.fork(parent, child)
        else:  # the parent was preempted while it waited: the child recomputes like any new request
            self.scheduler.add_request(child)
        return child

    def _end(self, beams: list[Request]) -> None:
        for req in beams:
            if not req.status.finished:
                self.scheduler.finish(req.request_id, RequestStatus.FINISHED_ABORTED)
            self.release(req.request_id)
            self._group_of.pop(req.request_id, None)

    def _forget(self, group: BeamGroup) -> None:
        self.groups.pop(group.request_id, None)
        for name in group.output_ids:
            self._group_of.pop(name, None)
        for req in group.beams:
            self._group_of.pop(req.request_id, None)

    def _outputs(self, group: BeamGroup) -> list[EngineCoreOutput]:
        outputs = []
        for output_id, hyp in zip(group.output_ids, group.search.results()):
            outputs += _sequence_outputs(output_id, hyp)
        return outputs

    def _beam_id(self, request_id: str) -> str:
        return f"{request_id}/beam{next(self._ids)}"


def _sequence_outputs(output_id: str, hyp: Hypothesis) -> list[EngineCoreOutput]:
    """A finished sequence as core outputs: the tokens before a stop token, then the stop token alone
    with finish reason ``stop`` (the front end leaves a stop token's text out); or all of it, ``length``."""
    nodes = hyp.node.unwind()
    pieces = [(nodes[:-1], None), (nodes[-1:], "stop")] if hyp.stopped else [(nodes, "length")]
    return [EngineCoreOutput(output_id, [n.token for n in part], finish_reason=reason,
                             logprobs=[n.logprob for n in part], top_logprobs=[list(n.top) for n in part])
            for part, reason in pieces if part]
