"""OpenAI chat content parts with images -> what chat templates take, and the images in prompt order.

A message's ``content`` may be a list of parts: ``{"type": "text", "text": ...}``,
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` (OpenAI's form; the URL
may also be given as a plain string) or ``{"type": "image", "image": <PIL.Image>}``. Image parts
become ``{"type": "image"}``, where the models' chat templates write their image placeholder. The
images are returned as given (URLs or PIL images): :mod:`pagoda.multimodal.images` reads them.
"""

from __future__ import annotations

from typing import Any

from pagoda.errors import RequestError

IMAGE_PART = {"type": "image"}


def split_images(conversation: list[dict]) -> tuple[list[dict], list[Any]]:
    """``(conversation for the template, its images in order, unread)``; messages with text content pass
    unchanged."""
    images: list[Any] = []
    out = []
    for message in conversation:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            message = {**message, "content": [_template_part(part, images) for part in content]}
        out.append(message)
    return out, images


def _template_part(part: Any, images: list[Any]) -> dict:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return part
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str):
            raise RequestError('an image_url part needs its URL: {"type": "image_url", "image_url": {"url": '
                               '"data:image/png;base64,..."}}')
        images.append(url)
        return IMAGE_PART
    if kind == "image":
        images.append(part.get("image"))
        return IMAGE_PART
    raise RequestError(f"a content part must be of type text, image_url or image; got {kind!r}")
