"""LLaVA-1.5: a CLIP vision tower, a two-layer MLP projector and a Llama-family decoder.

Each image (resized and cropped to the tower's square by the image processor) becomes the hidden states
of one tower layer (``vision_feature_layer``, by default the second to last; a list concatenates several),
without the class token under the ``default`` feature strategy, projected to the decoder's width: one
placeholder token (``<image>``) per patch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext, CausalLM
from pagoda.interfaces.multimodal import ImageItem
from pagoda.layers.linear import Linear
from pagoda.models.llama import LlamaForCausalLM, MistralForCausalLM
from pagoda.models.qwen2 import Qwen2ForCausalLM
from pagoda.models.vision.common import activation, vision_context
from pagoda.models.vision.vit import VisionTransformer
from pagoda.models.vlm import TOWER_LAYOUT, VisionLanguageModel, text_config

DECODERS: dict[str, type[CausalLM]] = {"llama": LlamaForCausalLM, "mistral": MistralForCausalLM,
                                       "qwen2": Qwen2ForCausalLM}


def feature_layers(hf_config: Any) -> tuple[int, ...]:
    """The tower's hidden states the projector reads, as layer counts (0: the embeddings)."""
    chosen = hf_config.vision_feature_layer
    depth = int(hf_config.vision_config.num_hidden_layers)
    return tuple(layer % (depth + 1) for layer in ([chosen] if isinstance(chosen, int) else chosen))


class LlavaProjector(nn.Module):
    """linear_2(act(linear_1(features)))."""

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__()
        width = hf_config.vision_config.hidden_size * len(feature_layers(hf_config))
        hidden, bias = hf_config.text_config.hidden_size, bool(getattr(hf_config, "multimodal_projector_bias", True))
        self.linear_1 = Linear(width, hidden, bias=bias, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.linear_2 = Linear(hidden, hidden, bias=bias, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.act = activation(hf_config.projector_hidden_act)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(features)))


class LlavaForConditionalGeneration(VisionLanguageModel):
    """LLaVA-1.5 (``llava-hf/llava-1.5-*-hf``) and other single-crop LLaVA checkpoints."""

    prefixes = TOWER_LAYOUT

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        text = text_config(hf_config)
        decoder = DECODERS.get(text.model_type)
        if decoder is None:
            raise ModelLoadError(f"LLaVA with a '{text.model_type}' decoder is not supported (supported: "
                                 f"{', '.join(DECODERS)})")
        if hf_config.vision_config.model_type != "clip_vision_model":
            raise ModelLoadError(f"LLaVA with a '{hf_config.vision_config.model_type}' vision tower is not supported "
                                 "(supported: clip_vision_model)")
        self.image_token_id = self.image_token(hf_config)
        self.keep = feature_layers(hf_config)
        self.drop_class_token = hf_config.vision_feature_select_strategy == "default"
        vctx = vision_context(ctx)
        self.vision_tower = VisionTransformer(hf_config.vision_config, vctx, max(self.keep), clip=True)
        self.multi_modal_projector = LlavaProjector(hf_config, vctx)
        self.language_model = decoder(text, ctx)

    # -- processing (front end) -------------------------------------------------------------------
    @classmethod
    def split_image(cls, hf_config: Any, processed: Mapping[str, torch.Tensor]) -> list[ImageItem]:
        return [{"pixel_values": pixels} for pixels in processed["pixel_values"]]  # [C, S, S] each

    @classmethod
    def item_tokens(cls, hf_config: Any, item: ImageItem) -> int:
        patch = int(hf_config.vision_config.patch_size)
        side = item["pixel_values"].shape[-1] // patch
        return side * side + int(hf_config.vision_feature_select_strategy != "default")


    # -- engine -----------------------------------------------------------------------------------
    def encode_images(self, items: Sequence[ImageItem]) -> list[torch.Tensor]:
        pixels = torch.stack([item["pixel_values"] for item in items])  # [B, C, S, S]
        states = self.vision_tower(pixels, keep=self.keep)  # each [B, 1 + patches, hidden_v]
        features = torch.cat([s[:, 1:] if self.drop_class_token else s for s in states], dim=-1)
        return list(self.multi_modal_projector(features))  # B x [tokens, hidden]

    def skips(self, name: str) -> bool:
        """The tower's layers after the last one read, and its post-norm (unused by LLaVA)."""
        if name.startswith("vision_tower.post_layernorm."):
            return True
        prefix = "vision_tower.encoder.layers."
        return name.startswith(prefix) and int(name[len(prefix):].split(".")[0]) >= max(self.keep)
