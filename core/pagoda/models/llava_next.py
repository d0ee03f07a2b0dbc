"""LLaVA-NeXT (LLaVA-1.6): LLaVA's CLIP tower, projector and decoder over any-resolution tiles.

The image processor picks the grid resolution (``image_grid_pinpoints``) that keeps most of the image,
pads the resized image to it and cuts it into tower-sized tiles, after a first tile of the whole image
squashed to the tower's square. Each tile becomes ``(image_size / patch_size)**2`` projected patch
features, without the class token. The whole-image tile's features come first; the other tiles'
features are laid out as one feature map of the padded grid, the padding rows or columns removed
(``unpad``), and a learned ``image_newline`` row ends each row of the map. The placeholder count
follows from the image's size alone, as transformers' processor computes it (:func:`feature_grid`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext
from pagoda.interfaces.multimodal import ImageItem
from pagoda.models.llava import LlavaForConditionalGeneration
from pagoda.models.vlm import TOWER_LAYOUT


def tile_grid(hf_config: Any, image_size: Sequence[int]) -> tuple[int, int]:
    """(rows, columns) of tower tiles the processor cuts an image of ``(height, width)`` into."""
    from transformers.image_processing_utils import select_best_resolution

    height, width = select_best_resolution([int(s) for s in image_size], hf_config.image_grid_pinpoints)
    tile = int(hf_config.vision_config.image_size)
    return height // tile, width // tile


def feature_grid(hf_config: Any, image_size: Sequence[int]) -> tuple[int, int, int, int]:
    """The tiles' feature map of an image of ``(height, width)``: its padded ``(rows, columns)`` and the
    ``(top, left)`` offset of the part kept after unpadding (rows and columns of patch features)."""
    rows, cols = tile_grid(hf_config, image_size)
    side = hf_config.vision_config.image_size // hf_config.vision_config.patch_size
    height, width = rows * side, cols * side
    original_height, original_width = (int(s) for s in image_size)
    if original_width / original_height > width / height:  # wider than the grid: padding above and below
        kept = int(round(original_height * (width / original_width), 7))
        top = (height - kept) // 2
        return height - 2 * top, width, top, 0
    kept = int(round(original_width * (height / original_height), 7))
    left = (width - kept) // 2
    return height, width - 2 * left, 0, left


class LlavaNextForConditionalGeneration(LlavaForConditionalGeneration):
    """LLaVA-NeXT (``llava-hf/llava-v1.6-*-hf``)."""

    prefixes = (("model.image_newline", "image_newline"), *TOWER_LAYOUT)

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        if hf_config.vision_feature_select_strategy != "default":
            raise ModelLoadError("LLaVA-NeXT is supported with vision_feature_select_strategy 'default' (the "
                                 f"released checkpoints'), got {hf_config.vision_feature_select_strategy!r}")
        super().__init__(hf_config, ctx)
        hidden = hf_config.text_config.hidden_size
        self.image_newline = nn.Parameter(torch.empty(hidden, dtype=ctx.dtype), requires_grad=False)
        self.side = hf_config.vision_config.image_size // hf_config.vision_config.patch_size

    # -- processing (front end) -------------------------------------------------------------------
    @classmethod
    def split_image(cls, hf_config: Any, processed: Mapping[str, torch.Tensor]) -> list[ImageItem]:
        """One item per image: its tiles ``[1 + rows * cols, C, S, S]`` (the batch padding dropped) and
        its ``(height, width)``."""
        size = processed["image_sizes"][0]
        rows, cols = tile_grid(hf_config, size.tolist())
        return [{"pixel_values": processed["pixel_values"][0][: 1 + rows * cols], "image_sizes": size}]

    @classmethod
    def item_tokens(cls, hf_config: Any, item: ImageItem) -> int:
        side = hf_config.vision_config.image_size // hf_config.vision_config.patch_size
        height, width, _, _ = feature_grid(hf_config, item["image_sizes"].tolist())
        return side * side + height * (width + 1)  # the whole image, then each kept row and its newline

    @classmethod
    def largest_image(cls, hf_config: Any, image_processor: Any) -> tuple[int, int]:
        """The grid resolution of most tiles: an image of that size keeps them all, unpadded."""
        height, width = max(hf_config.image_grid_pinpoints, key=lambda hw: hw[0] * hw[1])
        return int(height), int(width)

    # -- engine -----------------------------------------------------------------------------------
    def encode_images(self, items: Sequence[ImageItem]) -> list[torch.Tensor]:
        tiles = torch.cat([item["pixel_values"] for item in items])  # [sum of tiles, C, S, S]
        states = self.vision_tower(tiles, keep=self.keep)  # each [tiles, 1 + side * side, hidden_v]
        features = self.multi_modal_projector(torch.cat([s[:, 1:] for s in states], dim=-1))  # [tiles, side^2, h]
        counts = [item["pixel_values"].shape[0] for item in items]
        return [self.pack(per_image, item["image_sizes"].tolist())
                for per_image, item in zip(features.split(counts), items)]

    def pack(self, tiles: torch.Tensor, image_size: list[int]) -> torch.Tensor:
        """``[1 + rows * cols, side * side, hidden]`` -> the image's rows ``[item_tokens, hidden]``."""
        rows, cols = tile_grid(self.config, image_size)
        height, width, top, left = feature_grid(self.config, image_size)
        side, hidden = self.side, tiles.shape[-1]
        grid = tiles[1:].view(rows, cols, side, side, hidden).permute(0, 2, 1, 3, 4)  # [rows, side, cols, side, h]
        grid = grid.reshape(rows * side, cols * side, hidden)[top : top + height, left : left + width]
        newline = self.image_newline.to(grid.dtype).expand(height, 1, hidden)
        return torch.cat([tiles[0], torch.cat([grid, newline], dim=1).reshape(-1, hidden)])
