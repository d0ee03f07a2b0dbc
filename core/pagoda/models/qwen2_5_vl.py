"""Qwen2.5-VL: its windowed ViT at each image's own resolution, and the Qwen2 decoder with M-RoPE.

Images keep their aspect ratio: the image processor resizes each to multiples of 28 pixels within its
pixel limits, giving a ``(t, h, w)`` grid of 14-pixel patches; the tower merges each 2x2 block into
one token, so an image fills ``t*h*w / 4`` ``<|image_pad|>`` tokens (the prompt writes
``<|vision_start|><|image_pad|><|vision_end|>`` per image). Rotary positions have three axes
(:mod:`pagoda.layers.mrope`): text tokens count on all three, an image's tokens take (its first
position) + (frame, row, column), and the text after it resumes past the image's largest side.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from pagoda.interfaces.model import BuildContext
from pagoda.interfaces.multimodal import ImageItem, size_field
from pagoda.layers.mrope import MRotaryEmbedding
from pagoda.layers.rotary import rope_config_from_hf
from pagoda.models import spec
from pagoda.models.qwen2 import Qwen2ForCausalLM
from pagoda.models.vision.common import vision_context
from pagoda.models.vision.qwen2_5_vit import Grid, Qwen2_5_VisionTransformer
from pagoda.models.vlm import VisionLanguageModel, text_config


class Qwen2_5_VLTextModel(Qwen2ForCausalLM):
    """The Qwen2 decoder with multimodal rotary positions."""

    @classmethod
    def build_rotary(cls, hf_config: Any, ctx: BuildContext) -> MRotaryEmbedding:
        d = spec.head_dim(hf_config)
        rope = rope_config_from_hf(hf_config, d)
        return MRotaryEmbedding(rope, d, ctx.ops, list(rope.scaling["mrope_section"]))


def grid_of(item: ImageItem) -> Grid:
    t, h, w = (int(x) for x in item["image_grid_thw"])
    return t, h, w


class Qwen2_5_VLForConditionalGeneration(VisionLanguageModel):
    """Qwen2.5-VL (``Qwen/Qwen2.5-VL-*-Instruct``), images only."""

    prefixes = (("model.language_model.", "language_model.model."), ("model.visual.", "visual."),
                ("model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))
    vision_renames = {"merger.mlp.0.": "merger.fc1.", "merger.mlp.2.": "merger.fc2.", "patch_embed.proj.": "patch_embed."}

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        self.image_token_id = self.image_token(hf_config)
        self.merge = int(hf_config.vision_config.spatial_merge_size)
        self.visual = Qwen2_5_VisionTransformer(hf_config.vision_config, vision_context(ctx))
        self.language_model = Qwen2_5_VLTextModel(text_config(hf_config), ctx)

    # -- processing (front end) -------------------------------------------------------------------
    @classmethod
    def split_image(cls, hf_config: Any, processed: Mapping[str, torch.Tensor]) -> list[ImageItem]:
        grids = processed["image_grid_thw"]  # [images, 3]
        sizes = [int(g.prod()) for g in grids]
        return [{"pixel_values": pixels, "image_grid_thw": grid}
                for pixels, grid in zip(processed["pixel_values"].split(sizes), grids)]

    @classmethod
    def item_tokens(cls, hf_config: Any, item: ImageItem) -> int:
        return int(item["image_grid_thw"].prod()) // int(hf_config.vision_config.spatial_merge_size) ** 2

    @classmethod
    def largest_image(cls, hf_config: Any, image_processor: Any) -> tuple[int, int]:
        """The image of most merged patches within the processor's ``max_pixels`` (larger ones are resized
        down to at most as many tokens): ``a x b`` units of ``patch_size * merge_size`` pixels, ``a * b``
        as large as ``max_pixels`` allows, ``a`` and ``b`` as close as can be."""
        max_pixels = getattr(image_processor, "max_pixels", None) or size_field(image_processor.size, "longest_edge")
        unit = int(hf_config.vision_config.patch_size) * int(hf_config.vision_config.spatial_merge_size)
        units = int(max_pixels) // unit**2
        rows = math.isqrt(units)
        return rows * unit, units // rows * unit

    # -- engine -----------------------------------------------------------------------------------
    def encode_images(self, items: Sequence[ImageItem]) -> list[torch.Tensor]:
        grids = [grid_of(item) for item in items]
        merged = self.visual(torch.cat([item["pixel_values"] for item in items]), grids)  # [sum tokens, hidden]
        return list(merged.split([t * h * w // self.merge**2 for t, h, w in grids]))

    def mrope_positions(self, prompt_token_ids: Sequence[int],
                        items: Sequence[tuple[int, ImageItem]]) -> tuple[torch.Tensor, int]:
        """Positions ``[3, len(prompt)]`` and the offset of the tokens after the prompt (interface docstring)."""
        columns, next_pos, done = [], 0, 0
        for start, item in sorted(items, key=lambda pair: pair[0]):
            text = start - done
            columns.append(torch.arange(next_pos, next_pos + text).expand(3, -1))
            next_pos += text
            t, h, w = grid_of(item)
            h, w = h // self.merge, w // self.merge
            frame, row, col = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
            columns.append(torch.stack([frame, row, col]).reshape(3, -1) + next_pos)
            next_pos += max(h, w)
            done = start + t * h * w
        columns.append(torch.arange(next_pos, next_pos + len(prompt_token_ids) - done).expand(3, -1))
        positions = torch.cat(columns, dim=1)  # [3, len(prompt)]
        return positions, int(positions.max()) + 1 - len(prompt_token_ids)
