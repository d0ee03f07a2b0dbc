"""The ``draft`` proposer: a small model of the same tokenizer, run by Pagoda's own engine parts.

``--speculative-config '{"method": "draft", "model": "/path/to/small", "num_speculative_tokens": 4}'``

The draft model is built like the target (:func:`pagoda.engine.builder.build_model_shard`: same
platform, attention backend, dtype and block size), with its own paged KV cache
(:class:`~pagoda.engine.kv_cache.KVCacheManager`, no prefix caching) and its own
:class:`~pagoda.engine.model_runner.ModelRunner` (decode graphs where the target has them). It
keeps a *shadow* of each speculating request: the tokens the draft has seen and how many of them
have KV in its cache. Each step:

1. sync: the shadow's tokens are cut back to the longest prefix they share with the request's
   verified tokens (the drafts the target rejected go; their KV blocks are released) and the
   request's new tokens appended;
2. draft: one forward over every shadow's uncomputed tokens (usually the token the target emitted
   after the accepted drafts, two when all were accepted; the whole prompt the first time) gives
   the first draft token, then ``k - 1`` single-token steps give the rest, greedily.

The drafts are the draft model's argmax, deterministic given the context (``q`` one-hot), so
verification is exact for greedy and sampled requests alike. The cache holds as many tokens as
the target's plus one block per sequence; a shadow that does not fit is dropped (it is rebuilt
later) and its request runs without drafts meanwhile. On a GPU the draft's weights and cache come
out of the memory the target leaves: lower ``--gpu-memory-utilization`` to make room.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import torch

from pagoda.engine.kv_cache import KVCacheManager
from pagoda.engine.model_runner import ModelRunner
from pagoda.engine.request import Request, RequestStatus
from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer, ProposerContext
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.sampling_params import SamplingParams

logger = logging.getLogger("pagoda")
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
GREEDY = SamplingParams(temperature=0.0, max_tokens=None)


@dataclasses.dataclass
class _Shadow:
    request: Request  # the draft's copy: token_ids, num_computed_tokens
    num_synced: int  # leading tokens known equal to the target request's verified tokens


class DraftProposer(Proposer):
    description = "draft model: a small model of the same tokenizer proposes greedily (its own runner and KV cache)"

    def __init__(self, config) -> None:
        super().__init__(config)
        if not config.model:
            raise ConfigError('the draft proposer needs "model": the folder of a small model with the target\'s '
                              'tokenizer, e.g. {"method": "draft", "model": "/models/Llama-3.2-1B", '
                              '"num_speculative_tokens": 4}')
        self.runner: ModelRunner | None = None
        self.kv_cache: KVCacheManager | None = None
        self.max_batch_tokens = 8192
        self._shadows: dict[str, _Shadow] = {}

    # -- set-up ------------------------------------------------------------------------------
    def attach(self, context: ProposerContext) -> None:
        from pagoda.engine.builder import build_model_shard
        from pagoda.executor.base import use_graphs
        from pagoda.loader import load_hf_config, resolve_model

        source = resolve_model(self.config.model)
        hf_config = load_hf_config(source)
        _check_compatible(hf_config, context)
        engine = context.engine_config
        config = dataclasses.replace(
            engine, model=self.config.model, tokenizer=None, skip_tokenizer_init=True, speculative_config=None,
            dtype=DTYPE_NAMES.get(context.dtype, "auto"), max_model_len=context.max_model_len,
            quantization=self.config.options.get("quantization"), enable_prefix_caching=False,
            load_format=self.config.options.get("load_format", engine.load_format),
            kv_cache_memory=_cache_bytes(hf_config, context),
        )
        self.max_batch_tokens = max(engine.max_num_batched_tokens or 8192, engine.max_num_seqs)
        try:
            shard = build_model_shard(config, context.platform, source, hf_config)
        except torch.OutOfMemoryError as exc:
            raise ConfigError(f"the draft model {self.config.model} and its KV cache do not fit next to the target: "
                              f"lower --gpu-memory-utilization (or --kv-cache-memory) to leave room ({exc})") from None
        self.kv_cache = KVCacheManager(shard.num_blocks, config.block_size, enable_prefix_caching=False)
        self.runner = ModelRunner(shard.model, shard.attention, context.platform, shard.kv_caches, config.block_size,
                                  config.seed)
        if use_graphs(config, context.platform, shard.attention):
            self.runner.capture_decode_graphs(context.max_model_len, engine.max_num_seqs)
        logger.info("Draft model %s: %d KV blocks", self.config.model, shard.num_blocks)

    # -- each step ---------------------------------------------------------------------------
    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        if self.runner is None:
            raise RuntimeError("DraftProposer.attach() was not called (the engine calls it at start)")
        shadows = [self._sync(inp) for inp in inputs]
        budgets = [min(k, inp.max_drafts or k) for inp in inputs]
        drafts: list[list[int]] = [[] for _ in inputs]
        alive = [True] * len(inputs)
        for _ in range(max(budgets, default=0)):
            active = [i for i in range(len(inputs)) if alive[i] and len(drafts[i]) < budgets[i]]
            if not active:
                break
            sampled = self._forward([shadows[i].request for i in active])
            for i in active:
                token = sampled.get(inputs[i].request_id)
                if token is None:  # not sampled: its prompt is still being caught up, or it was dropped
                    alive[i] = False
                    continue
                shadows[i].request.token_ids.append(token)
                drafts[i].append(token)
        return Proposal(drafts)

    def release(self, request_id: str) -> None:
        shadow = self._shadows.pop(request_id, None)
        if shadow is not None and self.kv_cache is not None:
            self.kv_cache.free(shadow.request)

    # -- helpers -----------------------------------------------------------------------------
    def _sync(self, inp: ProposalInput) -> _Shadow:
        """The request's shadow, cut back to what it shares with ``inp.token_ids`` and extended to them."""
        tokens = inp.token_ids
        shadow = self._shadows.get(inp.request_id)
        if shadow is None:
            req = Request(inp.request_id, list(tokens), GREEDY, status=RequestStatus.RUNNING)
            shadow = self._shadows[inp.request_id] = _Shadow(req, len(tokens))
            return shadow
        req = shadow.request
        common = shadow.num_synced
        limit = min(len(tokens), req.num_tokens)
        while common < limit and req.token_ids[common] == tokens[common]:
            common += 1
        del req.token_ids[common:]
        req.token_ids.extend(tokens[common:])
        req.num_computed_tokens = min(req.num_computed_tokens, common, len(tokens) - 1)
        self.kv_cache.trim(req, req.num_computed_tokens)
        shadow.num_synced = len(tokens)
        return shadow

    def _forward(self, requests: list[Request]) -> dict[str, int]:
        """One draft step over ``requests``' uncomputed tokens (within the token budget); the token
        sampled after each request whose tokens were all computed."""
        scheduled, counts, budget = [], [], self.max_batch_tokens
        for req in sorted(requests, key=lambda r: r.num_tokens - r.num_computed_tokens):  # decodes first
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            if not self.kv_cache.allocate_slots(req, n):
                self._drop(req)
                continue
            scheduled.append(req)
            counts.append(n)
            budget -= n
        if not scheduled:
            return {}
        out = SchedulerOutput(scheduled, counts)
        tables = [self.kv_cache.block_ids(req.request_id) for req in scheduled]
        result = self.runner.launch(out, tables).result()
        for req, n in zip(scheduled, counts):
            req.num_computed_tokens += n
        return result.sampled

    def _drop(self, req: Request) -> None:
        """Forget a shadow that found no KV blocks (rebuilt from the prompt when it proposes again)."""
        logger.debug("draft KV cache full: dropping the shadow of %s", req.request_id)
        self.release(req.request_id)


