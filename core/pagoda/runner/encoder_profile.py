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
SHRINK_TRIES = 4  # images whose tokens do not shrink with their size (fixed-size processors) stop there


@dataclass
class EncoderProfile:
    """What the profile step adds for a vision-language model (:func:`encoder_profile`)."""

    model_path: str
    hf_config: Any
    step_tokens: int  # the step's token budget
    max_model_len: int  # the longest prompt: no image fills more tokens
    max_images: int | None  # images one step may carry at most (limit_mm_per_prompt x max_num_seqs)
    cache_rows: int  # the encoder cache's budget

    def largest_items(self, model: MultimodalModel) -> list[ImageItem]:
        """The items of as many of the largest images as one step may reach (none if images are off)."""
        cls, config = type(model), self.hf_config
        processor = cls.load_image_processor(self.model_path, config)
        items, tokens = self.largest_fitting(cls, processor, *cls.largest_image(config, processor))
        images = math.ceil(self.step_tokens / tokens) + 1  # a step's tokens, an image cut at each end
        if self.max_images is not None:
            images = min(images, self.max_images)
        return items * images

    def largest_fitting(self, cls: type[MultimodalModel], processor: Any, height: int,
                        width: int) -> tuple[list[ImageItem], int]:
        """The items of a blank ``height x width`` image, shrunk while its tokens exceed ``max_model_len``
        (a prompt never holds more: larger images are refused before they are encoded); and their tokens."""
        from PIL import Image

        for _ in range(SHRINK_TRIES):
            items = cls.image_items(self.hf_config, processor, Image.new("RGB", (width, height)))
            tokens = sum(cls.item_tokens(self.hf_config, item) for item in items)
            if tokens <= self.max_model_len:
                break
            scale = math.sqrt(self.max_model_len / tokens)  # token counts grow with the area
            height, width = max(1, int(height * scale)), max(1, int(width * scale))
        return items, tokens

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


def encoder_profile(config: EngineConfig, model: Any, model_path: str, hf_config: Any, step_tokens: int,
                    max_model_len: int) -> EncoderProfile | None:
    """The encoder's profile for a vision-language model (None for a text-only one)."""
    if not isinstance(model, MultimodalModel):
        return None
    limit = (config.limit_mm_per_prompt or {}).get("image")
    max_images = None if limit is None else limit * config.max_num_seqs
    return EncoderProfile(model_path, hf_config, step_tokens, max_model_len, max_images, encoder_cache_rows(config))
