"""AsyncEngine: the API server's front end over an engine core process.

Routes call :meth:`AsyncEngine.generate`, an async iterator of delta outputs. Requests go to the
core over ZeroMQ (:class:`~pagoda.engine_core.client.AsyncMPClient`); one reader task takes each
batch of core outputs, detokenizes it and matches stop strings here, in the server process,
(:class:`~pagoda.engine.output_processor.OutputProcessor`) and puts each request's delta on its
``asyncio.Queue``. A consumer that falls behind gets its queued deltas merged into one. If the
core dies, every pending request fails with :class:`EngineDeadError` and new ones are refused.
With ``request_timeout`` (``--request-timeout``) a timer puts :class:`RequestTimeout` on a request's
queue once it has run that long: the consumer raises it and the request is aborted in the core.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from typing import AsyncIterator

from pagoda.engine.output_processor import OutputProcessor
from pagoda.engine.engine import resolve_params
from pagoda.engine_core.client import AsyncMPClient, EngineDeadError
from pagoda.engine_core.core import validate_prompt
from pagoda.sampling_params import BeamSearchParams
from pagoda.messages import EngineCoreOutputs, add_messages
from pagoda.engine_core.trace import Trace
from pagoda.errors import RequestError
from pagoda.lora_request import LoRARequest
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda.engine.pooling_tracker import PoolingTracker
from pagoda.server.async_pooling import AsyncPooling
from pagoda.server.metrics import ServerMetrics
from pagoda.server.request_log import RequestLog
from pagoda.server.request_observers import RequestObservers
from pagoda.server.tokenize_pool import AsyncTokenizer
from pagoda.server.tracing import RequestTracer

logger = logging.getLogger("pagoda.server")

__all__ = ["AsyncEngine", "EngineDeadError", "RequestTimeout"]
METRICS_REPORT_S = 1.0  # how often an API server reports its counters when there are several
METRICS_WAIT_S = 2.0  # how long /metrics waits for the other API servers' reports


class RequestTimeout(Exception):
    """A request ran longer than ``--request-timeout`` seconds (it is aborted in the core)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request ran longer than this server's request timeout ({seconds:g} s, set by "
                         f"--request-timeout) and was stopped; ask for fewer tokens (max_tokens), or ask the "
                         f"operator to raise --request-timeout")
        self.seconds = seconds


