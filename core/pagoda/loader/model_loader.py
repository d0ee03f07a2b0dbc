"""Build a model on its device and fill its weights (safetensors, GGUF or dummy), checked complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection, Iterator, Protocol

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext, CausalLM
from pagoda.loader.dummy import DUMMY_SEED, fill_dummy_weights
from pagoda.loader.source import ModelSource

LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
MAX_NAMES_SHOWN = 8


class CheckpointReader(Protocol):
    current_file: str | None  # the file being read (named in errors)
    location: str  # the checkpoint as a whole (its folder or its single file)
    num_tensors: int

    def tensors(self, only: Collection[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor of the checkpoint, or those named in ``only`` (the others are not read)."""
        ...


def resolve_load_format(source: ModelSource, load_format: str = "auto") -> str:
    """``auto`` -> ``gguf`` for a GGUF source, else ``safetensors``; checks explicit choices."""
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"Unknown load format '{load_format}'; choose one of {', '.join(LOAD_FORMATS)}.")
    if load_format == "auto":
        return "gguf" if source.is_gguf else "safetensors"
    if load_format == "gguf" and not source.is_gguf:
        raise ModelLoadError(f"--load-format gguf needs a .gguf file, but '{source.path}' is a folder of HF files.")
    if load_format == "safetensors" and source.is_gguf:
        raise ModelLoadError(f"--load-format safetensors needs a folder with config.json, not {source.gguf_path}.")
    return load_format


def load_model(
    source: ModelSource,
    hf_config: Any,
    ctx: BuildContext,
    model_cls: type[CausalLM],
    load_format: str = "auto",
    device: torch.device | str | None = None,
    progress: bool = True,
) -> CausalLM:
    """Build ``model_cls`` directly on ``device`` (no host copy), load weights, finalize layers."""
    fmt = resolve_load_format(source, load_format)
    device = torch.device(device or "cpu")
    with torch.device(device):
        model = model_cls(hf_config, ctx)
    with torch.no_grad():
        if fmt == "dummy":
            fill_dummy_weights(model, DUMMY_SEED + ctx.tp.rank + 1000 * ctx.pp.rank)
        else:  # tensor-parallel ranks read only their slices, pipeline stages only their layers (lazily, where the
            lazy = ctx.tp.size > 1 or ctx.pp.size > 1  # format allows)
            load_checkpoint(model, checkpoint_reader(source, fmt, hf_config, lazy=lazy), progress)
        process_weights_after_loading(model)
    return model.to(device).eval()


def checkpoint_reader(source: ModelSource, fmt: str, hf_config: Any, lazy: bool = False) -> CheckpointReader:
    if fmt == "gguf":
        from pagoda.loader.gguf_reader import GGUFReader

        return GGUFReader(source.gguf_path, hf_config)
    from pagoda.loader.safetensors_reader import SafetensorsReader

    return SafetensorsReader(Path(source.path), lazy=lazy)


def load_checkpoint(model: CausalLM, reader: CheckpointReader, progress: bool = True) -> set[str]:
    """Stream the reader's tensors into ``model``; raise ModelLoadError on any mismatch or gap."""
    from tqdm.auto import tqdm

    seen: set[str] = set()
    bar = tqdm(total=reader.num_tensors, desc="Loading weights", unit="tensor", disable=not progress)

    def stream() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in reader.tensors():
            seen.add(name)
            bar.update()
            yield name, tensor

    try:
        filled = model.load_weights(stream())
    except ModelLoadError as exc:
        raise ModelLoadError(f"{exc} (file: {reader.current_file})") from None
    finally:
        bar.close()
    check_complete(model, filled, seen, reader.location)
    return filled


def check_complete(model: nn.Module, filled: set[str], seen: set[str], where: str | None) -> None:
    """Every parameter must have been filled; name the checkpoint tensors that were absent."""
    missing = [name for name, _ in model.named_parameters() if name not in filled]
    if not missing:
        return
    expected = getattr(model, "checkpoint_names", lambda n: [n])
    absent = sorted({src for name in missing for src in expected(name) if src not in seen} or set(missing))
    more = len(absent) - MAX_NAMES_SHOWN
    shown = ", ".join(absent[:MAX_NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")
    raise ModelLoadError(
        f"The checkpoint ({where}) lacks {len(absent)} tensor(s) that {type(model).__name__} needs: {shown}. "
        "The files are incomplete or belong to another architecture/config."
    )


def process_weights_after_loading(model: nn.Module) -> None:
    """Let each linear layer's quantization method repack what was loaded."""
    for module in model.modules():
        hook = getattr(module, "process_weights_after_loading", None)
        if callable(hook) and module is not model:
            hook()
