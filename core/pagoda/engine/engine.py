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
from pagoda.guided.runtime import validate_guided
from pagoda.sampling.token_controls import resolve_token_controls
from pagoda.engine_core.client import EngineCoreClient, InprocClient, SyncMPClient
from pagoda.engine_core.core import EngineCore, check_runner, validate_prompt
from pagoda.sampling_params import BeamSearchParams
from pagoda.messages import AddRequest, StepStats, add_messages
from pagoda.multimodal.processing import ImageProcessor, ProcessedPrompt
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.errors import RequestError
from pagoda.lora_request import LoRARequest
from pagoda.outputs import RequestOutput
from pagoda.pooling.outputs import PoolingRequestOutput
from pagoda.pooling_params import PoolingParams
from pagoda.engine.pooling_tracker import POOLING_SAMPLING, PoolingTracker
from pagoda.sampling_params import SamplingParams


class LLMEngine:
    def __init__(self, client: EngineCoreClient, tokenizer, config: EngineConfig | None = None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.config = config
        self._images: ImageProcessor | None = None  # a vision-language model's, made on the first image
        self.info = client.info
        self.max_model_len = client.info.max_model_len
        self.outputs = OutputProcessor(tokenizer)
        self.pooling = PoolingTracker()  # pooling requests (runner "pooling") until their values arrive
        self.stats = StepStats()
        self._ids = itertools.count()

    @classmethod
    def from_config(cls, config: EngineConfig, multiprocess: bool = False) -> "LLMEngine":
        """An engine whose core runs in this process, or (``multiprocess``) in its own; with
        ``data_parallel_size`` > 1, one core process per replica."""
        data_parallel = config.data_parallel_size > 1 and config.data_parallel_rank is None
        if not multiprocess and not data_parallel:
            core = EngineCore.from_config(config)
            return cls(InprocClient(core), core.parts.tokenizer, config)
        from pagoda.loader import load_tokenizer, resolve_model

        if data_parallel:
            from pagoda.engine_core.dp_client import DataParallelClient

            client = DataParallelClient.start(config)
        else:
            client = SyncMPClient.start(config)
        tokenizer = None if config.skip_tokenizer_init else load_tokenizer(resolve_model(config.model), config.tokenizer)
        return cls(client, tokenizer, config)

    @property
    def core(self) -> EngineCore:
        """The in-process core (for inspection and tests); AttributeError in multiprocess and data-parallel mode."""
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
        beam: BeamSearchParams | None = None,
        lora_request: LoRARequest | None = None,
        mm_items: list[MultimodalItem] | None = None,
    ) -> None:
        """Queue a request (``n`` sequences for ``params.n > 1``; with ``beam``, a beam search whose
        sequences ``params`` describes, see ``BeamSearchParams.output_params``), run with
        ``lora_request``'s adapter if given, with the images ``mm_items`` (from :meth:`process_images`).
        Raises RequestError for bad input."""
        check_runner(self.info.runner, None)
        self.validate_prompt(prompt_token_ids)
        params = self.resolve_params(params)
        if params.guided_decoding is not None and self.tokenizer is None:
            raise RequestError("guided decoding needs the model's tokenizer (grammars are matched against token "
                               "strings); run without skip_tokenizer_init")
        if request_id in self.outputs.states:
            raise RequestError(f"request id {request_id!r} is already in use")
        arrival = time.monotonic() if arrival_time is None else arrival_time
        sequences = self.outputs.add(request_id, prompt, prompt_token_ids, params, arrival, stream=stream)
        try:
            self.client.add_requests(add_messages(request_id, prompt_token_ids, sequences, arrival, priority, beam,
                                                  lora_request, mm_items))
        except RequestError:  # refused by an in-process core: nothing of it stays queued
            self.outputs.fail(request_id)
            raise

    def process_images(self, prompt: str, images: list, add_special_tokens: bool = True) -> ProcessedPrompt:
        """A text prompt with images -> its token ids (placeholders expanded) and items (RequestError for a
        text-only model, or placeholders that do not match the images)."""
        if self._images is None:
            self._images = ImageProcessor.for_engine(self.config, self.tokenizer)
        return self._images.process(prompt, images, add_special_tokens)

    def add_pooling_request(self, request_id: str, prompt_token_ids: list[int], params: PoolingParams,
                            prompt: str | None = None, priority: int = 0) -> None:
        """Queue a pooling request (runner "pooling"): its prompt's pooled values come back from step()."""
        check_runner(self.info.runner, params)
        self.validate_prompt(prompt_token_ids, pooling=True)
        if request_id in self.pooling.pending or request_id in self.outputs.states:
            raise RequestError(f"request id {request_id!r} is already in use")
        self.pooling.add(request_id, prompt, prompt_token_ids)
        add = AddRequest(request_id, list(prompt_token_ids), POOLING_SAMPLING, time.monotonic(), priority,
                         pooling_params=params)
        try:
            self.client.add_requests([add])
        except RequestError:  # refused by an in-process core: nothing of it stays pending
            self.pooling.discard(request_id)
            raise

    def resolve_params(self, params: SamplingParams) -> SamplingParams:
        """``params`` as the core gets them: grammar checked, bad words tokenized, token ids checked (RequestError)."""
        return resolve_params(params, self.tokenizer, self.info.vocab_size)

    def validate_prompt(self, prompt_token_ids: list[int], pooling: bool = False) -> None:
        validate_prompt(prompt_token_ids, self.max_model_len, self.info.vocab_size, pooling=pooling)

    def abort(self, request_ids: list[str] | str) -> None:
        """Stop requests (waiting or running) and free their KV blocks."""
        sequences = []
        for request_id in [request_ids] if isinstance(request_ids, str) else request_ids:
            sequences += self.outputs.abort(request_id)
            if self.pooling.discard(request_id):
                sequences.append(request_id)
        if sequences:
            self.client.abort(sequences)

    def has_unfinished_requests(self) -> bool:
        return bool(self.outputs.states) or bool(self.pooling.pending)

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput | PoolingRequestOutput]:
        """One iteration of continuous batching; returns outputs of finished (or streamed) requests
        (PoolingRequestOutputs for pooling requests)."""
        batch = self.client.get_outputs()
        if batch.stats is not None:
            self.stats = batch.stats
        outputs, stopped = self.outputs.process(batch.outputs)
        outputs += self.pooling.process(batch.outputs)
        if stopped:  # stop strings ended these sequences: the core stops computing them
            self.client.abort(stopped)
        return outputs

    def shutdown(self) -> None:
        self.client.shutdown()


def resolve_params(params: SamplingParams, tokenizer, vocab_size: int) -> SamplingParams:
    """A request's ``params`` as the engine core gets them: its grammar checked by its guided decoding
    backend, its bad words tokenized, its token ids checked (RequestError naming what is wrong)."""
    if params.guided_decoding is not None:
        validate_guided(params.guided_decoding)
    return resolve_token_controls(params, tokenizer, vocab_size)
