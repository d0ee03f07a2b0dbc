"""What the vision-language families share: a Pagoda text decoder under ``language_model``, a vision
tower and projector beside it, the embedding merge, and checkpoint loading in either naming.

transformers has saved these models under two layouts: ``language_model.model.layers...`` /
``vision_tower.vision_model...`` (the released checkpoints) and ``model.language_model.layers...`` /
``model.vision_tower...``. A family lists its prefix rewrites (``prefixes``, first match wins) into
Pagoda's module names; tensors under ``language_model.`` then load through the decoder's own
:class:`~pagoda.models.weights.WeightMapper`, the others through one over the tower and projector.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Sequence

import torch

from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.multimodal import ImageItem, MultimodalModel
from pagoda.models.weights import Stacked, WeightMapper

DECODER = "language_model."
VISION_STACKED: Stacked = {  # separate q/k/v and gate/up projections of the towers, fused in Pagoda
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", "gate"),
    "up_proj": ("gate_up_proj", "up"),
}

TOWER_LAYOUT = (  # LLaVA and Gemma 3: either saved layout -> decoder under language_model, tower, projector
    ("model.language_model.", "language_model.model."), ("lm_head.", "language_model.lm_head."),
    ("model.vision_tower.", "vision_tower."), ("model.multi_modal_projector.", "multi_modal_projector."),
    ("vision_tower.vision_model.", "vision_tower."))


def text_config(hf_config: Any) -> Any:
    """The decoder's config, its ``tie_word_embeddings`` taken from the top level where transformers reads it."""
    text = hf_config.text_config
    tied = getattr(hf_config, "tie_word_embeddings", None)
    if tied is not None:
        text.tie_word_embeddings = bool(tied)
    return text


class VisionLanguageModel(CausalLM, MultimodalModel):
    """Base of the families: ``language_model`` (a Pagoda CausalLM) and the modules of the image path."""

    prefixes: ClassVar[tuple[tuple[str, str], ...]] = ()  # checkpoint prefix -> Pagoda's (first match)
    vision_renames: ClassVar[dict[str, str]] = {}  # name fragment rewrites of the tower and projector
    language_model: CausalLM

    # -- processing (front end): an image is a run of image tokens, one per encoder row ---------------
    @classmethod
    def image_token(cls, hf_config: Any) -> int:
        return int(hf_config.image_token_id)

    @classmethod
    def image_placeholder(cls, hf_config: Any, tokenizer: Any) -> str:
        return tokenizer.convert_ids_to_tokens(cls.image_token(hf_config))

    @classmethod
    def image_prompt(cls, hf_config: Any, tokenizer: Any, items: Sequence[ImageItem]) -> str:
        token = tokenizer.convert_ids_to_tokens(cls.image_token(hf_config))
        return "".join(token * cls.item_tokens(hf_config, item) for item in items)

    # -- engine -----------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        decoder = self.language_model.model
        mm = fwd.multimodal
        if mm is None or not mm.token_index.numel():
            return decoder(input_ids, positions, fwd)  # [num_tokens, hidden]
        embeds = decoder.embed(self.text_ids(input_ids))  # [T, hidden]
        embeds.index_copy_(0, mm.token_index, mm.embeds.to(embeds.dtype))
        rope = mm.mrope_positions if mm.mrope_positions is not None else positions
        return decoder(input_ids, rope, fwd, inputs_embeds=embeds)

    def text_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` with placeholders outside the vocabulary mapped to 0 (their rows are replaced anyway)."""
        vocab = self.language_model.model.embed_tokens.num_embeddings
        return input_ids if self.image_token_id < vocab else input_ids.masked_fill(input_ids >= vocab, 0)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.language_model.compute_logits(hidden)

    # -- weights ---------------------------------------------------------------------------------
    def pagoda_name(self, name: str) -> str:
        """A checkpoint tensor name in Pagoda's module layout (``prefixes`` applied)."""
        for old, new in self.prefixes:
            if name.startswith(old):
                return new + name[len(old):]
        return name

    def skips(self, name: str) -> bool:
        """Whether a (renamed) tensor is left out: parts of the tower this model does not build."""
        return False

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        decoder = self.language_model.weight_mapper()
        vision = WeightMapper(self, VISION_STACKED, renames=self.vision_renames)
        for name, tensor in weights:
            name = self.pagoda_name(name)
            if name.startswith(DECODER):
                decoder.load_named(name[len(DECODER):], tensor)
            elif not self.skips(name):
                vision.load_named(name, tensor)
        return {DECODER + n for n in decoder.filled()} | vision.filled()

    def lora_targets(self) -> dict[str, tuple[str, str | None]]:
        """The decoder's LoRA targets (adapters attach to the language model, not the vision tower or the
        projector), under Pagoda's module names and under each checkpoint layout's (``prefixes`` inverted), as
        PEFT saves them from either transformers layout."""
        targets = {}
        for name, (path, shard) in self.language_model.lora_targets().items():
            ours = DECODER + name
            for saved in (ours, *(old + ours[len(new):] for old, new in self.prefixes if ours.startswith(new))):
                targets[saved] = (DECODER + path, shard)
        return targets

    def checkpoint_names(self, param_name: str) -> list[str]:
        """Checkpoint tensor names (Pagoda's layout) that fill ``param_name`` (for error messages)."""
        if param_name.startswith(DECODER):
            return [DECODER + n for n in self.language_model.checkpoint_names(param_name[len(DECODER):])]
        return WeightMapper(self, VISION_STACKED, renames=self.vision_renames).checkpoint_names(param_name)
