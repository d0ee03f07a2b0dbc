"""The typed messages between front ends (LLM, API servers) and the engine core (msgspec structs).

Front end -> core: :class:`AddRequest`, :class:`AbortRequests`, :class:`UtilityCall`,
:class:`Shutdown` (a :data:`ClientMessage`). Core -> front end: :class:`EngineCoreOutputs`
(tokens of one step, plus the engine's gauges), :class:`UtilityResult`, :class:`CoreFailed`
(a :data:`CoreMessage`). One message is one ZeroMQ frame, encoded with msgpack.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from pagoda.lora_request import LoRARequest
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.sampling_params import BeamSearchParams
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

TopLogprobs = list[tuple[int, float]]  # (token id, logprob), most likely first
# Upper bounds of StepStats.iteration_tokens' buckets: tokens computed per engine step (vLLM's buckets)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class PoolingInfo(msgspec.Struct, frozen=True):
    """A pooling model's defaults, for front ends (pagoda.pooling.config.PoolerConfig)."""

    pooling_type: str
    normalize: bool
    hidden_size: int
    num_labels: int = 0  # > 0: a classifier (cross-encoder); its outputs are label scores


class EngineInfo(msgspec.Struct, frozen=True):
    """What a front end needs to know about the engine it talks to (sent once, at start)."""

    max_model_len: int
    vocab_size: int
    eos_token_id: int | None
    num_kv_blocks: int
    block_size: int
    description: str
    runner: str = "generate"  # "generate" or "pooling" (docs/pooling.md)
    pooling: PoolingInfo | None = None  # the pooling defaults when runner == "pooling"


def sequence_ids(request_id: str, n: int) -> list[str]:
    """The ids of a request's ``n`` sequences in the core and in its outputs: the request's own for
    n == 1, else ``id#0``, ``id#1``..."""
    return [request_id] if n == 1 else [f"{request_id}#{i}" for i in range(n)]


class AddRequest(msgspec.Struct, tag=True):
    """One sequence to generate (a request with n > 1 arrives as n of these: ``id#0``, ``id#1``...),
    or, with ``beam`` set, one beam search whose ``beam_width`` sequences come out as ``sequence_ids``."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams  # n == 1 here (for a beam search: ``logprobs`` is the top logprobs to report)
    arrival_time: float  # time.monotonic() of the front end (one clock per host)
    priority: int = 0
    beam: BeamSearchParams | None = None
    pooling_params: PoolingParams | None = None  # a pooling request: its prompt is pooled, nothing is generated
    lora_request: LoRARequest | None = None  # the LoRA adapter it runs with (None: the base model)
    mm_items: list[MultimodalItem] = []  # its images, processed, and their placeholder runs in the prompt

    @property
    def output_ids(self) -> list[str]:
        """The sequence ids this request's outputs will carry."""
        return sequence_ids(self.request_id, self.beam.beam_width) if self.beam is not None else [self.request_id]


def add_messages(request_id: str, prompt_token_ids: list[int], sequences: list[tuple[str, SamplingParams]],
                 arrival_time: float, priority: int = 0, beam: BeamSearchParams | None = None,
                 lora_request: LoRARequest | None = None,
                 mm_items: list[MultimodalItem] | None = None) -> list[AddRequest]:
    """What a front end sends for one request: one AddRequest per sequence, or one for a beam search."""
    images = list(mm_items or [])
    if beam is not None:
        return [AddRequest(request_id, list(prompt_token_ids), sequences[0][1], arrival_time, priority, beam=beam,
                           lora_request=lora_request, mm_items=images)]
    return [AddRequest(seq_id, list(prompt_token_ids), seq_params, arrival_time, priority, lora_request=lora_request,
                       mm_items=images)
            for seq_id, seq_params in sequences]


class AbortRequests(msgspec.Struct, tag=True):
    request_ids: list[str]


class UtilityCall(msgspec.Struct, tag=True):
    """Call one of ``EngineCore.UTILITIES`` between steps; the answer is a :class:`UtilityResult`."""

    call_id: int
    method: str
    args: list[Any] = []


