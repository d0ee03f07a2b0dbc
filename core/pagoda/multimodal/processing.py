"""Front end: a prompt with images -> its token ids (placeholders expanded) and its MultimodalItems.

transformers' image processor turns each image into tensors; the model plugin
(:class:`~pagoda.interfaces.multimodal.MultimodalModel`) says how they split into items, how many
placeholder tokens each fills and what text replaces the image's placeholder in the prompt. The prompt
is tokenized after the replacement, as transformers' processors do, then each item is matched to its
run of placeholder tokens in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from pagoda.errors import RequestError
from pagoda.interfaces.multimodal import ImageItem, MultimodalModel
from pagoda.multimodal.images import load_image
from pagoda.multimodal.media import MediaConfig
from pagoda.multimodal_inputs import MultimodalItem, TensorData, content_hash

if TYPE_CHECKING:
    from pagoda.config import EngineConfig


@dataclass
class ProcessedPrompt:
    """A prompt ready for the engine: its token ids and the items filling its placeholder runs."""

    prompt: str  # the text after placeholder expansion
    prompt_token_ids: list[int]
    items: list[MultimodalItem]


class ImageProcessor:
    """Processes prompts with images for one multimodal model (module docstring)."""

    def __init__(self, model_cls: type[MultimodalModel], hf_config: Any, tokenizer: Any, image_processor: Any,
                 media: MediaConfig | None = None) -> None:
        self.model_cls = model_cls
        self.media = media or MediaConfig()
        self.hf_config = hf_config
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.placeholder = model_cls.image_placeholder(hf_config, tokenizer)
        self.image_token_id = model_cls.image_token(hf_config)

    @classmethod
    def load(cls, model_cls: type, hf_config: Any, tokenizer: Any, model_path: str,
             media: MediaConfig | None = None) -> "ImageProcessor | None":
        """The processor of ``model_cls``, or None for a text-only model."""
        if not issubclass(model_cls, MultimodalModel):
            return None
        return cls(model_cls, hf_config, tokenizer, model_cls.load_image_processor(model_path, hf_config), media)

    @classmethod
    def for_engine(cls, config: "EngineConfig | None", tokenizer: Any) -> "ImageProcessor":
        """The processor of the engine's model (RequestError for a text-only model or without a tokenizer)."""
        if config is None:
            raise RequestError("prompts with images need the engine's model; build the engine from its config")
        return cls.for_model(config.model, tokenizer, MediaConfig.from_engine(config))

    @classmethod
    def for_model(cls, model: str | None, tokenizer: Any, media: MediaConfig) -> "ImageProcessor":
        """The processor of the model folder ``model`` (None: the embedded default); RequestError for a
        text-only model or without a tokenizer."""
        from pagoda.loader import load_hf_config, resolve_model
        from pagoda.runner.shard import model_class

        if tokenizer is None:
            raise RequestError("prompts with images need the model's tokenizer; run without skip_tokenizer_init")
        source = resolve_model(model)
        hf_config = load_hf_config(source)
        model_cls = model_class(hf_config)
        processor = cls.load(model_cls, hf_config, tokenizer, str(source.path), media)
        if processor is None:
            raise RequestError(f"this model ({model_cls.__name__}) takes text only; send the prompt without images, "
                               "or serve a vision-language model (docs/multimodal.md)")
        return processor

    def process(self, prompt: str, images: Sequence[Any], add_special_tokens: bool = True) -> ProcessedPrompt:
        """Expand the prompt's placeholders (one per image, in order) and tokenize it. RequestError for a
        prompt whose placeholders do not match its images, or an image that cannot be read."""
        self.media.check_count(len(images))
        found = prompt.count(self.placeholder)
        if found != len(images):
            raise RequestError(f"the prompt has {found} image placeholder(s) '{self.placeholder}' and {len(images)} "
                               f"image(s) were given; write '{self.placeholder}' in the prompt once where each image "
                               "goes (chat messages place it for you)")
        per_image = [self.image_items(load_image(image, self.media)) for image in images]
        pieces = prompt.split(self.placeholder)
        text = pieces[0] + "".join(self.model_cls.image_prompt(self.hf_config, self.tokenizer, items) + piece
                                   for items, piece in zip(per_image, pieces[1:]))
        ids = self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        items = [item for image_items in per_image for item in image_items]
        return ProcessedPrompt(text, ids, self.place(ids, items))

    def image_items(self, image: Any) -> list[ImageItem]:
        """One image -> its encoder items (transformers' image processor, then the model's split)."""
        return self.model_cls.image_items(self.hf_config, self.image_processor, image)

    def place(self, ids: list[int], items: list[ImageItem]) -> list[MultimodalItem]:
        """Match the items, in order, to consecutive runs of the placeholder token in ``ids``."""
        placed, cursor = [], 0
        for item in items:
            length = self.model_cls.item_tokens(self.hf_config, item)
            try:
                start = ids.index(self.image_token_id, cursor)
            except ValueError:
                start = len(ids)
            if ids[start : start + length] != [self.image_token_id] * length:
                raise RequestError(f"the prompt's placeholder tokens do not fit its images: an image needs {length} "
                                   f"tokens {self.image_token_id} in a row; do not write the image tokens yourself, "
                                   f"write '{self.placeholder}' once per image")
            placed.append(MultimodalItem("image", start, length, content_hash(item),
                                         {name: TensorData.of(t) for name, t in item.items()}))
            cursor = start + length
        if self.image_token_id in ids[cursor:]:
            raise RequestError(f"the prompt has more image tokens ({self.image_token_id}) than its images fill; write "
                               f"'{self.placeholder}' once per image instead")
        return placed
