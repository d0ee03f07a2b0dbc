"""The images of chat requests on the server (docs/multimodal.md).

A request's images are counted first (``--limit-mm-per-prompt``), then read: ``data:`` and ``file://``
URLs in a worker thread, ``http(s)://`` ones fetched by the event loop (``--allow-remote-media``); the
model's image processor then runs in a worker thread too, so a large image never stalls the streams of
other requests. Every refusal is a 400 naming the problem and the fix.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pagoda.errors import RequestError
from pagoda.multimodal.images import load_image_async
from pagoda.multimodal.media import MediaConfig
from pagoda.multimodal.processing import ImageProcessor, ProcessedPrompt
from pagoda.server.errors import APIError


class ServerImages:
    """The served model's image front end, made on the first request with images."""

    def __init__(self, model: str | None, tokenizer: Any, media: MediaConfig | None = None) -> None:
        self.model = model  # the model folder (None: the embedded default)
        self.tokenizer = tokenizer
        self.media = media or MediaConfig()
        self._processor: ImageProcessor | None = None
        self._refusal: RequestError | None = None  # a text-only model: the same answer every time

    async def process(self, text: str, images: list[Any]) -> ProcessedPrompt:
        """``text`` (the rendered chat template, one placeholder per image) with its images' items; 400s."""
        try:
            processor = await self._processor_of_model()  # a text-only model refuses before anything is read
            self.media.check_count(len(images))
            loaded = await asyncio.gather(*(load_image_async(image, self.media) for image in images))
            return await asyncio.to_thread(processor.process, text, loaded, False)  # the template wrote the specials
        except RequestError as exc:
            raise APIError(400, str(exc), param="messages") from exc

    async def _processor_of_model(self) -> ImageProcessor:
        if self._refusal is not None:
            raise self._refusal
        if self._processor is None:
            try:
                self._processor = await asyncio.to_thread(ImageProcessor.for_model, self.model, self.tokenizer,
                                                          self.media)
            except RequestError as exc:
                self._refusal = exc
                raise
        return self._processor


def text_only() -> APIError:
    """The answer to images on a server built without image processing."""
    return APIError(400, "this server takes text only (it was started without image processing); send the "
                         "messages without image_url parts", param="messages")
