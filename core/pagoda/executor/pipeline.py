"""Pipeline parallelism's way back: the last stage's sampled tokens reach the engine core.

The last stage samples every step (its tensor-parallel rank 0's tokens, as under tensor parallelism)
and sends what the engine core needs of it, a :class:`StepResult` (msgpack, one ZeroMQ frame), to a
PULL socket of the driver; the driver's :class:`RemoteStep` waits for the result of its step there,
checking the other ranks' health while it waits. Results go out in step order; the last stage sends
a step's result once no newer step waits to be launched, so its device never idles on the host.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import msgspec
import zmq

from pagoda.request import Request
from pagoda.runner.model_runner import PendingStep, RunnerOutput

POLL_MS = 100
TopLogprobs = list[tuple[int, float]]


class StepResult(msgspec.Struct, array_like=True):
    step: int
    sampled: dict[str, int]
    logprobs: dict[str, float]
    top_logprobs: dict[str, TopLogprobs]
    prompt_logprobs: dict[str, list[tuple[float, TopLogprobs]]]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(StepResult)


def encode_result(step: int, out: RunnerOutput) -> bytes:
    return _encoder.encode(StepResult(step, out.sampled, out.logprobs, out.top_logprobs, out.prompt_logprobs))


def decode_result(frame) -> tuple[int, RunnerOutput]:
    r = _decoder.decode(frame)
    return r.step, RunnerOutput(r.sampled, r.logprobs, r.top_logprobs, r.prompt_logprobs)


class ResultReader:
    """The driver's end: results by step, read from ``socket`` while ``check`` raises for a failed rank."""

    def __init__(self, socket: zmq.Socket, check: Callable[[], None]) -> None:
        self.socket, self.check = socket, check
        self.arrived: dict[int, RunnerOutput] = {}

    def wait(self, step: int) -> RunnerOutput:
        while step not in self.arrived:
            self.check()
            if self.socket.poll(POLL_MS):
                got, out = decode_result(self.socket.recv(copy=False))
                self.arrived[got] = out
        return self.arrived.pop(step)


class RemoteStep(PendingStep):
    """A step launched on the driver's (first) stage whose tokens the last stage samples."""

    def __init__(self, requests: list[Request], reader: ResultReader, step: int) -> None:
        super().__init__(requests, None, None, {})
        self.reader, self.step = reader, step

    def _read(self) -> RunnerOutput:
        return self.reader.wait(self.step)


class ResultSender:
    """The last stage's end (its tensor-parallel rank 0): steps launched, their results sent in order."""

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self.launched: deque[tuple[int, PendingStep]] = deque()

    def add(self, step: int, pending: PendingStep) -> None:
        self.launched.append((step, pending))

    def send_oldest(self) -> None:
        """Wait for the oldest launched step's tokens and send them."""
        step, pending = self.launched.popleft()
        self.socket.send(encode_result(step, pending.result()), copy=False)