class AsyncEngine(AsyncPooling):
    """Serve many asyncio tasks from one engine core process."""

    def __init__(self, client: AsyncMPClient, tokenizer, metrics: ServerMetrics | None = None,
                 share_metrics: bool = False, request_timeout: float | None = None,
                 tracer: RequestTracer | None = None, request_log: RequestLog | None = None) -> None:
        self.client = client
        self.request_timeout = request_timeout  # seconds from arrival; None: no limit
        self.tokenizer = tokenizer
        self.encoder = AsyncTokenizer(tokenizer) if tokenizer is not None else None  # prompts, off the event loop
        self.info = client.info
        self.max_model_len = client.info.max_model_len
        self.metrics = metrics or ServerMetrics("model")
        self.metrics.engine_stats = client.engine_stats  # each core's latest gauges (several under data parallelism)
        self.observers = RequestObservers(self.metrics, tracer, request_log, lambda i: client.engine_of(i))
        self.outputs = OutputProcessor(tokenizer, listener=self.observers)
        self.pooling = PoolingTracker()  # pooling requests (runner "pooling"): see AsyncPooling.encode
        self.error: str | None = None
        self.draining = False  # set on shutdown: new requests get 503
        self._streams: dict[str, asyncio.Queue] = {}
        self._started = False
        # With several API server processes each reports its counters to the core every second
        # and /metrics merges the others' latest reports with its own (render_metrics).
        self.share_metrics = share_metrics
        self.client_id = secrets.token_hex(8)
        self._reporter: asyncio.Task | None = None
        self.trace = Trace.from_env(f"api_{os.getpid()}")  # PAGODA_TRACE_DIR: when first outputs reach handlers

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start reading the core's outputs (from the server's event loop)."""
        if not self._started:
            self.client.start(self._on_outputs, self._on_dead)
            self._started = True
            if self.share_metrics:
                self._reporter = asyncio.get_running_loop().create_task(self._report_metrics())

    async def stop(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
            await asyncio.gather(self._reporter, return_exceptions=True)
        await self.client.close()
        if self.encoder is not None:
            self.encoder.close()
        self._fail_pending("the server is shutting down")
        self.observers.close()

    @property
    def num_pending(self) -> int:
        return len(self._streams)

    def unavailable_reason(self) -> str | None:
        """Why new requests are refused now (None when they are accepted)."""
        if self.error is not None:
            return self.error
        if self.draining:
            return "the server is shutting down"
        return None

    # -- requests -----------------------------------------------------------------------------
    @staticmethod
    def next_request_id(prefix: str) -> str:
        return f"{prefix}-{secrets.token_hex(8)}"  # unique across the API server processes

    def validate_prompt(self, token_ids: list[int]) -> None:
        validate_prompt(token_ids, self.max_model_len, self.info.vocab_size)

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       prompt: str | None = None, priority: int = 0, beam: BeamSearchParams | None = None,
                       lora_request: LoRARequest | None = None,
                       mm_items: list[MultimodalItem] | None = None) -> AsyncIterator[RequestOutput]:
        """Yield delta outputs of one request until it finishes; aborts it if the consumer stops early.
        With ``beam``, a beam search whose sequences ``params`` describes (they arrive when it ends);
        with ``lora_request``, run with that LoRA adapter; ``mm_items``: its processed images."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise EngineDeadError(reason)
        params = resolve_params(params, self.tokenizer, self.info.vocab_size)
        arrival = time.monotonic()
        queue: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = queue
        sequences = self.outputs.add(request_id, prompt, prompt_token_ids, params, arrival, stream=True)
        self.observers.added(request_id, prompt, prompt_token_ids, params,
                             lora_request.lora_name if lora_request is not None else None)
        finished = traced = False
        timer = self._arm_timeout(queue)
        try:
            await self.client.add_requests(add_messages(request_id, prompt_token_ids, sequences, arrival, priority,
                                                        beam, lora_request, mm_items))
            self.observers.routed(request_id)
            while not finished:
                item = await queue.get()
                while isinstance(item, RequestOutput) and not item.finished and not queue.empty():
                    following = queue.get_nowait()  # the consumer fell behind: one delta for all
                    item = following if isinstance(following, BaseException) else merge_deltas(item, following)
                if isinstance(item, BaseException):
                    raise item
                if self.trace is not None and not traced:
                    self.trace.record(request=request_id, arrival=arrival, first_output=time.monotonic())
                    traced = True
                finished = item.finished
                yield item
        finally:
            if timer is not None:
                timer.cancel()
            if not finished:
                await self.abort(request_id)

    def _arm_timeout(self, queue: asyncio.Queue) -> asyncio.TimerHandle | None:
        """Put RequestTimeout on ``queue`` after ``request_timeout`` seconds (one timer, nothing per token)."""
        if not self.request_timeout:
            return None
        return asyncio.get_running_loop().call_later(self.request_timeout, queue.put_nowait,
                                                     RequestTimeout(self.request_timeout))

    async def abort(self, request_id: str) -> None:
        """Stop a request: its sequences are aborted in the core (freeing their KV blocks)."""
        if self._streams.pop(request_id, None) is None:
            return
        state = self.outputs.states.get(request_id)
        sequences = self.outputs.abort(request_id)
        if self.pooling.discard(request_id):
            sequences.append(request_id)
        if state is not None:
            self.observers.aborted(state)
        if sequences and self.error is None:
            await self.client.abort(sequences)

    async def render_metrics(self) -> str:
        """Prometheus text: this process's request metrics, plus the other API servers' (if shared)."""
        others: list[dict] = []
        if self.share_metrics and self.error is None:
            try:
                reports = await self.client.call_utility("collect_metrics", timeout=METRICS_WAIT_S)
                others = [state for client_id, state in reports.items() if client_id != self.client_id]
            except (asyncio.TimeoutError, EngineDeadError, RuntimeError):
                pass  # the core is busy or gone: this process's own numbers
        return self.metrics.render(others)

    async def _report_metrics(self) -> None:
        while self.error is None:
            await asyncio.sleep(METRICS_REPORT_S)
            try:
                await self.client.call_utility("report_metrics", self.client_id, self.metrics.state())
            except (asyncio.TimeoutError, EngineDeadError, RuntimeError):
                pass

    async def call_utility(self, method: str, *args, timeout: float = 30.0):
        """Call an engine core utility (``EngineCore.UTILITIES``) between its steps."""
        return await self.client.call_utility(method, *args, timeout=timeout)

    # -- the reader task's callbacks ---------------------------------------------------------------
    def _on_outputs(self, batch: EngineCoreOutputs) -> None:
        if batch.stats is not None:
            self.metrics.snapshot = batch.stats
        self.observers.batch_engine = batch.engine_index
        if batch.error is not None:  # the core refused these requests
            for out in batch.outputs:
                self._fail(out.request_id.partition("#")[0], RequestError(batch.error))
            return
        results, stopped = self.outputs.process(batch.outputs)
        self._deliver_pooled(batch.outputs)
        if stopped:
            asyncio.get_running_loop().create_task(self.client.abort(stopped))
        for output in results:
            queue = self._streams.get(output.request_id)
            if queue is None:
                continue
            if output.finished:
                del self._streams[output.request_id]
            queue.put_nowait(output)

    def _on_dead(self, reason: str, sequence_ids: list[str] | None = None) -> None:
        """Every core is gone: fail everything; with ``sequence_ids``, one data-parallel core of several died:
        fail its requests only."""
        if sequence_ids is not None:
            logger.error("Engine core: %s; failing its %d sequence(s), the other cores keep serving", reason,
                         len(sequence_ids))
            for request_id in {i.partition("#")[0] for i in sequence_ids}:
                self._fail(request_id, EngineDeadError(reason))
            return
        logger.error("Engine core: %s", reason)
        self.error = reason
        self._fail_pending(reason)

    def _fail(self, request_id: str, error: BaseException) -> None:
        queue = self._streams.pop(request_id, None)
        state = self.outputs.states.get(request_id)
        if state is not None:
            self.observers.failed(state)
        self.outputs.fail(request_id)
        self.pooling.discard(request_id)
        if queue is not None:
            queue.put_nowait(error)

    def _fail_pending(self, reason: str) -> None:
        for request_id in list(self._streams):
            self._fail(request_id, EngineDeadError(reason))


def merge_deltas(first: RequestOutput, second: RequestOutput) -> RequestOutput:
    """One delta output covering two consecutive ones of the same request."""
    by_index = {c.index: c for c in first.outputs}
    for c in second.outputs:
        a = by_index.get(c.index)
        if a is None:
            by_index[c.index] = c
            continue
        a.text += c.text
        a.token_ids = a.token_ids + c.token_ids
        if c.logprobs is not None:
            a.logprobs = (a.logprobs or []) + c.logprobs
        a.cumulative_logprob, a.finish_reason, a.stop_reason = c.cumulative_logprob, c.finish_reason, c.stop_reason
    second.outputs = [by_index[i] for i in sorted(by_index)]
    return second
