"""Eager steps at start-up over a grid of token counts (``PAGODA_SHAPE_WARMUP=1``; off: measured, it barely pays).

Served steps that run eagerly (prefill chunks, mixed prefill + decode steps) come in many token counts,
and the logits of every step in many row counts. On an H100 the first step at a new token count took
9-30 ms more than the same step again (``profile_mixed.py``, 2026-11-23 and -27): kernels loaded on
first use, or per-shape choices made once. If the cost belongs to kernel variants rather than to each
count (``scripts/device/first_shapes.py`` tells which), one pass over a coarse grid at start-up pays
it before the first request: the forward pass at ``warmup_token_counts`` and the LM head at every row
count a step can sample.

Measured on an H100 (2026-11-28, first_shapes.py): the cost belongs to each count, not to the kernel
variants. A count never seen cost 0.99 ms more the first time, and 0.69 ms after this warm-up.
"""

from __future__ import annotations

import logging
import math
import os
import time

import torch

from pagoda.engine.profiling import dummy_forward, dummy_prefill_metadata
from pagoda.interfaces.attention import AttentionBackend
from pagoda.interfaces.model import CausalLM
from pagoda.interfaces.platform import Platform

logger = logging.getLogger("pagoda")
ENV = "PAGODA_SHAPE_WARMUP"
SEQ_TOKENS = 512  # tokens a dummy sequence holds: longer counts are split over several sequences


def shape_warmup_enabled() -> bool:
    return os.environ.get(ENV, "0") == "1"


def warmup_token_counts(max_tokens: int) -> list[int]:
    """16..256 by 16, then by 64 to 2048, then by 512: the grid whose kernels a served step may use."""
    grid = [*range(16, 257, 16), *range(320, 2049, 64), *range(2560, max_tokens + 1, 512)]
    return [t for t in grid if t <= max_tokens]


def warm_up_shapes(model: CausalLM, attention: AttentionBackend, platform: Platform, kv_caches: list[torch.Tensor],
                   block_size: int, max_tokens: int, max_num_seqs: int) -> None:
    """Run the forward pass at each of ``warmup_token_counts(max_tokens)`` and the LM head at 1..``max_num_seqs``
    rows. The dummy sequences write into the first blocks of the KV cache, which no request holds yet."""
    start = time.perf_counter()
    device = platform.device()
    capacity = kv_caches[0].numel() // math.prod(attention.kv_cache_shape(1)) * block_size if kv_caches else 0
    counts = [t for t in warmup_token_counts(max_tokens) if t <= capacity]
    hidden = None
    with platform.inference_context():
        for tokens in counts:
            meta = dummy_prefill_metadata(tokens, math.ceil(tokens / SEQ_TOKENS), block_size, device)
            hidden = dummy_forward(model, attention, meta, kv_caches, device)
        if hidden is not None and hasattr(model, "compute_logits"):
            for rows in range(1, min(max_num_seqs, hidden.shape[0]) + 1):
                model.compute_logits(hidden[:rows])
    platform.synchronize()
    logger.info("Warmed up eager steps at %d token counts (%d-%d) and the LM head at 1-%d rows in %.1f s",
                len(counts), counts[0] if counts else 0, counts[-1] if counts else 0, max_num_seqs,
                time.perf_counter() - start)
