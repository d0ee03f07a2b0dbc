"""Measure the activation memory of the largest step, so the KV cache can take the rest.

The dummy step runs ``max_num_batched_tokens`` prompt tokens spread over as many sequences as
the scheduler may batch, writes them into a small temporary KV cache (whose bytes are not
counted), and computes logits for ``max_num_seqs`` rows as the sampler would. It runs under
``Platform.peak_memory_during``: platforms that do not measure (CPU) never run it. For a
vision-language model the step first encodes the largest images it may reach, with a full encoder
cache (:mod:`pagoda.runner.encoder_profile`).
"""

from __future__ import annotations

import math

import torch

from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext, IntermediateTensors
from pagoda.interfaces.parallel import WHOLE, PipelineParallel
from pagoda.interfaces.platform import Platform
from pagoda.runner.encoder_profile import EncoderProfile


def profile_activation_bytes(
    model: CausalLM,
    attention: AttentionBackend,
    platform: Platform,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    block_size: int,
    num_layers: int,
    max_model_len: int,
    encoder: EncoderProfile | None = None,
    pp: PipelineParallel = WHOLE,
) -> int:
    """Peak device bytes one step of the largest batch needs beyond weights and KV cache (``encoder``: the
    vision encoder's part, for a vision-language model; ``pp``: the pipeline stage ``model`` holds, which
    starts from zero activations unless it is the first and computes logits only if it is the last)."""
    num_tokens = max(1, max_num_batched_tokens)
    num_seqs = max(min(max_num_seqs, num_tokens), math.ceil(num_tokens / max(1, max_model_len)))
    cache_bytes = 0

    def step() -> None:
        nonlocal cache_bytes
        device = platform.device()
        metadata = dummy_prefill_metadata(num_tokens, num_seqs, block_size, device)
        blocks = int(metadata.block_tables.max()) + 1
        own = pp.layers(num_layers)
        caches = [torch.empty(attention.kv_cache_shape(blocks if i in own else 0), dtype=attention.spec.cache_dtype,
                              device=device) for i in range(num_layers)]
        cache_bytes = sum(c.numel() * c.element_size() for c in caches)
        with platform.inference_context():
            held = encoder.hold(model, device) if encoder is not None else []  # noqa: F841 - kept to the end
            hidden = dummy_forward(model, attention, metadata, caches, device, pp)
            if hasattr(model, "compute_logits") and pp.is_last:  # pooling models (encoders) have no LM head
                rows = torch.arange(max_num_seqs, device=device) % num_tokens  # the sampler's rows
                torch.log_softmax(model.compute_logits(hidden[rows]), dim=-1)

    peak = platform.peak_memory_during(step)
    return max(0, peak - cache_bytes)


def dummy_prefill_metadata(num_tokens: int, num_seqs: int, block_size: int, device: torch.device) -> AttentionMetadata:
    """``num_seqs`` fresh prompts sharing ``num_tokens`` tokens, each with its own blocks."""
    base, extra = divmod(num_tokens, num_seqs)
    lens = torch.tensor([base + (i < extra) for i in range(num_seqs)], dtype=torch.int32)  # [num_seqs]
    width = max(1, math.ceil(int(lens.max()) / block_size))
    table = torch.arange(num_seqs * width, dtype=torch.int32).view(num_seqs, width)  # [num_seqs, width]
    query_start_loc = torch.zeros(num_seqs + 1, dtype=torch.int32)
    torch.cumsum(lens, 0, out=query_start_loc[1:])
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs), lens.long())  # [num_tokens]
    positions = torch.arange(num_tokens) - query_start_loc[:-1].long()[seq_of_token]
    slots = table[seq_of_token, positions // block_size].long() * block_size + positions % block_size
    return AttentionMetadata(
        slot_mapping=slots.to(device),
        block_tables=table.to(device),
        query_start_loc=query_start_loc.to(device),
        seq_lens=lens.to(device),
        max_query_len=int(lens.max()),
        max_seq_len=int(lens.max()),
        num_decodes=int((lens == 1).all()) * num_seqs,
    )


def dummy_forward(model: CausalLM, attention: AttentionBackend, metadata: AttentionMetadata,
                  kv_caches: list[torch.Tensor], device: torch.device, pp: PipelineParallel = WHOLE) -> torch.Tensor:
    """The hidden states of one forward pass over ``metadata`` (from ``dummy_prefill_metadata``), token ids 0
    (a pipeline stage after the first: zero activations in)."""
    num_tokens = int(metadata.slot_mapping.shape[0])
    input_ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    fwd = ForwardContext(attention.prepare(metadata), kv_caches)
    if not pp.is_first:
        shape, dtype = (num_tokens, model.config.hidden_size), attention.spec.dtype
        fwd.intermediate = IntermediateTensors(torch.zeros(shape, dtype=dtype, device=device),
                                               torch.zeros(shape, dtype=dtype, device=device))
    hidden = model(input_ids, _positions(metadata).to(device), fwd)
    return hidden.hidden if isinstance(hidden, IntermediateTensors) else hidden


def _positions(metadata: AttentionMetadata) -> torch.Tensor:
    """[num_tokens] int64: each token's offset within its own sequence."""
    starts = metadata.query_start_loc.cpu().long()
    lens = starts[1:] - starts[:-1]
    seq_of_token = torch.repeat_interleave(torch.arange(len(lens)), lens)
    return torch.arange(int(starts[-1])) - starts[:-1][seq_of_token]
