"""Reading images: PIL images as given, or ``data:`` URLs (base64 PNG, JPEG, WebP, ...)."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from pagoda.errors import RequestError

DATA_URL_PREFIX = "data:"


def load_image(image: Any) -> Any:
    """A PIL image from a PIL image or a ``data:image/...;base64,...`` URL (RequestError otherwise)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    if isinstance(image, str) and image.startswith(DATA_URL_PREFIX):
        return decode_data_url(image)
    kind = f"a URL ({image[:40]!r})" if isinstance(image, str) else f"a {type(image).__name__}"
    raise RequestError(f"an image must be a PIL.Image or a data: URL (data:image/png;base64,...); got {kind}")


def decode_data_url(url: str) -> Any:
    """Decode a base64 ``data:`` URL into a loaded PIL image."""
    from PIL import Image, UnidentifiedImageError

    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise RequestError("an image data: URL must be base64-encoded: data:image/png;base64,<data>")
    try:
        image = Image.open(io.BytesIO(base64.b64decode(payload, validate=True)))
        image.load()
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"the image data: URL is not valid base64 ({exc})") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise RequestError(f"the image in the data: URL cannot be decoded ({exc}); send PNG, JPEG or WebP") from None
    return image
