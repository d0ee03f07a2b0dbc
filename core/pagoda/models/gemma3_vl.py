"""Gemma 3 with images: a SigLIP tower, an average-pooling projector and the Gemma 3 decoder.

Each image (or pan-and-scan crop) is resized to the tower's square; the tower's patch states are
average-pooled to ``mm_tokens_per_image`` tokens (256 for the released models), normed and projected
to the decoder's width. The prompt writes ``<start_of_image>`` per image; it becomes
``\\n\\n<start_of_image>`` + ``mm_tokens_per_image`` x ``<image_soft_token>`` + ``<end_of_image>\\n\\n``,
as transformers' processor writes it. Image tokens attend to their whole image in both directions
(:mod:`pagoda.models.image_attention`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext
from pagoda.interfaces.multimodal import ImageItem
from pagoda.layers.norm import GemmaRMSNorm
from pagoda.models.gemma3 import Gemma3ForCausalLM
from pagoda.models.image_attention import ImageRunAttention
from pagoda.models.vision.common import vision_context
from pagoda.models.vision.vit import VisionTransformer
from pagoda.models.vlm import TOWER_LAYOUT, VisionLanguageModel, text_config

CROPS_INTRO = "Here is the original image {image} and here are some crops to help you see better "


class Gemma3Projector(nn.Module):
    """Average-pool the patch grid to ``mm_tokens_per_image`` tokens, Gemma-norm them, project."""

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__()
        vision = hf_config.vision_config
        self.patches_per_side = vision.image_size // vision.patch_size
        tokens_per_side = int(round(hf_config.mm_tokens_per_image**0.5))
        if tokens_per_side**2 != hf_config.mm_tokens_per_image or self.patches_per_side % tokens_per_side:
            raise ModelLoadError(f"mm_tokens_per_image {hf_config.mm_tokens_per_image} must be a square whose side "
                                 f"divides the {self.patches_per_side} patches per image side")
        self.kernel = self.patches_per_side // tokens_per_side
        self.mm_soft_emb_norm = GemmaRMSNorm(vision.hidden_size, vision.layer_norm_eps, ctx.dtype)
        self.mm_input_projection_weight = nn.Parameter(
            torch.empty(vision.hidden_size, hf_config.text_config.hidden_size, dtype=ctx.dtype), requires_grad=False)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """``[B, patches, hidden_v]`` -> ``[B, mm_tokens_per_image, hidden]``."""
        b, _, width = states.shape
        grid = states.transpose(1, 2).reshape(b, width, self.patches_per_side, self.patches_per_side)
        pooled = F.avg_pool2d(grid, self.kernel).flatten(2).transpose(1, 2)  # [B, tokens, hidden_v]
        return torch.matmul(self.mm_soft_emb_norm(pooled), self.mm_input_projection_weight).to(states.dtype)


class Gemma3ForConditionalGeneration(VisionLanguageModel):
    """Gemma 3 4B/12B/27B (``google/gemma-3-*-it``) with images."""

    bidirectional_image_attention = True
    prefixes = TOWER_LAYOUT

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        vision = hf_config.vision_config
        self.image_token_id = self.image_token(hf_config)
        vctx = vision_context(ctx)
        self.vision_tower = VisionTransformer(vision, vctx, vision.num_hidden_layers, clip=False)
        self.multi_modal_projector = Gemma3Projector(hf_config, vctx)
        self.language_model = Gemma3ForCausalLM(text_config(hf_config), ctx)
        for layer in self.language_model.model.layers:
            layer.self_attn.attn = ImageRunAttention(layer.self_attn.attn)

    # -- processing (front end) -------------------------------------------------------------------
    @classmethod
    def image_placeholder(cls, hf_config: Any, tokenizer: Any) -> str:
        return tokenizer.convert_ids_to_tokens(int(hf_config.boi_token_index))

    @classmethod
    def split_image(cls, hf_config: Any, processed: Mapping[str, torch.Tensor]) -> list[ImageItem]:
        return [{"pixel_values": pixels} for pixels in processed["pixel_values"]]  # the image, then its crops

    @classmethod
    def item_tokens(cls, hf_config: Any, item: ImageItem) -> int:
        return int(hf_config.mm_tokens_per_image)

    @classmethod
    def largest_image(cls, hf_config: Any, image_processor: Any) -> tuple[int, int]:
        """The tower's square, or with pan-and-scan on, a strip of as many squares as the crops it may cut."""
        side = int(hf_config.vision_config.image_size)
        crops = int(getattr(image_processor, "pan_and_scan_max_num_crops", 0) or 0)
        return (side, side * crops) if getattr(image_processor, "do_pan_and_scan", False) and crops else (side, side)

    @classmethod
    def image_prompt(cls, hf_config: Any, tokenizer: Any, items: Sequence[ImageItem]) -> str:
        boi, image, eoi = tokenizer.convert_ids_to_tokens(
            [int(hf_config.boi_token_index), cls.image_token(hf_config), int(hf_config.eoi_token_index)])
        sequence = f"\n\n{boi}{image * int(hf_config.mm_tokens_per_image)}{eoi}\n\n"
        if len(items) == 1:
            return sequence
        return CROPS_INTRO.format(image=sequence) + " ".join([sequence] * (len(items) - 1))

    # -- engine -----------------------------------------------------------------------------------
    def encode_images(self, items: Sequence[ImageItem]) -> list[torch.Tensor]:
        pixels = torch.stack([item["pixel_values"] for item in items])  # [B, C, S, S]
        (states,) = self.vision_tower(pixels)  # [B, patches, hidden_v], post-norm
        return list(self.multi_modal_projector(states))
