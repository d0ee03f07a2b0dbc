"""``http(s)://`` image URLs: fetched only when the operator allows it (``--allow-remote-media``), within a
time limit for the whole download and a size limit checked as the bytes arrive."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import httpx

from pagoda.errors import RequestError
from pagoda.multimodal.media import too_many_bytes

if TYPE_CHECKING:
    from pagoda.multimodal.media import MediaConfig


def fetch_image(url: str, media: "MediaConfig") -> bytes:
    """The body of ``url`` (blocking)."""
    _check_allowed(media)
    deadline = time.monotonic() + media.fetch_timeout
    body = bytearray()
    try:
        with httpx.Client(timeout=media.fetch_timeout, follow_redirects=True) as client:
            with client.stream("GET", url) as response:
                _check_response(response, url, media)
                for chunk in response.iter_bytes():
                    _append(body, chunk, media)
                    if time.monotonic() > deadline:
                        raise _too_slow(url, media)
    except httpx.TimeoutException:
        raise _too_slow(url, media) from None
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from None
    return bytes(body)


async def fetch_image_async(url: str, media: "MediaConfig") -> bytes:
    """The body of ``url``, without blocking the event loop."""
    _check_allowed(media)
    try:
        return await asyncio.wait_for(_fetch(url, media), media.fetch_timeout)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        raise _too_slow(url, media) from None
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from None


async def _fetch(url: str, media: "MediaConfig") -> bytes:
    body = bytearray()
    async with httpx.AsyncClient(timeout=media.fetch_timeout, follow_redirects=True) as client:
        async with client.stream("GET", url) as response:
            _check_response(response, url, media)
            async for chunk in response.aiter_bytes():
                _append(body, chunk, media)
    return bytes(body)


def _check_allowed(media: "MediaConfig") -> None:
    if not media.allow_remote_media:
        raise RequestError("http(s):// image URLs are not fetched: start the server with --allow-remote-media "
                           "(offline: LLM(allow_remote_media=True)), or send the image as a data: URL")


def _check_response(response: httpx.Response, url: str, media: "MediaConfig") -> None:
    if response.status_code != 200:
        raise RequestError(f"fetching the image {_short(url)} answered HTTP {response.status_code}; check the URL")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > media.max_image_bytes:
        raise too_many_bytes(int(declared), media)


def _append(body: bytearray, chunk: bytes, media: "MediaConfig") -> None:
    body += chunk
    if len(body) > media.max_image_bytes:
        raise too_many_bytes(len(body), media, at_least=True)


def _too_slow(url: str, media: "MediaConfig") -> RequestError:
    return RequestError(f"fetching the image {_short(url)} took longer than {media.fetch_timeout:g} s "
                        "(--media-fetch-timeout); send it as a data: URL or from a faster host")


def _unreachable(url: str, exc: Exception) -> RequestError:
    return RequestError(f"the image {_short(url)} cannot be fetched ({type(exc).__name__}: {exc}); check the URL")


def _short(url: str) -> str:
    return repr(url if len(url) <= 100 else url[:100] + "...")
