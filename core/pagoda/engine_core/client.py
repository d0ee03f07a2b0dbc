"""How front ends talk to an engine core: in the same process, or over ZeroMQ to its own process.

:class:`InprocClient` steps an :class:`EngineCore` on the caller's thread (offline ``LLM``).
:class:`CoreProcess` starts the core in a child process; :class:`SyncMPClient` (``LLMEngine``
in multiprocess mode) and :class:`AsyncMPClient` (the API servers) connect to it. Every client
notices a core that died (process gone, or a :class:`CoreFailed` message) and raises
:class:`EngineDeadError` instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Callable

import zmq
import zmq.asyncio

from pagoda.config import EngineConfig
from pagoda import messages as msg
from pagoda.engine_core.core import EngineCore
from pagoda.engine_core.proc import run_engine_core
from pagoda.errors import PagodaError
from pagoda.plugins import get_plugin_manager

POLL_MS = 500  # how often a waiting client checks that the core is alive


class EngineDeadError(RuntimeError):
    """The engine core stopped (crashed or shut down); the request cannot complete."""


class EngineStartError(PagodaError):
    """The engine core could not be built (bad model, no memory, ...)."""


class EngineCoreClient(ABC):
    """The synchronous client interface (``LLMEngine`` uses it)."""

    info: msg.EngineInfo

    @abstractmethod
    def add_requests(self, adds: list[msg.AddRequest]) -> None: ...

    @abstractmethod
    def abort(self, request_ids: list[str]) -> None: ...

    @abstractmethod
    def get_outputs(self) -> msg.EngineCoreOutputs:
        """The next batch of outputs (one step's worth); raises EngineDeadError if the core died."""

    @abstractmethod
    def call_utility(self, method: str, *args: Any) -> Any: ...

    def shutdown(self) -> None:
        """Release the core (stop its process, if it has one)."""


class InprocClient(EngineCoreClient):
    """Runs the core's steps on the caller's thread."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.info = core.info()

    def add_requests(self, adds: list[msg.AddRequest]) -> None:
        for add in adds:
            self.core.add_request(add)

    def abort(self, request_ids: list[str]) -> None:
        self.core.abort(request_ids)

    def get_outputs(self) -> msg.EngineCoreOutputs:
        outputs = self.core.step() if self.core.has_unfinished() else []
        return msg.EngineCoreOutputs(outputs, self.core.snapshot_stats())

    def call_utility(self, method: str, *args: Any) -> Any:
        return getattr(self.core, method)(*args)

    def shutdown(self) -> None:
        self.core.shutdown()


class CoreProcess:
    """The engine core in a child process (spawned: the parent may hold CUDA or threads)."""

    def __init__(self, config: EngineConfig, core_factory: Callable = EngineCore.from_config,
                 log_level: str = "INFO", wait: bool = True) -> None:
        """Start the core; with ``wait``, return once it is built (else call :meth:`wait_until_ready`)."""
        self.address = f"ipc://{tempfile.gettempdir()}/pagoda-core-{uuid.uuid4().hex[:12]}.sock"
        context = multiprocessing.get_context("spawn")
        self._receiver, sender = context.Pipe(duplex=False)
        manager = get_plugin_manager()  # the child loads the same plugins as this process
        name = "pagoda-engine-core" if config.data_parallel_rank is None else f"pagoda-engine-core{config.data_parallel_rank}"
        self.process = context.Process(target=run_engine_core, name=name,
                                       args=(config, self.address, sender, core_factory, log_level,
                                             manager.settings))
        self.process.start()
        sender.close()
        self.info: msg.EngineInfo | None = self.wait_until_ready() if wait else None

    def wait_until_ready(self) -> msg.EngineInfo:
        """The core's EngineInfo once it is built (EngineStartError if it failed)."""
        self.info = self._wait_until_ready(self._receiver)
        return self.info

    def _wait_until_ready(self, receiver) -> msg.EngineInfo:
        while not receiver.poll(POLL_MS / 1000):
            if not self.process.is_alive():
                raise EngineStartError(f"the engine core process exited during start-up ({self.exit_reason()})")
        try:
            kind, payload = receiver.recv()
        except EOFError:
            self.process.join(10)
            raise EngineStartError(f"the engine core process exited during start-up ({self.exit_reason()})") from None
        if kind == "error":
            self.process.join(10)
            raise EngineStartError(payload)
        return msg.decode_info(payload)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def exit_reason(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def shutdown(self, timeout: float = 30.0) -> None:
        """Ask the core to finish what it runs (SIGTERM drains), then make sure it is gone."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        _remove_socket_file(self.address)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _remove_socket_file(address: str) -> None:
    path = address.removeprefix("ipc://")
    if path != address and os.path.exists(path):
        os.unlink(path)


class SyncMPClient(EngineCoreClient):
    """A blocking client of a core process."""

    def __init__(self, address: str, info: msg.EngineInfo, alive: Callable[[], bool],
                 owner: CoreProcess | None = None) -> None:
        self.info = info
        self.alive = alive
        self.owner = owner  # shut down with this client
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self._calls = itertools.count()
        self._buffered: deque[msg.EngineCoreOutputs] = deque()

    @classmethod
    def start(cls, config: EngineConfig, log_level: str = "INFO") -> "SyncMPClient":
        process = CoreProcess(config, log_level=log_level)
        return cls(process.address, process.info, process.alive, owner=process)

    def add_requests(self, adds: list[msg.AddRequest]) -> None:
        for add in adds:
            self.socket.send(msg.encode(add))

    def abort(self, request_ids: list[str]) -> None:
        self.socket.send(msg.encode(msg.AbortRequests(request_ids)))

    def get_outputs(self) -> msg.EngineCoreOutputs:
        if self._buffered:
            return self._buffered.popleft()
        while True:
            message = self._receive()
            if isinstance(message, msg.EngineCoreOutputs):
                return message

    def call_utility(self, method: str, *args: Any) -> Any:
        call_id = next(self._calls)
        self.socket.send(msg.encode(msg.UtilityCall(call_id, method, list(args))))
        while True:
            message = self._receive()
            if isinstance(message, msg.UtilityResult) and message.call_id == call_id:
                if message.error is not None:
                    raise RuntimeError(message.error)
                return message.result
            if isinstance(message, msg.EngineCoreOutputs):
                self._buffered.append(message)

    def _receive(self) -> msg.CoreMessage:
        while not self.socket.poll(POLL_MS):
            if not self.alive():
                raise EngineDeadError("the engine core process exited unexpectedly")
        message = msg.decode_core_message(self.socket.recv())
        if isinstance(message, msg.CoreFailed):
            raise EngineDeadError(f"the engine core failed: {message.message}")
        return message

    def shutdown(self) -> None:
        self.socket.close()
        self.context.term()
        if self.owner is not None:
            self.owner.shutdown()


class AsyncMPClient:
    """An asyncio client of a core process: one reader task hands each batch to ``on_outputs``."""

    def __init__(self, address: str, info: msg.EngineInfo, alive: Callable[[], bool]) -> None:
        self.info = info
        self.alive = alive
        self.address = address
        self.context: zmq.asyncio.Context | None = None
        self.socket: zmq.asyncio.Socket | None = None
        self._calls = itertools.count()
        self._results: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.engine_stats: dict[int, msg.StepStats] = {}  # {0: the core's latest gauges} (/metrics)

    def start(self, on_outputs: Callable[[msg.EngineCoreOutputs], None], on_dead: Callable[[str], None]) -> None:
        """Connect and start reading (call from the event loop that will use this client)."""
        self.context = zmq.asyncio.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(self.address)
        self._reader = asyncio.get_running_loop().create_task(self._read(on_outputs, on_dead))

    async def add_requests(self, adds: list[msg.AddRequest]) -> None:
        for add in adds:
            await self.socket.send(msg.encode(add))

    def engine_of(self, request_id: str) -> int:
        """The engine core index of a request (one core: 0; see AsyncDataParallelClient)."""
        return 0

    async def abort(self, request_ids: list[str]) -> None:
        await self.socket.send(msg.encode(msg.AbortRequests(request_ids)))

    async def call_utility(self, method: str, *args: Any, timeout: float = 30.0) -> Any:
        call_id = next(self._calls)
        future = self._results[call_id] = asyncio.get_running_loop().create_future()
        await self.socket.send(msg.encode(msg.UtilityCall(call_id, method, list(args))))
        try:
            result: msg.UtilityResult = await asyncio.wait_for(future, timeout)
        finally:
            self._results.pop(call_id, None)
        if result.error is not None:
            raise RuntimeError(result.error)
        return result.result

    async def _read(self, on_outputs, on_dead) -> None:
        reason = None
        while reason is None:
            if not await self.socket.poll(POLL_MS):
                if not self.alive():
                    reason = "the engine core process exited unexpectedly; restart the server"
                continue
            message = msg.decode_core_message(await self.socket.recv())
            if isinstance(message, msg.EngineCoreOutputs):
                if message.stats is not None:
                    self.engine_stats[0] = message.stats
                on_outputs(message)
            elif isinstance(message, msg.UtilityResult):
                future = self._results.get(message.call_id)
                if future is not None and not future.done():
                    future.set_result(message)
            else:
                reason = f"the engine core failed ({message.message}); restart the server"
        for future in self._results.values():
            if not future.done():
                future.set_exception(EngineDeadError(reason))
        on_dead(reason)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.socket is not None:
            self.socket.close()
            self.context.term()
