"""The front end's half of a step: detokenize, match stop strings, assemble RequestOutputs.

It consumes the engine core's :class:`EngineCoreOutput`s (token ids, finish reasons decided by
tokens, logprobs) and owns everything text: incremental detokenization, stop strings (a match
finishes the sequence here and asks the core to abort it), streaming deltas, and the ``n > 1``
fan-in of child sequences into one RequestOutput.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pagoda.engine.detokenizer import IncrementalDetokenizer
from pagoda.engine_core.messages import EngineCoreOutput, TopLogprobs
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
    num_cached_tokens: int = 0
    num_finished: int = 0  # children with a finish reason

    @property
    def finished(self) -> bool:
        return self.num_finished == len(self.children)


class OutputProcessor:
    """Owns per-request output state; turns core outputs into RequestOutputs."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, RequestState] = {}
        self.child_of: dict[str, tuple[RequestState, ChildState]] = {}  # core request id -> its state

    def add(self, request_id: str, prompt: str | None, prompt_token_ids: list[int], params: SamplingParams,
            arrival_time: float, stream: bool = False) -> list[tuple[str, SamplingParams]]:
        """Track a request; returns the ``(core request id, params)`` of each of its n sequences."""
        ids = [request_id] if params.n == 1 else [f"{request_id}#{i}" for i in range(params.n)]
        children = []
        for i, child_id in enumerate(ids):
            child_params = params if params.n == 1 else params.for_child(i)
            child = ChildState(child_id, child_params, IncrementalDetokenizer(self.tokenizer, prompt_token_ids, child_params))
            child.logprobs = [] if child_params.logprobs is not None else None
            children.append(child)
        state = RequestState(request_id, prompt, list(prompt_token_ids), children, RequestMetrics(arrival_time),
                             prompt_logprobs=[None] if params.prompt_logprobs is not None else None, stream=stream)
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
                if self._on_tokens(state, child, out, now):
                    stopped.append(child.request_id)
                touched[state.request_id] = state
        results = []
        for state in touched.values():
            if state.finished or state.stream:
                results.append(self.snapshot(state))
            if state.finished:
                self._drop(state)
        return results, stopped

    def _on_tokens(self, state: RequestState, child: ChildState, out: EngineCoreOutput, now: float) -> bool:
        """Add a sequence's new tokens; True when a stop string ended it (the core must abort it)."""
        child.token_ids += out.new_token_ids
        if child.logprobs is not None and out.logprobs is not None:
            for token, lp, top in zip(out.new_token_ids, out.logprobs, out.top_logprobs or [[]] * len(out.logprobs)):
                child.cumulative_logprob += lp
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
            child.detokenizer.flush()
            child.finish_reason = finish
            state.num_finished += 1
            if state.finished:
                m.finished_time = now
        return by_string

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
        outputs = [self._completion(i, c, state.stream) for i, c in enumerate(state.children)]
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
