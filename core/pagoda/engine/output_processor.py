"""The front end's half of a step: detokenize, match stop strings, assemble RequestOutputs.

It consumes the engine core's :class:`EngineCoreOutput`s (token ids, finish reasons decided by
tokens, logprobs) and owns everything text: incremental detokenization, stop strings (a match
finishes the sequence here and asks the core to abort it), streaming deltas, and the ``n > 1``
fan-in of child sequences into one RequestOutput (with ``best_of > n``: ``best_of`` sequences run,
and the finished request reports the n with the highest cumulative logprob, best first).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Protocol

from pagoda.engine.detokenizer import IncrementalDetokenizer
from pagoda.messages import EngineCoreOutput, TopLogprobs, sequence_ids
from pagoda.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from pagoda.sampling_params import SamplingParams


@dataclass
class ChildState:
    """One generated sequence of a (possibly n > 1) request."""

    request_id: str  # the core's id: the parent's, or ``parent#i`` for n > 1
    params: SamplingParams
    detokenizer: IncrementalDetokenizer
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float = 0.0  # reported only when the request asked for logprobs (as in vLLM)
    logprobs: list[dict[int, Logprob]] | None = None
    num_emitted: int = 0  # output tokens already handed out (streaming deltas)


@dataclass
class RequestState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    children: list[ChildState]
    metrics: RequestMetrics
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    stream: bool = False  # emit a delta output every step the request advances
    num_returned: int = 1  # n: fewer than the children with best_of > n (the best are kept at the end)
    num_cached_tokens: int = 0
    num_finished: int = 0  # children with a finish reason

    @property
    def finished(self) -> bool:
        return self.num_finished == len(self.children)

    @property
    def picks_best(self) -> bool:
        """best_of > n: only the finished request is reported, with its n best sequences."""
        return self.num_returned < len(self.children)

    def returned(self) -> list[ChildState]:
        """The sequences to report: all, or with best_of > n the n of highest cumulative logprob."""
        if not self.picks_best:
            return self.children
        return sorted(self.children, key=lambda c: -c.cumulative_logprob)[: self.num_returned]


class OutputListener(Protocol):
    """Told of each request's progress while outputs are processed (the server's metrics, traces and logs)."""

    def on_tokens(self, state: RequestState, num_tokens: int, previous: float | None, now: float) -> None:
        """``num_tokens`` new tokens of one of ``state``'s sequences arrived at ``now``; ``previous``: the
        request's last token time before them (None: they are its first), or ``now`` where they do not lengthen
        its longest sequence (no gap between a request's tokens to count: the sequences of an n > 1 request that
        run a step apart are one stream of tokens, not two)."""

    def on_finished(self, state: RequestState) -> None:
        """Every sequence of ``state`` finished (its times and tokens are complete)."""


def _note_core_times(metrics: RequestMetrics, out: EngineCoreOutput) -> None:
    """When the core took a sequence and first launched it (the earliest over a request's sequences)."""
    if metrics.first_scheduled_time is None or out.scheduled_time < metrics.first_scheduled_time:
        metrics.first_scheduled_time = out.scheduled_time
    if out.queued_time is not None and (metrics.queued_time is None or out.queued_time < metrics.queued_time):
        metrics.queued_time = out.queued_time


class OutputProcessor:
    """Owns per-request output state; turns core outputs into RequestOutputs."""

    def __init__(self, tokenizer, listener: OutputListener | None = None) -> None:
        self.tokenizer = tokenizer
        self.listener = listener
        self.states: dict[str, RequestState] = {}
        self.child_of: dict[str, tuple[RequestState, ChildState]] = {}  # core request id -> its state

    def add(self, request_id: str, prompt: str | None, prompt_token_ids: list[int], params: SamplingParams,
            arrival_time: float, stream: bool = False) -> list[tuple[str, SamplingParams]]:
        """Track a request; returns the ``(core request id, params)`` of each of its sequences
        (``best_of`` of them when it is larger than n: the n best are returned when all finish)."""
        count = max(params.n, params.best_of or 1)
        children = []
        for i, child_id in enumerate(sequence_ids(request_id, count)):
            child_params = params if count == 1 else params.for_child(i)
            core_params = child_params
            if count > params.n and child_params.logprobs is None:  # ranking needs each token's logprob
                core_params = copy.copy(child_params)
                core_params.logprobs = 0
            child = ChildState(child_id, core_params, IncrementalDetokenizer(self.tokenizer, prompt_token_ids, child_params))
            child.logprobs = [] if child_params.logprobs is not None else None
            children.append(child)
        state = RequestState(request_id, prompt, list(prompt_token_ids), children, RequestMetrics(arrival_time),
                             prompt_logprobs=[None] if params.prompt_logprobs is not None else None, stream=stream,
                             num_returned=params.n)
        self.states[request_id] = state
        for child in children:
            self.child_of[child.request_id] = (state, child)
        return [(c.request_id, c.params) for c in children]

    def abort(self, request_id: str) -> list[str]:
        """Forget a request; returns the core ids of its sequences that had not finished."""
        state = self.states.get(request_id)
        if state is None:
            return []
        self._drop(state)
        return [c.request_id for c in state.children if c.finish_reason is None]

    def fail(self, request_id: str) -> None:
        """Forget a request the core refused (no abort needed)."""
        state = self.states.get(request_id)
        if state is not None:
            self._drop(state)

    def process(self, outputs: list[EngineCoreOutput], now: float | None = None) -> tuple[list[RequestOutput], list[str]]:
        """Handle one batch of core outputs.

        Returns the RequestOutputs of requests that finished (and of streamed requests that
        advanced), and the core ids of sequences a stop string ended (to abort in the core).
        """
        now = time.monotonic() if now is None else now
        touched: dict[str, RequestState] = {}
        stopped: list[str] = []
        for out in outputs:
            found = self.child_of.get(out.request_id)
            if found is None or found[1].finish_reason is not None:
                continue  # aborted, or a stop string ended it while this output was on its way
            state, child = found
            if out.prompt_logprobs is not None and child is state.children[0]:  # the children share the prompt
                self._record_prompt_logprobs(state, out.prompt_logprobs)
            if out.new_token_ids:
                state.num_cached_tokens = out.num_cached_tokens
                if out.scheduled_time is not None:
                    _note_core_times(state.metrics, out)
                before, previous = len(child.token_ids), state.metrics.last_token_time
                longest = max(len(c.token_ids) for c in state.children)
                if self._on_tokens(state, child, out, now):
                    stopped.append(child.request_id)
                if self.listener is not None:
                    lengthened = previous is None or len(child.token_ids) > longest
                    self.listener.on_tokens(state, len(child.token_ids) - before, previous if lengthened else now, now)
                touched[state.request_id] = state
            elif out.finish_reason is not None:  # ended without a token (refused, or its data-parallel core died)
                self._finish(state, child, out.finish_reason, now)
                touched[state.request_id] = state
        results = []
        for state in touched.values():
            if state.finished or (state.stream and not state.picks_best):
                results.append(self.snapshot(state))
            if state.finished:
                if self.listener is not None:
                    self.listener.on_finished(state)
                self._drop(state)
        return results, stopped

    def _on_tokens(self, state: RequestState, child: ChildState, out: EngineCoreOutput, now: float) -> bool:
        """Add a sequence's new tokens; True when a stop string ended it (the core must abort it)."""
        if len(out.new_token_ids) > 1:  # a round of speculative decoding: token by token, as without it
            return self._on_each_token(state, child, out, now)
        child.token_ids += out.new_token_ids
        if out.logprobs is not None:
            for token, lp, top in zip(out.new_token_ids, out.logprobs, out.top_logprobs or [[]] * len(out.logprobs)):
                child.cumulative_logprob += lp
                if child.logprobs is not None:
                    child.logprobs.append(self._logprob_dict(token, lp, top))
        m = state.metrics
        if m.first_token_time is None:
            m.first_token_time = now
        m.last_token_time = now
        finish, child.stop_reason = out.finish_reason, out.stop_reason
        by_string = False
        if finish != "stop" or child.params.include_stop_str_in_output:  # a stop token's text is left out
            stop_str = child.detokenizer.update(out.new_token_ids)
            if stop_str is not None and finish != "stop":
                finish, child.stop_reason, by_string = "stop", stop_str, finish is None
        if finish is not None:
            self._finish(state, child, finish, now)
        return by_string

    def _finish(self, state: RequestState, child: ChildState, finish: str, now: float) -> None:
        child.detokenizer.flush()
        child.finish_reason = finish
        state.num_finished += 1
        if state.finished:
            state.metrics.finished_time = now

    def _on_each_token(self, state: RequestState, child: ChildState, out: EngineCoreOutput, now: float) -> bool:
        """Several tokens of one step: each goes through :meth:`_on_tokens` alone (the finish reason
        with the last), so a stop string ends the sequence at the token that completes it and the
        text around a stop token is the same as with one token per step."""
        last = len(out.new_token_ids) - 1
        for i, token in enumerate(out.new_token_ids):
            single = EngineCoreOutput(
                out.request_id, [token], finish_reason=out.finish_reason if i == last else None,
                stop_reason=out.stop_reason if i == last else None,
                logprobs=None if out.logprobs is None else out.logprobs[i : i + 1],
                top_logprobs=None if out.top_logprobs is None else out.top_logprobs[i : i + 1],
                num_cached_tokens=out.num_cached_tokens)
            stopped = self._on_tokens(state, child, single, now)
            if child.finish_reason is not None:  # the last token, or a stop string before it
                return stopped
        return False

    def _logprob_dict(self, token: int, logprob: float, top: TopLogprobs) -> dict[int, Logprob]:
        entries = {tid: Logprob(lp, rank=r + 1, decoded_token=self._piece(tid)) for r, (tid, lp) in enumerate(top)}
        if token not in entries:
            entries[token] = Logprob(logprob, rank=None, decoded_token=self._piece(token))
        return entries

    def _record_prompt_logprobs(self, state: RequestState, chunk: list[tuple[float, TopLogprobs]]) -> None:
        if state.prompt_logprobs is None:
            return
        start = len(state.prompt_logprobs)
        for offset, (lp, top) in enumerate(chunk):
            token = state.prompt_token_ids[start + offset]
            state.prompt_logprobs.append(self._logprob_dict(token, lp, top))

    def _piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""

    def _drop(self, state: RequestState) -> None:
        self.states.pop(state.request_id, None)
        for child in state.children:
            self.child_of.pop(child.request_id, None)

    def snapshot(self, state: RequestState) -> RequestOutput:
        """The whole output so far, or for streamed requests only what is new since the last one."""
        outputs = [self._completion(i, c, state.stream) for i, c in enumerate(state.returned())]
        state.metrics.num_cached_tokens = state.num_cached_tokens
        return RequestOutput(
            request_id=state.request_id,
            prompt=state.prompt,
            prompt_token_ids=state.prompt_token_ids,
            outputs=outputs,
            finished=state.finished,
            prompt_logprobs=state.prompt_logprobs,
            metrics=state.metrics,
            num_cached_tokens=state.num_cached_tokens,
        )

    @staticmethod
    def _completion(index: int, child: ChildState, delta: bool) -> CompletionOutput:
        finish_reason = child.finish_reason
        start = child.num_emitted if delta else 0
        tokens = child.token_ids[start:]
        child.num_emitted += len(tokens)
        return CompletionOutput(
            index=index,
            text=child.detokenizer.take_delta(finished=finish_reason is not None) if delta else child.detokenizer.output_text,
            token_ids=tokens,
            cumulative_logprob=child.cumulative_logprob if child.logprobs is not None else None,
            logprobs=child.logprobs[start:] if child.logprobs is not None else None,
            finish_reason=finish_reason,
            stop_reason=child.stop_reason,
        )
