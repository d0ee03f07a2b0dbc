"""The engine core process: an EngineCore behind a ZeroMQ ROUTER socket.

Front ends (the API servers, or ``LLMEngine`` in multiprocess mode) connect DEALER sockets and
send :data:`~pagoda.messages.ClientMessage` frames; each request's outputs go back
to the client that added it. The loop drains the socket between steps (blocking only while the
engine has nothing to do), so the HTTP side never waits on model execution and the engine never
waits on HTTP. SIGTERM drains (running requests finish, new ones are refused), then exits;
SIGINT is left to the parent, which shuts the core down in order. An error in the loop is sent
to every client as :class:`CoreFailed` before the process exits with status 1.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import defaultdict
from typing import Callable

import zmq

from pagoda.config import EngineConfig
from pagoda import messages as msg
from pagoda.engine_core.core import EngineCore
from pagoda.engine_core.gc_freeze import freeze_startup_objects
from pagoda.errors import RequestError
from pagoda.logs import configure_logging
from pagoda.plugins import manager as plugin_manager

logger = logging.getLogger("pagoda.core")
IDLE_POLL_MS = 500  # how often an idle core checks that its parent is alive
STATS_INTERVAL_S = 0.5  # clients without outputs still get the gauges this often


def run_engine_core(config: EngineConfig, address: str, status, core_factory: Callable = EngineCore.from_config,
                    log_level: str = "INFO", plugins: tuple = (None, None)) -> None:
    """Process entry point: build the core, report ``("ready", info)`` or ``("error", text)`` on
    the ``status`` pipe, then serve clients on ``address`` until shut down. ``plugins`` is the
    parent's plugin settings (``PluginManager.settings``)."""
    configure_logging(log_level)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()  # before the (long) build: a parent that dies meanwhile is noticed after it
    plugin_manager.configure(*plugins)
    try:
        core = core_factory(config)
    except BaseException as exc:  # noqa: BLE001 - the parent prints it and exits
        status.send(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 1000)
    socket.bind(address)
    status.send(("ready", msg.encode(core.info())))
    status.close()
    freeze_startup_objects()
    loop = CoreLoop(core, socket, parent)
    signal.signal(signal.SIGTERM, lambda *_: loop.drain())
    try:
        loop.run()
    finally:
        core.shutdown()  # the other tensor-parallel ranks, if any
        socket.close()
        context.term()


class CoreLoop:
    """Moves messages between the socket and the EngineCore, one step at a time."""

    def __init__(self, core: EngineCore, socket: zmq.Socket, parent: int) -> None:
        self.core = core
        self.socket = socket
        self.owners: dict[str, bytes] = {}  # request id -> the identity of the client that added it
        self.clients: set[bytes] = set()
        self.front_end_metrics: dict[str, dict] = {}  # API server id -> its latest ServerMetrics.state()
        self.draining = False
        self.stopping = False
        self.parent = parent
        self._last_stats = 0.0

    def drain(self) -> None:
        """Finish the running requests, refuse new ones, then stop."""
        logger.info("Engine core draining %d request(s), then exiting", len(self.core.requests))
        self.draining = True

    def run(self) -> None:
        try:
            while not self.stopping:
                busy = self.core.has_unfinished()
                self._receive(block=not busy)
                if self.draining and not self.core.has_unfinished():
                    break
                if busy or self.core.has_unfinished():
                    self._send_outputs(self.core.step())
                    if not self.core.has_unfinished():
                        self._broadcast_stats()  # the gauges after the last step
        except Exception as exc:
            logger.exception("The engine core failed")
            self._broadcast(msg.CoreFailed(f"{type(exc).__name__}: {exc}"))
            raise SystemExit(1) from None

    # -- input ----------------------------------------------------------------------------------
    def _receive(self, block: bool) -> None:
        """Handle every waiting message; when ``block``, wait for the first (checking the parent)."""
        while block and not self.socket.poll(IDLE_POLL_MS):
            if os.getppid() != self.parent:
                logger.warning("The engine core's parent process is gone: exiting")
                self.stopping = True
                return
            if self.draining:
                return
        while not self.stopping:
            try:
                identity, frame = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.clients.add(identity)
            self._handle(identity, msg.decode_client_message(frame))

    def _handle(self, identity: bytes, message: msg.ClientMessage) -> None:
        if isinstance(message, msg.AddRequest):
            self._add(identity, message)
        elif isinstance(message, msg.AbortRequests):
            self.core.abort(message.request_ids)
            for request_id in message.request_ids:
                self.owners.pop(request_id, None)
        elif isinstance(message, msg.UtilityCall):
            self._send(identity, self._call(message))
        elif isinstance(message, msg.Shutdown):
            if message.drain:
                self.drain()
            else:
                self.stopping = True

    def _add(self, identity: bytes, add: msg.AddRequest) -> None:
        if self.draining:
            error = "the engine is shutting down"
        else:
            try:
                self.core.add_request(add)
                for output_id in add.output_ids:  # a beam search answers under its sequences' ids
                    self.owners[output_id] = identity
                return
            except RequestError as exc:
                error = str(exc)
        self._send(identity, msg.EngineCoreOutputs([msg.EngineCoreOutput(add.request_id, [], "abort")], error=error))

    def _call(self, call: msg.UtilityCall) -> msg.UtilityResult:
        if call.method == "report_metrics":  # an API server's counters, kept for the others to merge
            client_id, state = call.args
            self.front_end_metrics[client_id] = state
            return msg.UtilityResult(call.call_id)
        if call.method == "collect_metrics":
            return msg.UtilityResult(call.call_id, self.front_end_metrics)
        if call.method not in self.core.UTILITIES:
            return msg.UtilityResult(call.call_id, error=f"unknown engine core utility {call.method!r}")
        try:
            return msg.UtilityResult(call.call_id, getattr(self.core, call.method)(*call.args))
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            return msg.UtilityResult(call.call_id, error=f"{type(exc).__name__}: {exc}")

    # -- output ---------------------------------------------------------------------------------
    def _send_outputs(self, outputs: list[msg.EngineCoreOutput]) -> None:
        by_client: dict[bytes, list[msg.EngineCoreOutput]] = defaultdict(list)
        for out in outputs:
            owner = self.owners.get(out.request_id)
            if owner is None:
                continue
            by_client[owner].append(out)
            if out.finish_reason is not None:
                del self.owners[out.request_id]
        stats = self.core.snapshot_stats()
        for identity, batch in by_client.items():
            self._send(identity, msg.EngineCoreOutputs(batch, stats))
        if time.monotonic() - self._last_stats > STATS_INTERVAL_S:
            self._broadcast_stats(stats)

    def _broadcast_stats(self, stats: msg.StepStats | None = None) -> None:
        """The gauges to every client (also those without outputs this step)."""
        self._last_stats = time.monotonic()
        self._broadcast(msg.EngineCoreOutputs([], stats or self.core.snapshot_stats()))

    def _broadcast(self, message) -> None:
        for identity in self.clients:
            self._send(identity, message)

    def _send(self, identity: bytes, message) -> None:
        try:
            self.socket.send_multipart([identity, msg.encode(message)], zmq.NOBLOCK)
        except zmq.Again:  # the client's queue is full (it stopped reading): it is dropped
            logger.warning("An engine client is not reading its outputs; dropping a message")
