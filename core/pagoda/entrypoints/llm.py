"""The offline API: ``LLM(model=...).generate(prompts, SamplingParams(...))``, like vLLM's."""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence, Union

from pagoda.sampling_params import BeamSearchParams
from pagoda.config import EngineConfig
from pagoda.engine.engine import LLMEngine
from pagoda.entrypoints.chat_template import render_chat
from pagoda.entrypoints.offline_run import run_requests
from pagoda.entrypoints.pooling import PoolingAPI
from pagoda.multimodal.chat import split_images
from pagoda.lora_request import LoRARequest
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams

Prompt = Union[str, list[int], dict[str, Any]]
Message = dict[str, str]
MM_ITEMS = "multi_modal_items"  # a prompt dict's processed images (LLMEngine.process_images), as chat() makes them


class LLM(PoolingAPI):
    """An engine plus a tokenizer, for batch generation in one process (and, with ``runner="pooling"``,
    for embeddings and scores: ``embed``, ``encode``, ``classify``, ``score``; docs/pooling.md).

    Arguments are :class:`pagoda.config.EngineConfig` fields (``model``, ``dtype``, ``seed``,
    ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``,
    ``enable_prefix_caching``, ``attention_backend``, ``quantization``, ``load_format``,
    ``kv_cache_memory``, ``gpu_memory_utilization``, ``enforce_eager``, ``scheduler``, ...).
    """

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(EngineConfig.field_names()))
        if unknown:
            raise TypeError(f"LLM() got unknown arguments {unknown}; valid ones: {', '.join(EngineConfig.field_names())}")
        self.config = EngineConfig(model=model, **kwargs)
        self.engine = LLMEngine.from_config(self.config)

    def shutdown(self) -> None:
        """Stop the engine (and its tensor-parallel worker processes, if any)."""
        self.engine.shutdown()

    def get_tokenizer(self):
        return self.engine.tokenizer

    def start_profile(self) -> None:
        """Start the torch profiler on every tensor-parallel rank; the traces go to the folder that
        ``PAGODA_TORCH_PROFILER_DIR`` names (an error if unset). Then :meth:`stop_profile`."""
        self.engine.client.call_utility("start_profile")

    def stop_profile(self) -> None:
        """Stop the profiler; returns once every rank wrote its trace (``rank{r}.*.pt.trace.json.gz``)."""
        self.engine.client.call_utility("stop_profile")

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: Sequence[int] | None = None,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, token ids, or ``{"prompt": ...}``/``{"prompt_token_ids": ...}``;
        a vision-language model also takes ``{"prompt": ..., "multi_modal_data": {"image": image or list}}``
        with PIL images or ``data:`` URLs, each where its placeholder stands in the prompt: docs/multimodal.md).

        ``priority`` (one per prompt, lower runs first) matters with ``scheduler="priority"``.
        ``lora_request``: the LoRA adapter of every prompt, or one per prompt (None: the base model);
        needs ``enable_lora=True`` (docs/lora.md). Returns one RequestOutput per prompt, in input order.
        """
        items = _as_list(prompts)
        params = _params_list(sampling_params, len(items))
        priorities = list(priority) if priority is not None else [0] * len(items)
        if len(priorities) != len(items):
            raise ValueError(f"got {len(priorities)} priorities for {len(items)} prompts; pass one per prompt")
        loras = _per_prompt(lora_request, len(items), "lora_request")
        encoded = [self._encode_with_images(p) for p in items]
        for ids, _, _ in encoded:
            self.engine.validate_prompt(ids)  # reject bad input before queueing anything
        params = [self.engine.resolve_params(p) for p in params]  # bad words tokenized, token ids checked
        adds = [partial(self.engine.add_request, prompt_token_ids=ids, params=p, prompt=text, priority=prio,
                        lora_request=lora, mm_items=images)
                for (ids, text, images), p, prio, lora in zip(encoded, params, priorities, loras)]
        return self._run(adds, use_tqdm)

    def beam_search(self, prompts: Prompt | Sequence[Prompt], params: BeamSearchParams, use_tqdm: bool = False,
                    lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None) -> list[RequestOutput]:
        """Beam search for each prompt (HF transformers' rules; docs/beam_search.md).

        Returns one RequestOutput per prompt whose ``outputs`` are its ``beam_width`` best sequences,
        best first by the length-penalised score; each has ``cumulative_logprob`` and per-token
        ``logprobs``. Beams share their prompt's and each other's KV blocks. ``lora_request`` as in
        :meth:`generate`: every beam of a prompt runs with its adapter.
        """
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"beam_search takes BeamSearchParams, got {type(params).__name__}")
        encoded = [self._encode(p) for p in _as_list(prompts)]
        for ids, _ in encoded:
            self.engine.validate_prompt(ids)
        loras = _per_prompt(lora_request, len(encoded), "lora_request")
        adds = [partial(self.engine.add_request, prompt_token_ids=ids, params=params.output_params(logprobs=0),
                        prompt=text, beam=params, lora_request=lora) for (ids, text), lora in zip(encoded, loras)]
        return self._run(adds, use_tqdm)

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        tool_choice: str | dict | None = None,
        parallel_tool_calls: bool = True,
        tool_parser: str | type | None = None,
        reasoning_parser: str | type | None = None,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        """Render each conversation with the tokenizer's chat template, then generate.

        ``tools`` (OpenAI's function tools) go to the template; ``tool_choice`` ("none", "auto",
        "required" or ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``,
        ``tool_parser`` and ``reasoning_parser`` (registered names) work as on the server. With tools
        or a reasoning parser each sequence is a ``ChatCompletionOutput`` carrying the parsed
        ``content``, ``reasoning_content`` and ``tool_calls`` (docs/tools.md). ``lora_request`` as in
        :meth:`generate`.
        """
        from pagoda.tools.offline import ChatTools, template_messages

        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        chat_tools = ChatTools.build(self.engine.tokenizer, tools, tool_choice, parallel_tool_calls, tool_parser,
                                     reasoning_parser)
        params = [chat_tools.sampling_params(p) for p in _params_list(sampling_params, len(conversations))]
        prompts = [self._chat_prompt(template_messages(c), chat_template, add_generation_prompt,
                                     chat_tools.plan.template_tools) for c in conversations]
        return chat_tools.outputs(self.generate(prompts, params, use_tqdm=use_tqdm, lora_request=lora_request), params)

    def render_chat(self, conversation: list[Message], chat_template: str | None = None,
                    add_generation_prompt: bool = True, tools: list[dict] | None = None) -> tuple[str, list[int]]:
        """The prompt text for ``conversation`` (and ``tools``) and its token ids (ValueError without a template)."""
        return render_chat(self.engine.tokenizer, conversation, chat_template, add_generation_prompt, tools)

    def _chat_prompt(self, conversation: list[dict], chat_template: str | None, add_generation_prompt: bool,
                     tools: list[dict] | None) -> dict[str, Any]:
        """One conversation rendered (its image content parts processed) as a prompt for :meth:`generate`."""
        conversation, images = split_images(conversation)
        text, ids = self.render_chat(conversation, chat_template, add_generation_prompt, tools)
        if not images:
            return {"prompt_token_ids": ids, "prompt": text}
        processed = self.engine.process_images(text, images, add_special_tokens=False)  # the template wrote them
        return {"prompt_token_ids": processed.prompt_token_ids, "prompt": text, MM_ITEMS: processed.items}

    def _encode_with_images(self, prompt: Prompt) -> tuple[list[int], str | None, list | None]:
        """``_encode``, and for a prompt with images its processed items (placeholders expanded in the ids)."""
        if isinstance(prompt, dict) and MM_ITEMS in prompt:
            return list(prompt["prompt_token_ids"]), prompt.get("prompt"), prompt[MM_ITEMS]
        if isinstance(prompt, dict) and prompt.get("multi_modal_data"):
            if "prompt" not in prompt:
                raise ValueError('a prompt with multi_modal_data needs its text as "prompt" (where the image '
                                 "placeholders stand)")
            images = _images_of(prompt["multi_modal_data"])
            processed = self.engine.process_images(prompt["prompt"], images)
            return processed.prompt_token_ids, prompt["prompt"], processed.items
        return (*self._encode(prompt), None)

    def _encode(self, prompt: Prompt) -> tuple[list[int], str | None]:
        if isinstance(prompt, dict) and (prompt.get("multi_modal_data") or MM_ITEMS in prompt):
            raise ValueError("prompts with images run through generate() and chat() only (not beam search or "
                             "pooling yet); send this prompt without multi_modal_data")
        if isinstance(prompt, str) and self.engine.tokenizer is None:
            raise ValueError("text prompts need a tokenizer; pass token ids, or drop skip_tokenizer_init")
        if isinstance(prompt, str):
            return self.engine.tokenizer(prompt)["input_ids"], prompt
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return list(prompt["prompt_token_ids"]), prompt.get("prompt")
            return self._encode(prompt["prompt"])
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return list(prompt), None
        raise TypeError(f"a prompt must be a string, a list of token ids or a dict, got {type(prompt).__name__}")

    def _run(self, adds: list, use_tqdm: bool) -> list[RequestOutput]:
        """Queue each request (``add(request_id)``) and generate until all are finished."""
        return run_requests(self.engine, adds, use_tqdm, "Generating",
                            tokens=lambda out: sum(len(o.token_ids) for o in out.outputs))


def _images_of(data: dict) -> list:
    """The images of a prompt's ``multi_modal_data`` (``{"image": image or list}``)."""
    unknown = sorted(set(data) - {"image"})
    if unknown:
        raise ValueError(f"multi_modal_data takes 'image' only; got {', '.join(unknown)}")
    images = data.get("image")
    return list(images) if isinstance(images, (list, tuple)) else [images]


def _as_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]
    return list(prompts)


def _per_prompt(value, count: int, name: str) -> list:
    """``value`` for every prompt (one value, or a sequence of one per prompt)."""
    if value is None or not isinstance(value, (list, tuple)):
        return [value] * count
    if len(value) != count:
        raise ValueError(f"got {len(value)} {name}s for {count} prompts; pass one, or one per prompt")
    return list(value)


def _params_list(params, count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count:
        raise ValueError(f"got {len(params)} sampling_params for {count} prompts; pass one, or one per prompt")
    return params
