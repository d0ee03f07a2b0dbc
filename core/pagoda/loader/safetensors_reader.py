"""Read HF safetensors checkpoints: ``model.safetensors`` or shards listed by an index file.

Every read error (missing shard, truncated or corrupt file) becomes a ModelLoadError naming
the file. Tensors are memory-mapped and handed out one at a time; with ``lazy=True`` (tensor
parallelism) they are handed out as :class:`SafetensorsSlice`s, so a rank reads only its part.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Collection, Iterator

import torch

from pagoda.errors import ModelLoadError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of the checkpoint in ``folder``, in load order."""
    index = folder / INDEX_FILE
    if index.is_file():
        return _files_from_index(index)
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    files = sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("consolidated"))
    if files:
        return files
    other = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
    hint = f" It has {', '.join(other)}: PyTorch pickles are not loaded; convert them to safetensors." if other else ""
    raise ModelLoadError(
        f"No *.safetensors weights in '{folder}'.{hint} Use --load-format dummy to run with random weights."
    )


def _files_from_index(index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"Cannot read the shard index {index}: {exc!r}; it needs a 'weight_map' object.") from exc
    files = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ModelLoadError(f"Shards listed in {index} are missing: {', '.join(missing)}; copy them next to it.")
    return files


class SafetensorsReader:
    """Iterates ``(name, tensor)`` over the checkpoint files; ``current_file`` names the one being read."""

    def __init__(self, folder: Path, lazy: bool = False) -> None:
        self.lazy = lazy
        self.files = checkpoint_files(folder)
        self.location = str(self.files[0]) if len(self.files) == 1 else str(folder)
        self.current_file: str | None = None
        self._counts = [len(self._keys(f)) for f in self.files]

    @property
    def num_tensors(self) -> int:
        return sum(self._counts)

    def _open(self, file: Path):
        from safetensors import safe_open

        try:
            return safe_open(str(file), framework="pt", device="cpu")
        except Exception as exc:
            raise _corrupt(file, exc) from exc

    def _keys(self, file: Path) -> list[str]:
        with self._open(file) as f:
            return list(f.keys())

    def tensors(self, only: Collection[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for file in self.files:
            self.current_file = str(file)
            with self._open(file) as f:
                for name in f.keys():
                    if only is not None and name not in only:
                        continue
                    if self.lazy:
                        yield name, SafetensorsSlice(f, name, file)
                        continue
                    try:
                        tensor = f.get_tensor(name)
                    except Exception as exc:
                        raise _corrupt(file, exc) from exc
                    yield name, tensor


class SafetensorsSlice:
    """A tensor of an open safetensors file, read (only the part asked for) on ``materialize``.

    Valid while the reader's iteration is on its file (the loader copies each tensor at once).
    """

    def __init__(self, handle, name: str, file: Path, bounds: tuple[slice, ...] | None = None) -> None:
        self.handle, self.name, self.file = handle, name, file
        self._slice = handle.get_slice(name)
        full = tuple(self._slice.get_shape())
        self.bounds = bounds or tuple(slice(0, n) for n in full)
        self.shape = tuple(b.stop - b.start for b in self.bounds)

    def narrow(self, dim: int, start: int, length: int) -> "SafetensorsSlice":
        dim = dim % len(self.shape)
        bounds = list(self.bounds)
        first = bounds[dim].start + start
        bounds[dim] = slice(first, first + length)
        return SafetensorsSlice(self.handle, self.name, self.file, tuple(bounds))

    def materialize(self) -> torch.Tensor:
        try:
            return self._slice[self.bounds] if self.shape else self.handle.get_tensor(self.name)
        except Exception as exc:
            raise _corrupt(self.file, exc) from exc


def _corrupt(file: Path, exc: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"Cannot read safetensors file {file}: {exc}. The file is corrupt or truncated "
        "(an interrupted download or copy?); copy it again."
    )