def _check_compatible(hf_config, context: ProposerContext) -> None:
    draft_vocab, target_vocab = int(hf_config.vocab_size), int(context.hf_config.vocab_size)
    if draft_vocab != target_vocab:
        raise ConfigError(f"the draft model's vocabulary has {draft_vocab} tokens and the target's {target_vocab}: "
                          "a draft model must share the target's tokenizer (and vocab_size)")
    positions = getattr(hf_config, "max_position_embeddings", None)
    if positions is not None and positions < context.max_model_len:
        raise ConfigError(f"the draft model handles {positions} positions, fewer than max_model_len "
                          f"{context.max_model_len}; lower --max-model-len to {positions}")


def _cache_bytes(hf_config, context: ProposerContext) -> int:
    """Bytes for as many tokens as the target's cache holds, plus one block per sequence."""
    from pagoda.models.spec import attention_spec, num_kv_cache_layers

    block_size = context.engine_config.block_size
    spec = attention_spec(hf_config, block_size, context.dtype)
    element = torch.tensor([], dtype=context.dtype).element_size()
    per_block = 2 * num_kv_cache_layers(hf_config) * block_size * spec.num_kv_heads * spec.head_size * element
    blocks = context.num_kv_blocks + context.engine_config.max_num_seqs
    return math.ceil(blocks * per_block)