class Shutdown(msgspec.Struct, tag=True):
    """Stop the core: ``drain`` lets running requests finish first."""

    drain: bool = True


ClientMessage = Union[AddRequest, AbortRequests, UtilityCall, Shutdown]


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """New tokens of one sequence from one step; ``finish_reason`` set on its last output."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None  # "stop" (EOS or a stop token) | "length" | "abort"
    stop_reason: int | None = None  # the stop token id that ended it (None for EOS)
    logprobs: list[float] | None = None  # raw logprob of each new token, when asked for
    top_logprobs: list[TopLogprobs] | None = None
    prompt_logprobs: list[tuple[float, TopLogprobs]] | None = None  # this step's prompt positions
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache
    pooled: bytes | None = None  # a pooling request's result: float32 values, C order
    pooled_shape: list[int] | None = None
    # with a sequence's first token only (time.monotonic() of the core, one clock per host): when the core
    # took it and when its first step was launched (the queue and prefill times of /metrics and traces)
    queued_time: float | None = None
    scheduled_time: float | None = None


class StepStats(msgspec.Struct):
    """Engine-wide gauges and counters for logs and /metrics."""

    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_hit_rate: float = 0.0
    num_preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache (counter)
    prefix_cache_hits: int = 0  # of them, found cached
    # steps by tokens computed: [i] counts steps of at most ITERATION_TOKENS_BUCKETS[i] tokens (above the
    # previous bound), the last entry those above every bound; empty before the first step
    iteration_tokens: list[int] = []
    iteration_tokens_sum: int = 0
    # speculative decoding (counters since start; the list is empty without speculation)
    spec_num_drafts: int = 0  # verification rounds: a request verifying its drafts in a step
    spec_num_draft_tokens: int = 0  # drafted tokens verified
    spec_num_accepted_tokens: int = 0  # of them, accepted
    spec_accepted_per_position: list[int] = []  # [k]: rounds whose j-th draft was accepted
    spec_num_steps: int = 0  # engine steps
    spec_num_suspended_steps: int = 0  # of them, with speculation suspended (drafts cost more than they gave)
    spec_suspended: bool = False  # gauge: suspended now
    spec_goodput_ratio: float = 0.0  # gauge: measured tokens/s speculating over suspended (0: not measured)
    # KV connector (counters since start; all 0 without one: docs/kv_offload.md)
    kv_connector_loaded_blocks: int = 0  # blocks loaded instead of computed
    kv_connector_load_failed_blocks: int = 0  # blocks the connector offered but a rank could not load: recomputed
    kv_connector_saved_blocks: int = 0  # blocks handed to the connector
    kv_connector_save_failures: int = 0  # saves that failed (the engine went on)
    kv_connector_dropped_saves: int = 0  # blocks not saved: the host buffers were all waiting for the connector


class EngineCoreOutputs(msgspec.Struct, tag=True):
    outputs: list[EngineCoreOutput]
    stats: StepStats | None = None
    error: str | None = None  # why the request of an "abort" output was refused
    engine_index: int = 0  # which data-parallel engine core sent it (set by the front end's client)


class UtilityResult(msgspec.Struct, tag=True):
    call_id: int
    result: Any = None
    error: str | None = None


class CoreFailed(msgspec.Struct, tag=True):
    """The core stopped because of an error; every pending request fails with ``message``."""

    message: str


CoreMessage = Union[EngineCoreOutputs, UtilityResult, CoreFailed]

_encoder = msgspec.msgpack.Encoder()
_client_decoder = msgspec.msgpack.Decoder(ClientMessage)
_core_decoder = msgspec.msgpack.Decoder(CoreMessage)
_info_decoder = msgspec.msgpack.Decoder(EngineInfo)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_client_message(frame: bytes) -> ClientMessage:
    return _client_decoder.decode(frame)


def decode_core_message(frame: bytes) -> CoreMessage:
    return _core_decoder.decode(frame)


def decode_info(frame: bytes) -> EngineInfo:
    return _info_decoder.decode(frame)
