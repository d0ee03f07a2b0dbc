"""What the driver sends the worker ranks: one :class:`StepMessage` per step (msgpack, one frame).

Workers keep a mirror of the running requests (:class:`StepMirror`), so a step carries only
what changed: new requests once, then per scheduled request the token ids this step computes
(``PLACEHOLDER`` where the token is still on the device: each rank fills it from its previous
step, as rank 0 does), its progress (with the drafts it verifies, under speculative decoding), and
the change to its block table: how many of the blocks the worker has stay, then the blocks after
them. Tables grow at the end, restart after a preemption, and lose their last blocks when rejected
drafts are trimmed (the blocks allocated after such a trim may differ from those sent before it). A KV
connector's plan (``SchedulerOutput.kv_transfers``) goes as it is: every rank moves its part of those blocks.
"""

from __future__ import annotations

from typing import Union

import msgspec

from pagoda.interfaces.kv_connector import KVTransferPlan
from pagoda.lora_request import LoRARequest
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.request import Request
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.sampling_params import SamplingParams


class NewRequest(msgspec.Struct, array_like=True):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_id: int | None
    lora_request: LoRARequest | None = None  # its adapter: every rank adds its part of the adapter's product
    mm_items: list[MultimodalItem] = []  # its images (every rank encodes those its steps reach)


class ScheduledRow(msgspec.Struct, array_like=True):
    request_id: str
    num_computed_tokens: int
    token_ids: list[int]  # the ids this step computes: token_ids[num_computed : num_computed + n]
    num_tokens: int
    num_pending_tokens: int
    num_draft_tokens: int  # trailing proposed tokens this step verifies (speculative decoding)
    keep_blocks: int  # blocks of its table the worker keeps (0: a new table) before appending block_ids
    block_ids: list[int]


class StepMessage(msgspec.Struct, array_like=True, tag=True):
    finished: list[str]  # forget these first
    new: list[NewRequest]
    rows: list[ScheduledRow]
    has_prev: bool  # the driver filled placeholders from its previous step
    kv_transfers: KVTransferPlan | None = None  # a KV connector's loads and saves of this step


class StopWorker(msgspec.Struct, array_like=True, tag=True):
    pass


class Profile(msgspec.Struct, array_like=True, tag=True):
    directory: str | None  # start the torch profiler, its trace to this folder; None: stop it, write the trace
    keep: bool = True  # on a stop: False writes no trace (a start that failed on another rank, rolled back)


WorkerMessage = Union[StepMessage, StopWorker, Profile]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(WorkerMessage)


def encode(message: WorkerMessage) -> bytes:
    return _encoder.encode(message)


def decode(frame) -> WorkerMessage:
    return _decoder.decode(frame)


TAIL_BLOCKS = 8  # the last blocks sent per request, checked against its table (trims are shorter)


class StepEncoder:
    """Driver side: turns a scheduled step into the message the workers need."""

    def __init__(self) -> None:
        # request id -> (blocks of its table the workers have, the last TAIL_BLOCKS of them); (0, []) after
        # a preemption
        self.sent: dict[str, tuple[int, list[int]]] = {}
        self.finished: list[str] = []

    def release(self, request_id: str) -> None:
        if self.sent.pop(request_id, None) is not None:
            self.finished.append(request_id)

    def step(self, out: SchedulerOutput, block_tables: list[list[int]], has_prev: bool) -> StepMessage:
        for req in out.preempted:  # its blocks were freed: the next table it gets is new
            if req.request_id in self.sent:
                self.sent[req.request_id] = (0, [])
        new, rows = [], []
        for req, n, table in zip(out.requests, out.num_tokens, block_tables):
            request_id, sent = req.request_id, self.sent.get(req.request_id)
            if sent is None:
                new.append(NewRequest(request_id, req.prompt_token_ids, req.sampling_params, req.eos_token_id,
                                      req.lora_request, req.mm_items))
            keep = 0 if sent is None else unchanged_blocks(table, *sent)
            s = req.num_computed_tokens
            rows.append(ScheduledRow(request_id, s, req.token_ids[s : s + n], req.num_tokens,
                                     req.num_pending_tokens, req.num_draft_tokens, keep, table[keep:]))
            if sent is None or keep != len(table) or keep != sent[0]:  # the table changed
                self.sent[request_id] = (len(table), table[-TAIL_BLOCKS:])
        finished, self.finished = self.finished, []
        return StepMessage(finished, new, rows, has_prev, out.kv_transfers)


def unchanged_blocks(table: list[int], num_sent: int, tail: list[int]) -> int:
    """How many leading blocks of ``table`` the workers already hold: those sent (``num_sent``, ending
    with ``tail``) up to the first that differs. Only the tail is compared (trims remove a few last
    blocks); a table shorter than the blocks before the tail starts over (0)."""
    if num_sent == 0:
        return 0
    start = num_sent - len(tail)
    if len(table) >= num_sent and table[num_sent - 1] == tail[-1] and table[start:num_sent] == tail:  # usual
        return num_sent
    if len(table) < start:
        return 0
    for i in range(start, min(num_sent, len(table))):
        if table[i] != tail[i - start]:
            return i
    return min(num_sent, len(table))


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
                                                    eos_token_id=add.eos_token_id, lora_request=add.lora_request,
                                                    mm_items=list(add.mm_items))
        requests, tables = [], []
        for row in message.rows:
            req = self.requests[row.request_id]
            tokens = req.token_ids
            if len(tokens) < row.num_tokens:
                tokens.extend([0] * (row.num_tokens - len(tokens)))  # outputs this rank never reads
            del tokens[row.num_tokens :]  # rejected drafts
            s = row.num_computed_tokens
            tokens[s : s + len(row.token_ids)] = row.token_ids
            req.num_computed_tokens, req.num_pending_tokens = s, row.num_pending_tokens
            req.num_draft_tokens = row.num_draft_tokens
            table = self.tables.setdefault(row.request_id, [])
            del table[row.keep_blocks :]
            table.extend(row.block_ids)
            requests.append(req)
            tables.append(table)
        return SchedulerOutput(requests, [len(row.token_ids) for row in message.rows],
                               kv_transfers=message.kv_transfers), tables
