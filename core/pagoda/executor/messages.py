"""What the driver sends the worker ranks: one :class:`StepMessage` per step (msgpack, one frame).

Workers keep a mirror of the running requests (:class:`StepMirror`), so a step carries only
what changed: new requests once, then per scheduled request the token ids this step computes
(``PLACEHOLDER`` where the token is still on the device: each rank fills it from its previous
step, as rank 0 does), its progress, and the blocks added to its table.
"""

from __future__ import annotations

from typing import Union

import msgspec

from pagoda.engine.request import Request
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.sampling_params import SamplingParams


class NewRequest(msgspec.Struct, array_like=True):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_id: int | None


class ScheduledRow(msgspec.Struct, array_like=True):
    request_id: str
    num_computed_tokens: int
    token_ids: list[int]  # the ids this step computes: token_ids[num_computed : num_computed + n]
    num_tokens: int
    num_pending_tokens: int
    block_ids: list[int]  # appended to its block table (the whole table when reset_blocks)
    reset_blocks: bool


class StepMessage(msgspec.Struct, array_like=True, tag=True):
    finished: list[str]  # forget these first
    new: list[NewRequest]
    rows: list[ScheduledRow]
    has_prev: bool  # the driver filled placeholders from its previous step


class StopWorker(msgspec.Struct, array_like=True, tag=True):
    pass


WorkerMessage = Union[StepMessage, StopWorker]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(WorkerMessage)


def encode(message: WorkerMessage) -> bytes:
    return _encoder.encode(message)


def decode(frame) -> WorkerMessage:
    return _decoder.decode(frame)


class StepEncoder:
    """Driver side: turns a scheduled step into the message the workers need."""

    def __init__(self) -> None:
        self.blocks_sent: dict[str, int] = {}  # request id -> blocks of its table the workers have (-1: reset)
        self.finished: list[str] = []

    def release(self, request_id: str) -> None:
        if self.blocks_sent.pop(request_id, None) is not None:
            self.finished.append(request_id)

    def step(self, out: SchedulerOutput, block_tables: list[list[int]], has_prev: bool) -> StepMessage:
        for req in out.preempted:  # its blocks were freed: the next table it gets is new
            if req.request_id in self.blocks_sent:
                self.blocks_sent[req.request_id] = -1
        new, rows = [], []
        for req, n, table in zip(out.requests, out.num_tokens, block_tables):
            sent = self.blocks_sent.get(req.request_id)
            if sent is None:
                new.append(NewRequest(req.request_id, req.prompt_token_ids, req.sampling_params, req.eos_token_id))
                sent = -1
            s = req.num_computed_tokens
            rows.append(ScheduledRow(req.request_id, s, req.token_ids[s : s + n], req.num_tokens,
                                     req.num_pending_tokens, table if sent < 0 else table[sent:], sent < 0))
            self.blocks_sent[req.request_id] = len(table)
        finished, self.finished = self.finished, []
        return StepMessage(finished, new, rows, has_prev)


class StepMirror:
    """Worker side: the requests as far as the steps need them, rebuilt into a SchedulerOutput."""

    def __init__(self) -> None:
        self.requests: dict[str, Request] = {}
        self.tables: dict[str, list[int]] = {}

    def apply(self, message: StepMessage) -> tuple[SchedulerOutput, list[list[int]]]:
        for request_id in message.finished:
            self.requests.pop(request_id, None)
            self.tables.pop(request_id, None)
        for add in message.new:
            self.requests[add.request_id] = Request(add.request_id, list(add.prompt_token_ids), add.params,
                                                    eos_token_id=add.eos_token_id)
        requests, tables = [], []
        for row in message.rows:
            req = self.requests[row.request_id]
            tokens = req.token_ids
            if len(tokens) < row.num_tokens:
                tokens.extend([0] * (row.num_tokens - len(tokens)))  # outputs this rank never reads
            s = row.num_computed_tokens
            tokens[s : s + len(row.token_ids)] = row.token_ids
            req.num_computed_tokens, req.num_pending_tokens = s, row.num_pending_tokens
            table = self.tables.setdefault(row.request_id, [])
            if row.reset_blocks:
                table.clear()
            table.extend(row.block_ids)
            requests.append(req)
            tables.append(table)
        return SchedulerOutput(requests, [len(row.token_ids) for row in message.rows]), tables
