"""The image flags of vision-language models (docs/multimodal.md), mirroring EngineConfig's media fields."""

from __future__ import annotations

import argparse
import json

from pagoda.config import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS, MODALITIES


def parse_limits(text: str) -> dict[str, int]:
    """``image=2`` (vLLM's older form, comma-separated for several) or JSON ``{"image": 2}``."""
    text = text.strip()
    try:
        limits = json.loads(text) if text.startswith("{") else {
            key.strip(): int(value) for key, _, value in (item.partition("=") for item in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MODALITY=COUNT, e.g. image=2 (or JSON {{\"image\": 2}}); "
                                         f"got {text!r}") from None
    unknown = sorted(set(limits) - set(MODALITIES))
    if unknown or not all(isinstance(v, int) and v >= 0 for v in limits.values()):
        raise argparse.ArgumentTypeError(f"limits counts >= 0 of {', '.join(MODALITIES)}, e.g. image=2; got {text!r}")
    return limits


def add_multimodal_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("images (vision-language models; docs/multimodal.md)")
    g.add_argument("--limit-mm-per-prompt", type=parse_limits, default=None, metavar="image=N",
                   help="most images one prompt may carry (a request with more gets 400); default: no limit")
    g.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                   help="read file:// image URLs, from under DIR only (symbolic links resolved; paths leaving DIR "
                        "are refused). Off by default")
    g.add_argument("--allow-remote-media", action="store_true",
                   help="fetch http(s):// image URLs (within --max-image-bytes and --media-fetch-timeout). Off by "
                        "default: clients send data: URLs")
    g.add_argument("--max-image-bytes", type=int, default=DEFAULT_MAX_IMAGE_BYTES, metavar="BYTES",
                   help=f"largest encoded image (default {DEFAULT_MAX_IMAGE_BYTES}: 20 MiB)")
    g.add_argument("--max-image-pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS, metavar="PIXELS",
                   help=f"largest decoded image, width x height (default {DEFAULT_MAX_IMAGE_PIXELS})")
    g.add_argument("--media-fetch-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="time limit to fetch one http(s):// image (default 10)")


def multimodal_settings(args: argparse.Namespace) -> dict:
    return dict(limit_mm_per_prompt=args.limit_mm_per_prompt, allowed_local_media_path=args.allowed_local_media_path,
                allow_remote_media=args.allow_remote_media, max_image_bytes=args.max_image_bytes,
                max_image_pixels=args.max_image_pixels, media_fetch_timeout=args.media_fetch_timeout)
