"""``file://`` image URLs: read only under the folder the operator allowed (``--allowed-local-media-path``).

The path is resolved (``..`` and every symbolic link followed) before it is compared with the folder,
itself resolved: a path that leaves the folder, by ``..``, by being elsewhere or through a link, is
refused with the same message whether or not it exists, so requests cannot probe the rest of the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from pagoda.errors import RequestError
from pagoda.multimodal.media import too_many_bytes

if TYPE_CHECKING:
    from pagoda.multimodal.media import MediaConfig

LOCAL_HOSTS = ("", "localhost")


def read_local_image(url: str, media: "MediaConfig") -> bytes:
    """The bytes of the file a ``file://`` URL names, if it lies under the allowed folder."""
    folder = media.allowed_local_media_path
    if folder is None:
        raise RequestError("file:// image URLs are not read: start the server with --allowed-local-media-path DIR "
                           "(offline: LLM(allowed_local_media_path=DIR)) to allow images under DIR, or send the image "
                           "as a data: URL")
    path = _path_of(url)
    root = Path(folder).resolve()
    resolved = path.resolve()  # follows .. and symbolic links, existing or not
    if not resolved.is_relative_to(root):
        raise RequestError(f"the image path {str(path)!r} is outside the folder images may be read from ({root}, "
                           "--allowed-local-media-path); put the image under it, or send it as a data: URL")
    if not resolved.is_file():
        raise RequestError(f"the image file {str(path)!r} does not exist under {root}; check the file:// URL")
    size = resolved.stat().st_size
    if size > media.max_image_bytes:
        raise too_many_bytes(size, media)
    with open(resolved, "rb") as f:
        return f.read(media.max_image_bytes + 1)


def _path_of(url: str) -> Path:
    """The absolute local path of ``file:///abs/path`` (or ``file://localhost/abs/path``)."""
    parts = urlsplit(url)
    if parts.netloc not in LOCAL_HOSTS:
        raise RequestError(f"a file:// URL names a file on the server: file:///absolute/path.png (got the host "
                           f"{parts.netloc!r}); send other machines' images as data: URLs")
    path = Path(unquote(parts.path))
    if not path.is_absolute():
        raise RequestError(f"a file:// URL needs an absolute path, file:///absolute/path.png; got {url[:80]!r}")
    return path
