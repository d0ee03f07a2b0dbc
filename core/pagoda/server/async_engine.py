"""AsyncEngine: one background thread runs the engine loop for every request of the server.

Requests and aborts enter through a thread-safe command queue; each request gets an
``asyncio.Queue`` that the engine thread fills with delta outputs via ``call_soon_threadsafe``.
The thread blocks on the command queue when the engine is idle, so the event loop never waits on
model execution. If the loop crashes, pending requests fail with :class:`EngineDeadError` and new
ones are refused.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from pagoda.engine.engine import LLMEngine
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda.server.metrics import ServerMetrics

logger = logging.getLogger("pagoda.server")


class EngineDeadError(RuntimeError):
    """The engine loop stopped (crashed or shut down); the request cannot complete."""


@dataclass
class _Stream:
    """Where the engine thread delivers one request's outputs."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    num_sequences: int

    def put(self, item: RequestOutput | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass


@dataclass
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt: str | None
    priority: int
    stream: _Stream


@dataclass
class _Abort:
    request_id: str


@dataclass
class _Call:
    """Run ``fn(engine)`` on the engine thread (tests and debugging); the result goes to ``done``."""

    fn: Callable[[LLMEngine], object]
    done: "queue.Queue[object]"


class AsyncEngine:
    """Serve an :class:`LLMEngine` to many asyncio tasks from one engine thread."""

    def __init__(self, engine: LLMEngine, metrics: ServerMetrics | None = None, idle_poll_s: float = 1.0) -> None:
        self.engine = engine
        self.metrics = metrics or ServerMetrics("model")
        self.idle_poll_s = idle_poll_s
        self.error: BaseException | None = None
        self.draining = False  # set on shutdown: new requests get 503
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._ids = 0
        self._ids_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pagoda-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop; requests still pending fail with EngineDeadError."""
        self._stopping = True
        self._commands.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_alive(self) -> bool:
        return self.error is None and self._thread is not None and self._thread.is_alive()

    @property
    def num_pending(self) -> int:
        return len(self._streams)

    def unavailable_reason(self) -> str | None:
        """Why new requests are refused now (None when they are accepted)."""
        if self.error is not None:
            return f"the engine failed ({type(self.error).__name__}: {self.error}); restart the server"
        if self.draining or self._stopping:
            return "the server is shutting down"
        if not self.is_alive:
            return "the engine is not running"
        return None

    # -- the asyncio side -----------------------------------------------------------------------
    def next_request_id(self, prefix: str) -> str:
        with self._ids_lock:
            self._ids += 1
            return f"{prefix}-{self._ids}"

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       prompt: str | None = None, priority: int = 0) -> AsyncIterator[RequestOutput]:
        """Yield delta outputs of one request until it finishes; aborts it if the consumer stops early."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise EngineDeadError(reason)
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue(), params.n)
        self._commands.put(_Add(request_id, list(prompt_token_ids), params, prompt, priority, stream))
        finished = False
        try:
            while not finished:
                item = await self._next(stream)
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:
                self.abort(request_id)

    async def _next(self, stream: _Stream) -> RequestOutput | BaseException:
        """The next item of ``stream``; an error if the engine thread is gone (never waits forever)."""
        while True:
            try:
                return await asyncio.wait_for(stream.queue.get(), timeout=self.idle_poll_s)
            except asyncio.TimeoutError:
                if self._thread is None or not self._thread.is_alive():
                    return EngineDeadError(self.unavailable_reason() or "the engine stopped")

    def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    async def call(self, fn: Callable[[LLMEngine], object]) -> object:
        """Run ``fn(engine)`` on the engine thread between steps and return its result."""
        done: queue.Queue = queue.Queue()
        self._commands.put(_Call(fn, done))
        result = await asyncio.to_thread(done.get, True, 30.0)
        if isinstance(result, BaseException):
            raise result
        return result

    # -- the engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping:
                self._drain_commands(block=not self.engine.has_unfinished_requests())
                if self._stopping:
                    break
                if self.engine.has_unfinished_requests():
                    self._dispatch(self.engine.step())
                self._publish_snapshot()
        except BaseException as exc:  # noqa: BLE001 - report any crash to every waiting request
            logger.exception("The engine loop crashed; failing pending requests")
            self.error = exc
        self._fail_pending(self.error)

    def _drain_commands(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=self.idle_poll_s) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while command is not None:  # None: the stop sentinel
            self._handle(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _handle(self, command: _Add | _Abort | _Call) -> None:
        if isinstance(command, _Add):
            try:
                self.engine.add_request(command.request_id, command.prompt_token_ids, command.params,
                                        prompt=command.prompt, priority=command.priority, stream=True)
            except Exception as exc:  # bad input: fail this request only
                command.stream.put(exc)
                return
            self._streams[command.request_id] = command.stream
            self.metrics.on_added(len(command.prompt_token_ids))
        elif isinstance(command, _Abort):
            stream = self._streams.pop(command.request_id, None)
            if stream is not None:
                self.engine.abort(command.request_id)
                self.metrics.on_aborted(command.request_id, stream.num_sequences)
        else:
            try:
                command.done.put(command.fn(self.engine))
            except Exception as exc:
                command.done.put(exc)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        self.metrics.observe_outputs(outputs)
        for output in outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue
            if output.finished:
                del self._streams[output.request_id]
            stream.put(output)

    def _publish_snapshot(self) -> None:
        self.metrics.snapshot = self.engine.snapshot_stats()

    def _fail_pending(self, error: BaseException | None) -> None:
        message = "the engine stopped" if error is None else f"the engine failed: {type(error).__name__}: {error}"
        for stream in self._streams.values():
            stream.put(EngineDeadError(message))
        self._streams.clear()
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, _Add):
                command.stream.put(EngineDeadError(message))
            elif isinstance(command, _Call):
                command.done.put(EngineDeadError(message))
