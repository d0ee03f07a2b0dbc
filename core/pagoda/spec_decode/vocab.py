"""The target's embedding and LM head whole on rank 0, for a proposer beside a tensor-parallel target.

Under tensor parallelism the target's embedding and LM head are split over the vocabulary: using
them takes every rank. A proposer that runs on rank 0 alone and reads them (EAGLE's head embeds its
drafts and scores its outputs with them) gets its own unsharded copy, read from the target's
checkpoint (2 x vocab x hidden elements in the target's dtype). Drafts only decide speed, never
outputs (verification is exact), so the copy needs no collective to stay in step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pagoda.errors import ConfigError
from pagoda.interfaces.proposer import ProposerContext
from pagoda.loader import resolve_model
from pagoda.loader.model_loader import checkpoint_reader, resolve_load_format

EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"


@dataclass
class VocabWeights:
    embedding: torch.Tensor  # [vocab, hidden]
    lm_head: torch.Tensor  # [vocab, hidden]: the embedding itself where the checkpoint ties them

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(token_ids, self.embedding)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.lm_head).float()


def load_vocab_weights(context: ProposerContext, what: str) -> VocabWeights:
    """``context``'s target embedding and LM head, whole, on its device in its dtype (``what`` names the
    proposer in errors)."""
    config = context.engine_config
    source = resolve_model(config.model)
    fmt = resolve_load_format(source, config.load_format)
    if fmt == "dummy":
        raise ConfigError(f"{what} under tensor parallelism reads the target's embedding and LM head from its "
                          "checkpoint; --load-format dummy has none (use --tensor-parallel-size 1)")
    found: dict[str, torch.Tensor] = {}
    for name, tensor in checkpoint_reader(source, fmt, context.hf_config, lazy=True).tensors(only={EMBED, LM_HEAD}):
        whole = tensor.materialize() if hasattr(tensor, "materialize") else tensor
        found[name] = whole.to(device=context.platform.device(), dtype=context.dtype)
    if EMBED not in found:
        raise ConfigError(f"{what} under tensor parallelism: the target's checkpoint has no {EMBED}")
    return VocabWeights(found[EMBED], found.get(LM_HEAD, found[EMBED]))
