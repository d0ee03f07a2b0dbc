"""LLMEngine: add requests, step, abort. ``step()`` reads: schedule -> execute -> process outputs."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time

from pagoda.config import EngineConfig
from pagoda.engine.builder import EngineParts, build_engine_parts
from pagoda.engine.detokenizer import IncrementalDetokenizer
from pagoda.engine.model_runner import ModelRunner
from pagoda.engine.output_processor import ChildState, OutputProcessor, RequestState
from pagoda.engine.request import Request, RequestStatus
from pagoda.errors import RequestError
from pagoda.outputs import RequestMetrics, RequestOutput, StepStats
from pagoda.sampling_params import SamplingParams

logger = logging.getLogger("pagoda")


class LLMEngine:
    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.config = parts.config
        self.tokenizer = parts.tokenizer
        self.max_model_len = parts.max_model_len
        self.scheduler = parts.scheduler
        self.kv_cache = parts.kv_cache
        self.runner = ModelRunner(parts.model, parts.attention, parts.platform, parts.kv_caches,
                                  self.config.block_size, self.config.seed)
        if self._use_graphs(parts):
            self.runner.capture_decode_graphs(parts.max_model_len, self.config.max_num_seqs)
        self.outputs = OutputProcessor(parts.tokenizer, parts.max_model_len, finish=self._finish)
        self.eos_token_id = _eos_token_id(parts)
        self.stats = StepStats()
        self._ids = itertools.count()

    @staticmethod
    def _use_graphs(parts: EngineParts) -> bool:
        """Device graphs for decode steps, unless --enforce-eager or the backend/platform cannot."""
        if parts.config.enforce_eager or not parts.platform.supports_graphs():
            return False
        if not parts.attention.supports_graphs:
            logger.info("Attention backend %s cannot be captured in device graphs: decode runs eagerly",
                        type(parts.attention).__name__)
            return False
        return True

    @classmethod
    def from_config(cls, config: EngineConfig) -> "LLMEngine":
        return cls(build_engine_parts(config))

    # -- requests --------------------------------------------------------------------------
    def next_request_id(self) -> str:
        return str(next(self._ids))

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        prompt: str | None = None,
        priority: int = 0,
        stream: bool = False,
        arrival_time: float | None = None,
    ) -> None:
        """Queue a request (``n`` children for ``params.n > 1``). Raises RequestError for bad input."""
        self.validate_prompt(prompt_token_ids)
        if request_id in self.outputs.states:
            raise RequestError(f"request id {request_id!r} is already in use")
        arrival = time.monotonic() if arrival_time is None else arrival_time
        children = []
        for i in range(params.n):
            child_params = params.for_child(i) if params.n > 1 else params
            child_id = request_id if params.n == 1 else f"{request_id}#{i}"
            req = Request(child_id, list(prompt_token_ids), child_params, arrival_time=arrival,
                          priority=priority, eos_token_id=self.eos_token_id)
            children.append(ChildState(req, IncrementalDetokenizer(self.tokenizer, req.prompt_token_ids, child_params)))
        state = RequestState(request_id, prompt, list(prompt_token_ids), children, RequestMetrics(arrival), stream=stream)
        self.outputs.add(state)
        for child in children:
            self.scheduler.add_request(child.request)

    def validate_prompt(self, prompt_token_ids: list[int]) -> None:
        if not prompt_token_ids:
            raise RequestError("the prompt is empty; give at least one token")
        if len(prompt_token_ids) >= self.max_model_len:
            raise RequestError(
                f"the prompt has {len(prompt_token_ids)} tokens, but max_model_len is {self.max_model_len} "
                "(prompt plus at least one generated token); shorten the prompt or raise --max-model-len"
            )
        vocab = self.parts.hf_config.vocab_size
        if max(prompt_token_ids) >= vocab or min(prompt_token_ids) < 0:
            raise RequestError(f"prompt token ids must be in [0, {vocab}); got {min(prompt_token_ids)}..{max(prompt_token_ids)}")

    def abort(self, request_ids: list[str] | str) -> None:
        """Stop requests (waiting or running) and free their KV blocks."""
        for request_id in [request_ids] if isinstance(request_ids, str) else request_ids:
            state = self.outputs.abort(request_id)
            if state is None:
                continue
            for child in state.children:
                if not child.request.status.finished:
                    self._finish(child.request.request_id, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration of continuous batching; returns outputs of finished (or streamed) requests."""
        scheduled = self.scheduler.schedule()
        if scheduled.is_empty():
            return []
        now = time.monotonic()
        for req in scheduled.requests:
            state = self.outputs.parent_of.get(req.request_id)
            if state is not None and state.metrics.first_scheduled_time is None:
                state.metrics.first_scheduled_time = now
        block_tables = [self.kv_cache.block_ids(req.request_id) for req in scheduled.requests]
        self.stats.prompt_tokens += _num_prompt_tokens(scheduled)
        result = self.runner.execute(scheduled, block_tables)
        self.scheduler.update_from_output(scheduled, result.sampled)
        outputs = self.outputs.process(scheduled.requests, result)
        self._update_stats(len(scheduled.preempted), len(result.sampled))
        return outputs

    def _finish(self, request_id: str, status: RequestStatus) -> None:
        self.scheduler.finish(request_id, status)
        self.runner.release(request_id)

    def snapshot_stats(self) -> StepStats:
        """Current gauges and counters, as a copy that is safe to hand to another thread."""
        self._refresh_gauges()
        return dataclasses.replace(self.stats)

    def _update_stats(self, num_preempted: int, num_sampled: int) -> None:
        self._refresh_gauges()
        self.stats.num_preemptions += num_preempted
        self.stats.generation_tokens += num_sampled

    def _refresh_gauges(self) -> None:
        s = self.stats
        s.num_running = self.scheduler.num_running
        s.num_waiting = self.scheduler.num_waiting
        s.kv_cache_usage = self.kv_cache.usage
        s.prefix_cache_hit_rate = self.kv_cache.prefix_cache_stats.hit_rate


def _num_prompt_tokens(scheduled) -> int:
    """Prompt tokens computed by this step (before the scheduler advances the requests)."""
    return sum(
        max(0, min(req.num_prompt_tokens, req.num_computed_tokens + n) - req.num_computed_tokens)
        for req, n in zip(scheduled.requests, scheduled.num_tokens)
    )


def _eos_token_id(parts: EngineParts) -> int | None:
    eos = getattr(parts.tokenizer, "eos_token_id", None)
    if eos is None:
        eos = getattr(parts.hf_config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return eos
