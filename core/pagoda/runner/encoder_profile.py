"""The vision encoder's part of the start-up memory profile (vision-language models, docs/multimodal.md).

A step that reaches images encodes them all at once before the decoder runs, while the encoder cache
holds up to its budget of rows. The profile step therefore holds a full encoder cache, encodes as many
of the largest image's items as one step may reach, then runs the text step: its peak covers the
encoder's activations on the largest images as well as the decoder's. The largest image is the model's
(:meth:`~pagoda.interfaces.multimodal.MultimodalModel.largest_image`), made blank and processed by the
checkpoint's image processor, only on platforms that measure (the CPU platform never runs the profile).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from pagoda.config import EngineConfig, encoder_cache_rows
from pagoda.interfaces.multimodal import ImageItem, MultimodalModel

logger = logging.getLogger("pagoda")


@dataclass
class EncoderProfile:
    """What the profile step adds for a vision-language model (:func:`encoder_profile`)."""

    model_path: str
    hf_config: Any
    step_tokens: int  # the step's token budget
    max_images: int | None  # images one step may carry at most (limit_mm_per_prompt x max_num_seqs)
    cache_rows: int  # the encoder cache's budget

    def largest_items(self, model: MultimodalModel) -> list[ImageItem]:
        """The items of as many of the largest images as one step may reach (none if images are off)."""
        cls, config = type(model), self.hf_config
        processor = cls.load_image_processor(self.model_path, config)
        from PIL import Image

        height, width = cls.largest_image(config, processor)
        items = cls.image_items(config, processor, Image.new("RGB", (width, height)))
        tokens = sum(cls.item_tokens(config, item) for item in items)
        images = math.ceil(self.step_tokens / tokens) + 1  # a step's tokens, an image cut at each end
        if self.max_images is not None:
            images = min(images, self.max_images)
        return items * images

    def hold(self, model: MultimodalModel, device: torch.device) -> list[torch.Tensor]:
        """Fill a cache-sized tensor, then encode the largest images (their activations peak here); returns
        what the step holds while the decoder runs."""
        dtype = next(model.parameters()).dtype
        hidden = getattr(self.hf_config, "text_config", self.hf_config).hidden_size  # the decoder's width
        cache = torch.empty(self.cache_rows, hidden, dtype=dtype, device=device)  # the encoder cache, full
        try:
            items = self.largest_items(model)
        except (OSError, ValueError) as exc:  # a folder without the image processor's config (dummy weights)
            logger.warning("The vision encoder is left out of the memory profile (%s); the KV cache may take "
                           "memory the encoder needs for large images: lower --gpu-memory-utilization", exc)
            return [cache]
        inputs = [{name: t.to(device) for name, t in item.items()} for item in items]
        return [cache, *model.encode_images(inputs)] if inputs else [cache]


def encoder_profile(config: EngineConfig, model: Any, model_path: str, hf_config: Any,
                    step_tokens: int) -> EncoderProfile | None:
    """The encoder's profile for a vision-language model (None for a text-only one)."""
    if not isinstance(model, MultimodalModel):
        return None
    limit = (config.limit_mm_per_prompt or {}).get("image")
    max_images = None if limit is None else limit * config.max_num_seqs
    return EncoderProfile(model_path, hf_config, step_tokens, max_images, encoder_cache_rows(config))
