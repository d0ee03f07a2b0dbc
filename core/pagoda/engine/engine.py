"""LLMEngine: the synchronous front end (offline ``LLM``, ``pagoda chat``) over an engine core.

It validates prompts, fans ``n > 1`` requests out into sequences, and turns the core's token
outputs into RequestOutputs (detokenization, stop strings). The core runs in this process
(``InprocClient``, the default) or in its own (``multiprocess=True``).
"""

from __future__ import annotations

import itertools
import time

from pagoda.config import EngineConfig
from pagoda.engine.output_processor import OutputProcessor
from pagoda.engine_core.client import EngineCoreClient, InprocClient, SyncMPClient
from pagoda.engine_core.core import EngineCore, validate_prompt
from pagoda.engine_core.messages import AddRequest, StepStats
from pagoda.errors import RequestError
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams


class LLMEngine:
    def __init__(self, client: EngineCoreClient, tokenizer) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.info = client.info
        self.max_model_len = client.info.max_model_len
        self.outputs = OutputProcessor(tokenizer)
        self.stats = StepStats()
        self._ids = itertools.count()

    @classmethod
    def from_config(cls, config: EngineConfig, multiprocess: bool = False) -> "LLMEngine":
        """An engine whose core runs in this process, or (``multiprocess``) in its own."""
        if not multiprocess:
            core = EngineCore.from_config(config)
            return cls(InprocClient(core), core.parts.tokenizer)
        from pagoda.loader import load_tokenizer, resolve_model

        client = SyncMPClient.start(config)
        tokenizer = None if config.skip_tokenizer_init else load_tokenizer(resolve_model(config.model), config.tokenizer)
        return cls(client, tokenizer)

    @property
    def core(self) -> EngineCore:
        """The in-process core (for inspection and tests); AttributeError in multiprocess mode."""
        return self.client.core

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
        """Queue a request (``n`` sequences for ``params.n > 1``). Raises RequestError for bad input."""
        self.validate_prompt(prompt_token_ids)
        if params.guided_decoding is not None and self.tokenizer is None:
            raise RequestError("guided decoding needs the model's tokenizer (grammars are matched against token "
                               "strings); run without skip_tokenizer_init")
        if request_id in self.outputs.states:
            raise RequestError(f"request id {request_id!r} is already in use")
        arrival = time.monotonic() if arrival_time is None else arrival_time
        sequences = self.outputs.add(request_id, prompt, prompt_token_ids, params, arrival, stream=stream)
        self.client.add_requests([AddRequest(seq_id, list(prompt_token_ids), seq_params, arrival, priority)
                                  for seq_id, seq_params in sequences])

    def validate_prompt(self, prompt_token_ids: list[int]) -> None:
        validate_prompt(prompt_token_ids, self.max_model_len, self.info.vocab_size)

    def abort(self, request_ids: list[str] | str) -> None:
        """Stop requests (waiting or running) and free their KV blocks."""
        sequences = []
        for request_id in [request_ids] if isinstance(request_ids, str) else request_ids:
            sequences += self.outputs.abort(request_id)
        if sequences:
            self.client.abort(sequences)

    def has_unfinished_requests(self) -> bool:
        return bool(self.outputs.states)

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One iteration of continuous batching; returns outputs of finished (or streamed) requests."""
        batch = self.client.get_outputs()
        if batch.stats is not None:
            self.stats = batch.stats
        outputs, stopped = self.outputs.process(batch.outputs)
        if stopped:  # stop strings ended these sequences: the core stops computing them
            self.client.abort(stopped)
        return outputs

    def shutdown(self) -> None:
        self.client.shutdown()
