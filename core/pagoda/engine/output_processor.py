"""After each step: detokenize, check stop conditions, and assemble RequestOutputs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from pagoda.engine.detokenizer import IncrementalDetokenizer
from pagoda.engine.model_runner import RunnerOutput
from pagoda.engine.request import Request, RequestStatus
from pagoda.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput


@dataclass
class ChildState:
    """One generated sequence of a (possibly n > 1) request."""

    request: Request
    detokenizer: IncrementalDetokenizer
    cumulative_logprob: float = 0.0  # reported only when the request asked for logprobs (as in vLLM)
    logprobs: list[dict[int, Logprob]] | None = None
    stop_reason: int | str | None = None
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

    @property
    def finished(self) -> bool:
        return all(c.request.status.finished for c in self.children)


class OutputProcessor:
    """Owns per-request output state; the engine asks it what finished after each step."""

    def __init__(self, tokenizer, max_model_len: int, finish: Callable[[str, RequestStatus], None]) -> None:
        """``finish(request_id, status)`` is called for each child that meets a stop condition."""
        self.tokenizer = tokenizer
        self.finish = finish
        self.max_model_len = max_model_len
        self.states: dict[str, RequestState] = {}
        self.parent_of: dict[str, RequestState] = {}  # child request id -> state

    def add(self, state: RequestState) -> None:
        self.states[state.request_id] = state
        for child in state.children:
            self.parent_of[child.request.request_id] = state
            if child.request.sampling_params.logprobs is not None:
                child.logprobs = []
        if state.children[0].request.sampling_params.prompt_logprobs is not None:
            state.prompt_logprobs = [None]

    def process(self, requests: list[Request], result: RunnerOutput, now: float | None = None) -> list[RequestOutput]:
        """Handle the requests of one step (their sampled tokens are already appended).

        Returns outputs of requests that finished, and of streamed requests that advanced.
        """
        now = time.monotonic() if now is None else now
        outputs = []
        touched: dict[str, RequestState] = {}
        for req in requests:
            state = self.parent_of.get(req.request_id)
            if state is None:
                continue
            self._record_prompt_logprobs(state, result.prompt_logprobs.get(req.request_id))
            if req.request_id in result.sampled:
                self._on_token(state, req, result, now)
                touched[state.request_id] = state
        for state in touched.values():
            if state.finished or state.stream:
                outputs.append(self.snapshot(state))
            if state.finished:
                self._drop(state)
        return outputs

    def abort(self, request_id: str) -> RequestState | None:
        """Forget a parent request; returns its state so the engine can abort the children."""
        state = self.states.get(request_id)
        if state is not None:
            self._drop(state)
        return state

    def _on_token(self, state: RequestState, req: Request, result: RunnerOutput, now: float) -> None:
        child = next(c for c in state.children if c.request is req)
        token = result.sampled[req.request_id]
        if child.logprobs is not None:
            logprob = result.logprobs[req.request_id]
            child.cumulative_logprob += logprob
            child.logprobs.append(self._logprob_dict(token, logprob, result.top_logprobs.get(req.request_id, [])))
        if state.metrics.first_token_time is None:
            state.metrics.first_token_time = now
        state.metrics.last_token_time = now
        status = self._check_stop(child, token)
        if status is not None:
            self.finish(req.request_id, status)
            if state.finished:
                state.metrics.finished_time = now

    def _check_stop(self, child: ChildState, token: int) -> RequestStatus | None:
        """EOS, stop token, stop string, then length. The stopping token's text is left out
        unless ``include_stop_str_in_output`` (as in vLLM)."""
        req, params = child.request, child.request.sampling_params
        status = None
        if req.num_output_tokens >= params.min_tokens:
            if not params.ignore_eos and token == req.eos_token_id:
                status = RequestStatus.FINISHED_STOPPED
            elif token in params.stop_token_ids:
                status, child.stop_reason = RequestStatus.FINISHED_STOPPED, token
        if status is None or params.include_stop_str_in_output:
            stop_str = child.detokenizer.update([token])
            if status is None and stop_str is not None:
                status, child.stop_reason = RequestStatus.FINISHED_STOPPED, stop_str
        if status is None and (
            (params.max_tokens is not None and req.num_output_tokens >= params.max_tokens)
            or req.num_tokens >= self.max_model_len
        ):
            status = RequestStatus.FINISHED_LENGTH
        if status is not None:
            child.detokenizer.flush()
        return status

    def _logprob_dict(self, token: int, logprob: float, top: list[tuple[int, float]]) -> dict[int, Logprob]:
        entries = {tid: Logprob(lp, rank=r + 1, decoded_token=self._piece(tid)) for r, (tid, lp) in enumerate(top)}
        if token not in entries:
            entries[token] = Logprob(logprob, rank=None, decoded_token=self._piece(token))
        return entries

    def _record_prompt_logprobs(self, state: RequestState, chunk) -> None:
        if chunk is None or state.prompt_logprobs is None:
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
            self.parent_of.pop(child.request.request_id, None)

    def snapshot(self, state: RequestState) -> RequestOutput:
        """The whole output so far, or for streamed requests only what is new since the last one."""
        outputs = [self._completion(i, c, state.stream) for i, c in enumerate(state.children)]
        state.metrics.num_cached_tokens = state.children[0].request.num_cached_tokens
        return RequestOutput(
            request_id=state.request_id,
            prompt=state.prompt,
            prompt_token_ids=state.prompt_token_ids,
            outputs=outputs,
            finished=state.finished,
            prompt_logprobs=state.prompt_logprobs,
            metrics=state.metrics,
            num_cached_tokens=state.metrics.num_cached_tokens,
        )

    @staticmethod
    def _completion(index: int, child: ChildState, delta: bool) -> CompletionOutput:
        finish_reason = child.request.status.finish_reason
        start = child.num_emitted if delta else 0
        tokens = child.request.output_token_ids[start:]
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
