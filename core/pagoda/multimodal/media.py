"""The limits on a request's images (EngineConfig's media fields, the server's media flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pagoda.config import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS
from pagoda.errors import RequestError

if TYPE_CHECKING:
    from pagoda.config import EngineConfig


@dataclass(frozen=True)
class MediaConfig:
    """Where images may come from and how large they may be (EngineConfig's media fields)."""

    limit_images: int | None = None  # images per prompt (--limit-mm-per-prompt image=N); None: no limit
    allowed_local_media_path: str | None = None  # file:// URLs are read under this folder only
    allow_remote_media: bool = False  # fetch http(s):// URLs
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    fetch_timeout: float = 10.0  # seconds for one http(s):// image

    @classmethod
    def from_engine(cls, config: "EngineConfig | None") -> "MediaConfig":
        if config is None:
            return cls()
        return cls((config.limit_mm_per_prompt or {}).get("image"), config.allowed_local_media_path,
                   config.allow_remote_media, config.max_image_bytes, config.max_image_pixels,
                   config.media_fetch_timeout)

    def check_count(self, count: int) -> None:
        """RequestError when one prompt carries more images than the limit."""
        if self.limit_images is not None and count > self.limit_images:
            raise RequestError(f"the prompt has {count} images and at most {self.limit_images} are allowed per prompt "
                               f"(--limit-mm-per-prompt image={self.limit_images}); send at most {self.limit_images}, "
                               "or raise the limit")


def too_many_bytes(size: int, media: MediaConfig, at_least: bool = False) -> RequestError:
    return RequestError(f"the image is {'at least ' if at_least else ''}{size} bytes, more than the {media.max_image_bytes} allowed per image "
                        "(--max-image-bytes); send a smaller or more compressed image")
