"""Run the app with uvicorn: a pre-bound socket, graceful drain on SIGTERM/SIGINT, exit status 0."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
from typing import Callable

import uvicorn

from pagoda.server.async_engine import AsyncEngine

logger = logging.getLogger("pagoda.server")


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket early, so a taken port fails before the model loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT: refuse new requests (503) and let running ones finish within the grace period.

    uvicorn stops accepting connections and waits up to ``timeout_graceful_shutdown`` for the open
    ones; the engine is marked draining so requests on kept-alive connections get 503. The signal is
    not re-raised afterwards, so a drained server exits with status 0.
    """

    def __init__(self, config: uvicorn.Config, engine: AsyncEngine, on_ready: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.engine = engine
        self.on_ready = on_ready  # called once the server accepts requests

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.on_ready is not None and not self.should_exit:
            self.on_ready()

    def handle_exit(self, sig: int, frame) -> None:
        if not self.engine.draining:
            logger.info("Received %s: draining %d running request(s), then exiting",
                        signal.Signals(sig).name, self.engine.num_pending)
        self.engine.draining = True
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # exit normally once drained (uvicorn would re-raise the signal)


def make_server(app, engine: AsyncEngine, host: str, port: int, shutdown_timeout: float = 30.0,
                log_level: str = "info", on_ready: Callable[[], None] | None = None) -> DrainingServer:
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, log_config=None,
                            timeout_graceful_shutdown=shutdown_timeout, access_log=log_level == "debug")
    return DrainingServer(config, engine, on_ready)


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def run_api_processes(sock: socket.socket, spec, count: int, on_ready: Callable[[], None]) -> int:
    """Run ``count`` API server processes on the shared socket; ``on_ready`` once all of them serve.
    SIGTERM/SIGINT drains them all; one that fails to start stops the others."""
    from pagoda.server.api_server import api_server_process

    context = multiprocessing.get_context("spawn")
    ready = [context.Event() for _ in range(count)]
    processes = [context.Process(target=api_server_process, args=(sock, spec, i, ready[i]), name=f"pagoda-api-{i}")
                 for i in range(count)]

    def stop_all(sig: int = signal.SIGTERM, frame=None) -> None:
        logger.info("Received %s: draining %d API server processes", signal.Signals(sig).name, count)
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.start()
        if _wait_until_ready(processes, ready):
            on_ready()
        else:
            stop_all()
        for process in processes:
            process.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    failed = [p.name for p in processes if p.exitcode != 0]
    if failed:
        logger.error("API server process(es) %s exited with an error", ", ".join(failed))
    return 1 if failed else 0


def _wait_until_ready(processes, ready) -> bool:
    """Whether every process reported ready (False as soon as one of them is gone)."""
    while not all(event.wait(0.2) for event in ready):
        if not all(p.is_alive() for p in processes):
            return False
    return True
