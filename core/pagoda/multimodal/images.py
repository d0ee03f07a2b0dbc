"""Reading a request's images: PIL images as given, or URLs: ``data:`` (base64), ``file://`` under the
allowed folder, ``http(s)://`` when remote media is allowed; within the limits of
:class:`~pagoda.multimodal.media.MediaConfig` (encoded bytes, decoded pixels). Every refusal is a
RequestError naming the problem and the fix (an HTTP 400 on the server).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from typing import Any

from pagoda.errors import RequestError
from pagoda.multimodal.local_files import read_local_image
from pagoda.multimodal.media import MediaConfig, too_many_bytes
from pagoda.multimodal.remote import fetch_image, fetch_image_async

DATA_URL_PREFIX = "data:"
FILE_URL_PREFIX = "file:"
REMOTE_PREFIXES = ("http://", "https://")
# what Image.open may parse: common web formats (Pillow's others include EPS, which runs Ghostscript)
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")


def load_image(image: Any, media: MediaConfig | None = None) -> Any:
    """A decoded PIL image from a PIL image or a URL (module docstring); RequestError otherwise."""
    media = media or MediaConfig()
    if _is_pil(image):
        return check_pixels(image, media)
    url = _url(image)
    if url.startswith(REMOTE_PREFIXES):
        return decode_image(fetch_image(url, media), media)
    return decode_image(_local_bytes(url, media), media)


async def load_image_async(image: Any, media: MediaConfig) -> Any:
    """:func:`load_image` for an event loop: the fetch is async, reading and decoding run in a thread."""
    if _is_pil(image):
        return check_pixels(image, media)
    url = _url(image)
    if url.startswith(REMOTE_PREFIXES):
        data = await fetch_image_async(url, media)
        return await asyncio.to_thread(decode_image, data, media)
    return await asyncio.to_thread(lambda: decode_image(_local_bytes(url, media), media))


def _is_pil(image: Any) -> bool:
    from PIL import Image

    return isinstance(image, Image.Image)


def _url(image: Any) -> str:
    if isinstance(image, str) and image.startswith((DATA_URL_PREFIX, FILE_URL_PREFIX, *REMOTE_PREFIXES)):
        return image
    kind = f"the URL {image[:40]!r}" if isinstance(image, str) else f"a {type(image).__name__}"
    raise RequestError(f"an image must be a data: URL (data:image/png;base64,...), a file:// or http(s):// URL, or a "
                       f"PIL.Image; got {kind}")


def _local_bytes(url: str, media: MediaConfig) -> bytes:
    """The encoded bytes of a data: or file:// URL."""
    return data_url_bytes(url, media) if url.startswith(DATA_URL_PREFIX) else read_local_image(url, media)


def data_url_bytes(url: str, media: MediaConfig) -> bytes:
    """The bytes a base64 ``data:`` URL carries."""
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise RequestError("an image data: URL must be base64-encoded: data:image/png;base64,<data>")
    if len(payload) * 3 // 4 > media.max_image_bytes:
        raise too_many_bytes(len(payload) * 3 // 4, media)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"the image data: URL is not valid base64 ({exc})") from None


def decode_image(data: bytes, media: MediaConfig) -> Any:
    """A loaded PIL image from encoded bytes; its size is checked before its pixels are decoded."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > media.max_image_bytes:
        raise too_many_bytes(len(data), media)
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
        check_pixels(image, media)
        image.load()
    except Image.DecompressionBombError:
        raise RequestError(f"the image has more pixels than the {media.max_image_pixels} allowed per image "
                           "(--max-image-pixels); downscale it") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise RequestError(f"the image cannot be decoded ({exc}); send PNG, JPEG or WebP") from None
    return image


def check_pixels(image: Any, media: MediaConfig) -> Any:
    width, height = image.size
    if width * height > media.max_image_pixels:
        raise RequestError(f"the image is {width}x{height} = {width * height} pixels, more than the "
                           f"{media.max_image_pixels} allowed per image (--max-image-pixels); downscale it")
    return image
