"""The multimodal model contract: what a model plugin adds to :class:`~pagoda.interfaces.model.CausalLM`
to take images (docs/multimodal.md).

A vision-language model is a ``CausalLM`` that also subclasses :class:`MultimodalModel`. Its images
flow through four steps, each one method here:

1. **processing** (front end, no weights): transformers' image processor turns each image into
   tensors (:meth:`MultimodalModel.load_image_processor`); :meth:`MultimodalModel.split_image` cuts one
   image's tensors into *items*, one per run of placeholder tokens the image fills (one item per image,
   or per crop where an image is cut into crops);
2. **placeholder expansion** (front end): each image's placeholder in the prompt text
   (:meth:`MultimodalModel.image_placeholder`, e.g. ``<image>``) is replaced by
   :meth:`MultimodalModel.image_prompt` (the image's runs of ``image_token_id``, with any marker tokens
   around them) before tokenizing, as transformers' processor does; item ``i`` fills the ``i``-th run
   of :meth:`MultimodalModel.item_tokens` placeholder tokens;
3. **encoder forward** (engine, during the step that first needs an item):
   :meth:`MultimodalModel.encode_images` maps items to one ``[item_tokens, hidden_size]`` tensor each,
   kept in the engine's encoder cache by the item's content hash;
4. **embedding merge** (engine, every step with placeholder tokens): ``forward`` receives the step's
   encoder rows in ``fwd.multimodal`` (:class:`MultimodalEmbeddings`) and writes them over the text
   embeddings at ``token_index`` before the first decoder layer.

Models whose rotary positions depend on the images (Qwen2.5-VL's M-RoPE) also implement
:meth:`MultimodalModel.mrope_positions`; models whose image tokens attend to each other in both
directions (Gemma 3) set ``bidirectional_image_attention``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ImageItem = dict[str, torch.Tensor]  # one encoder input: the image processor's tensors for one placeholder run


@dataclass(frozen=True)
class ImageSpan:
    """Where one item's placeholder run sits in this step's packed tokens: ``[start, end)``, and where the
    whole run is in its sequence (``run_start``, ``run_end``: token indices in the request), so a model
    can tell whether the step holds all of it."""

    seq: int  # the sequence's index in the step
    start: int  # packed token index of the run's first token in this step
    end: int  # packed token index after its last token in this step
    run_start: int  # the run's first token in its sequence
    run_end: int  # after the run's last token in its sequence


@dataclass
class MultimodalEmbeddings:
    """One step's encoder outputs for the model's forward pass (``ForwardContext.multimodal``)."""

    token_index: torch.Tensor  # [K] int64: packed token indices of the step's placeholder tokens
    embeds: torch.Tensor  # [K, hidden_size]: the encoder rows written there
    mrope_positions: torch.Tensor | None = None  # [3, num_tokens] int64 (M-RoPE models), else None
    spans: list[ImageSpan] = field(default_factory=list)  # the placeholder runs of this step


class MultimodalModel(ABC):
    """Mixin of a ``CausalLM`` that takes images; see the module docstring for the four steps.

    Class methods run in the front end (API servers, ``LLM``) from the HF config and the tokenizer, with
    no weights; instance methods run in the engine. ``image_token_id`` (set by ``__init__``) is the
    placeholder token whose embeddings the encoder rows replace.
    """

    modalities: ClassVar[tuple[str, ...]] = ("image",)
    bidirectional_image_attention: ClassVar[bool] = False  # image tokens attend to their whole run (Gemma 3)
    image_token_id: int

    # -- processing (front end) -------------------------------------------------------------
    @classmethod
    def load_image_processor(cls, model_path: str, hf_config: "PretrainedConfig") -> Any:
        """transformers' image processor for this checkpoint (its PIL backend: no torchvision needed)."""
        from transformers import AutoImageProcessor

        return AutoImageProcessor.from_pretrained(model_path, backend="pil", local_files_only=True)

    @classmethod
    def image_items(cls, hf_config: "PretrainedConfig", image_processor: Any, image: Any) -> list[ImageItem]:
        """One PIL image -> its items: the image processor's tensors, cut by :meth:`split_image`."""
        return cls.split_image(hf_config, image_processor(images=[image], return_tensors="pt"))

    @classmethod
    def largest_image(cls, hf_config: "PretrainedConfig", image_processor: Any) -> tuple[int, int]:
        """``(height, width)`` of an image whose items fill the most placeholder tokens: the engine profiles
        the vision encoder's memory on it at start-up. Default: the size the image processor resizes (or
        crops) every image to; families whose token count grows with the image override it."""
        size = image_processor.crop_size if getattr(image_processor, "do_center_crop", False) else None
        size = size or image_processor.size
        height = size_field(size, "height") or size_field(size, "shortest_edge")
        return int(height), int(size_field(size, "width") or height)

    @classmethod
    @abstractmethod
    def image_placeholder(cls, hf_config: "PretrainedConfig", tokenizer: Any) -> str:
        """The prompt text that stands for one image (where users and chat templates put images)."""

    @classmethod
    @abstractmethod
    def image_token(cls, hf_config: "PretrainedConfig") -> int:
        """The placeholder token id that the encoder's rows replace."""

    @classmethod
    @abstractmethod
    def split_image(cls, hf_config: "PretrainedConfig", processed: Mapping[str, torch.Tensor]) -> list[ImageItem]:
        """The image processor's output for one image -> its items, in prompt order."""

    @classmethod
    @abstractmethod
    def item_tokens(cls, hf_config: "PretrainedConfig", item: ImageItem) -> int:
        """How many placeholder tokens ``item`` fills (the rows :meth:`encode_images` returns for it)."""

    @classmethod
    @abstractmethod
    def image_prompt(cls, hf_config: "PretrainedConfig", tokenizer: Any, items: Sequence[ImageItem]) -> str:
        """The text that replaces one image's placeholder: its items' runs of placeholder tokens."""

    # -- engine ---------------------------------------------------------------------------------
    @abstractmethod
    def encode_images(self, items: Sequence[ImageItem]) -> list[torch.Tensor]:
        """Run the vision encoder and projector: one ``[item_tokens(item), hidden_size]`` tensor per item."""

    def mrope_positions(self, prompt_token_ids: Sequence[int],
                        items: Sequence[tuple[int, ImageItem]]) -> tuple[torch.Tensor, int] | None:
        """M-RoPE models: the ``[3, len(prompt)]`` rotary positions of a prompt whose items start at the
        given token indices, and the offset of the positions after it (generated token ``n`` of the
        sequence gets position ``n + offset`` on all three axes). None: plain positions."""
        return None


def size_field(size: Any, name: str) -> int | None:
    """A field of an image processor's ``size`` or ``crop_size``: a dict, or transformers' ``SizeDict``."""
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)
