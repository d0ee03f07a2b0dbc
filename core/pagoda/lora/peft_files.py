"""Reading a LoRA adapter as PEFT saves it: ``adapter_config.json`` + ``adapter_model.safetensors``.

The tensors are named ``base_model.model.<module>.lora_A.weight`` (``[r, in_features]``) and
``...lora_B.weight`` (``[out_features, r]``); each module adds ``scale * x A^T B^T`` to its output, with
``scale = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with ``use_rslora``). ``rank_pattern`` and
``alpha_pattern`` give single modules their own rank and alpha (matched as PEFT matches them: a key
equal to the module name or to a dotted suffix of it).

What Pagoda does not serve is refused with the reason and the fix: ``modules_to_save`` (whole trained
modules), DoRA, trained biases, embedding adapters, Conv1D (``fan_in_fan_out``) layouts, pickled
``adapter_model.bin`` files. Everything is read and checked before anything is kept: an adapter that
fails loads nothing.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pagoda.errors import RequestError
from pagoda.lora_request import LoRARequest

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
TENSOR_NAME = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>A|B)\.weight$")
UNSUPPORTED = {  # config key -> (its value when the feature is off, why it is refused)
    "use_dora": (False, "DoRA adapters (use_dora) are not supported; serve a plain LoRA adapter"),
    "lora_bias": (False, "adapters with trained LoRA biases (lora_bias) are not supported"),
    "fan_in_fan_out": (False, "Conv1D-style adapters (fan_in_fan_out) are not supported"),
}


class LoRAAdapterError(RequestError):
    """A LoRA adapter cannot be served (missing, corrupt, unsupported, or not for this model)."""


@dataclass
class LoRAModule:
    """One adapted module: ``a`` [r, in_features], ``b`` [out_features, r] and its scale."""

    a: torch.Tensor
    b: torch.Tensor
    scale: float

    @property
    def rank(self) -> int:
        return self.a.shape[0]


def read_peft_adapter(lora: LoRARequest, max_rank: int) -> dict[str, LoRAModule]:
    """The adapter's modules by name (``model.layers.0.self_attn.q_proj``), checked; LoRAAdapterError if not."""
    folder = Path(lora.lora_path)
    config = _read_config(lora, folder)
    tensors = _read_tensors(lora, folder)
    modules = _pair_tensors(lora, tensors)
    if not modules:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {folder / WEIGHTS_FILE} holds no lora_A/lora_B "
                               "tensors; save the adapter with peft's save_pretrained")
    return {name: _module(lora, config, name, a, b, max_rank) for name, (a, b) in modules.items()}


def _read_config(lora: LoRARequest, folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: no folder {folder}; give the folder peft's "
                               "save_pretrained wrote (adapter_config.json, adapter_model.safetensors)")
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {folder} has no {CONFIG_FILE}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {path} is not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {path} is not a JSON object")
    _check_config(lora, config)
    return config


def _check_config(lora: LoRARequest, config: dict[str, Any]) -> None:
    def refuse(why: str) -> None:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {why}")

    if config.get("peft_type", "LORA") != "LORA":
        refuse(f"peft_type is {config['peft_type']!r}; only LORA adapters are served")
    if config.get("modules_to_save"):
        refuse(f"it saves whole modules (modules_to_save: {config['modules_to_save']}), which Pagoda does not "
               "serve; train without modules_to_save, or merge the adapter into the base model")
    for key, (off, why) in UNSUPPORTED.items():
        if config.get(key, off) not in (off, None):
            refuse(why)
    if config.get("bias", "none") != "none":
        refuse(f"it trains biases (bias: {config['bias']!r}); only bias 'none' is served")
    for key in ("target_parameters", "trainable_token_indices", "layer_replication"):
        if config.get(key):
            refuse(f"{key} is not supported")


def _read_tensors(lora: LoRARequest, folder: Path) -> dict[str, torch.Tensor]:
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        pickled = " (it has adapter_model.bin: re-save with safe_serialization=True)" \
            if (folder / "adapter_model.bin").is_file() else ""
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {folder} has no {WEIGHTS_FILE}{pickled}")
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure to parse the file is a corrupt adapter
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: {path} is not a readable safetensors file "
                               f"({type(exc).__name__}: {exc}); save it again") from None


def _pair_tensors(lora: LoRARequest, tensors: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    found: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        match = TENSOR_NAME.match(name)
        if match is None:
            raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: unexpected tensor {name!r} ({_why(name)})")
        found.setdefault(match["module"], {})[match["which"]] = tensor
    pairs = {}
    for module, parts in found.items():
        if set(parts) != {"A", "B"}:
            missing = "lora_B" if "A" in parts else "lora_A"
            raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: module {module!r} has no {missing} tensor; "
                                   "the file is incomplete, save it again")
        pairs[module] = (parts["A"], parts["B"])
    return pairs


def _why(name: str) -> str:
    if "lora_embedding" in name:
        return "adapters on embeddings are not supported"
    if "lora_magnitude_vector" in name:
        return "DoRA adapters are not supported"
    return "Pagoda serves lora_A/lora_B weights only"


def _module(lora: LoRARequest, config: dict[str, Any], name: str, a: torch.Tensor, b: torch.Tensor,
            max_rank: int) -> LoRAModule:
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: module {name!r} has lora_A {tuple(a.shape)} and "
                               f"lora_B {tuple(b.shape)}, which do not chain ([r, in] and [out, r]); save it again")
    rank = int(_pattern(config.get("rank_pattern"), name, config.get("r", 8)))
    if a.shape[0] != rank:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: module {name!r} has rank {a.shape[0]}, but its "
                               f"config says {rank}; the config does not belong to these weights")
    if rank > max_rank:
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: module {name!r} has rank {rank}, above "
                               f"max_lora_rank {max_rank}; start the engine with --max-lora-rank {rank} or more")
    alpha = float(_pattern(config.get("alpha_pattern"), name, config.get("lora_alpha", 8)))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    return LoRAModule(a, b, scale)


def _pattern(patterns: dict[str, Any] | None, name: str, default: Any) -> Any:
    """PEFT's per-module override: the first key equal to ``name`` or to a dotted suffix of it."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", name):
            return value
    return default
