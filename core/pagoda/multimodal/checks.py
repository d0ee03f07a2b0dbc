"""The engine core's checks of a request's images (RequestError naming the problem and the fix)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagoda.errors import RequestError
from pagoda.interfaces.multimodal import MultimodalModel

if TYPE_CHECKING:
    from pagoda.messages import AddRequest


def check_images(add: "AddRequest", model: object) -> bool:
    """Refuse images for a text-only model, with beam search or pooling, or placed off their placeholders.
    Returns whether the request's prefill chunks must keep each image's placeholder run whole (the model's
    image tokens attend to their whole image: ``Request.whole_image_runs``)."""
    if not isinstance(model, MultimodalModel):
        raise RequestError(f"this model ({type(model).__name__}) takes text only; send the request without images, "
                           "or serve a vision-language model (docs/multimodal.md)")
    if add.beam is not None or add.pooling_params is not None:
        raise RequestError("images work with generation only, not with beam search or pooling yet; drop the images")
    ids = add.prompt_token_ids
    for item in add.mm_items:
        run = ids[item.offset : item.end]
        if item.offset < 0 or len(run) != item.length or any(t != model.image_token_id for t in run):
            raise RequestError(f"an image's placeholder run [{item.offset}, {item.end}) is not {item.length} "
                               f"image tokens ({model.image_token_id}) of the prompt; process prompts with images "
                               "through LLM.generate/chat or the server, which place them")
    return model.bidirectional_image_attention
