"""EAGLE draft heads (Li et al., 2024): the published checkpoint format and the head's forward pass.

An EAGLE-1/EAGLE-2 head is a folder with ``config.json`` (a LlamaConfig, ``num_hidden_layers``
usually 1) and ``model.safetensors`` or ``pytorch_model.bin`` holding::

    fc.weight [H, 2H], fc.bias [H] (optional)       input fusion: fc(concat(embed(token), hidden))
    layers.{i}.self_attn.{q,k,v,o}_proj.weight       (biases where the checkpoint has them)
    layers.{i}.mlp.{gate,up,down}_proj.weight
    layers.{i}.post_attention_layernorm.weight
    layers.{i}.input_layernorm.weight                for i >= 1 only: layer 0 has none
    embed_tokens.weight                              optional, ignored: the target's embedding is used

The head has no embedding, final norm or LM head of its own: it embeds with the target's
embedding, and the target's LM head turns its output (a predicted target hidden state, the one
after the target's final norm) into draft logits. Head position ``p`` takes the target's hidden
state at position ``p`` and the token at ``p + 1``, and predicts the target's hidden state at
``p + 1``; it attends over its own keys and values (:class:`HeadCache`, per request).

EAGLE-3 heads (``midlayer.*``, an fc over three target layers, their own vocabulary ``d2t``/``t2d``
and LM head) are recognised and refused with a clear error: they need the target's intermediate
layers, which Pagoda's runner does not return.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from pagoda.errors import ConfigError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
EAGLE3_MARKERS = ("midlayer.", "d2t", "t2d", "lm_head.", "norm.")
LAYER_PARTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


@dataclass
class HeadCheckpoint:
    """A loaded head: its config (a transformers config) and its tensors, names normalised."""

    path: Path
    config: Any
    weights: dict[str, torch.Tensor]

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)


# -- loading ----------------------------------------------------------------------------------
def load_head_checkpoint(path: str) -> HeadCheckpoint:
    """Read ``config.json`` and the weights of the head folder ``path``; ConfigError naming what is missing."""
    folder = Path(path).expanduser()
    example = '{"method": "eagle", "model": "/models/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 4}'
    if not folder.is_dir():
        raise ConfigError(f"the EAGLE head folder {folder} does not exist: set \"model\" to the local folder of an "
                          "EAGLE head checkpoint (config.json + model.safetensors or pytorch_model.bin), "
                          f"e.g. {example}")
    if not (folder / "config.json").is_file():
        raise ConfigError(f"the EAGLE head folder {folder} has no config.json: copy the head's config.json next to "
                          "its weights (an EAGLE head checkpoint is config.json + model.safetensors or "
                          "pytorch_model.bin)")
    config = _read_config(folder)
    weights = _strip_prefix(_read_weights(folder))
    ckpt = HeadCheckpoint(folder, config, weights)
    _check_format(ckpt)
    return ckpt


def _read_config(folder: Path) -> Any:
    from transformers import LlamaConfig

    try:
        raw = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {folder / 'config.json'}: {exc}; copy the head's config.json again") from None
    if not isinstance(raw, dict) or "hidden_size" not in raw:
        raise ConfigError(f"{folder / 'config.json'} is not an EAGLE head config (no hidden_size); an EAGLE head's "
                          "config.json is a LlamaConfig of its decoder layer(s)")
    raw = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "transformers_version")}
    return LlamaConfig(**raw)


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        out: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                out.update(load_file(str(file), device="cpu"))
            except Exception as exc:  # safetensors raises its own error types
                raise ConfigError(f"cannot read {file}: {exc}; the file is corrupt or truncated, "
                                  "copy it again") from None
        return out
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if bins:
        out = {}
        for file in bins:
            try:
                out.update(torch.load(str(file), map_location="cpu", weights_only=True))
            except Exception as exc:  # pickle/zip errors
                raise ConfigError(f"cannot read {file}: {exc}; the file is corrupt or truncated, "
                                  "copy it again") from None
        return out
    raise ConfigError(f"the EAGLE head folder {folder} has no weights: it needs model.safetensors (or "
                      "pytorch_model.bin) with fc.weight and layers.0.*, next to config.json")


def _strip_prefix(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Some conversions store the head under ``model.``: drop that prefix."""
    if weights and all(name.startswith("model.") for name in weights):
        return {name[len("model."):]: t for name, t in weights.items()}
    return weights


def _check_format(ckpt: HeadCheckpoint) -> None:
    names, where = set(ckpt.weights), ckpt.path
    h = ckpt.hidden_size
    fc = ckpt.weights.get("fc.weight")
    if any(n.startswith(EAGLE3_MARKERS) for n in names) or (fc is not None and fc.shape[-1] == 3 * h):
        raise ConfigError(f"{where} is an EAGLE-3 head (midlayer / d2t / its own lm_head, fc over three target "
                          "layers): Pagoda's eagle proposer loads EAGLE-1/EAGLE-2 heads (fc over [embedding, hidden], "
                          "target's LM head); use an EAGLE-1/2 head for this target, or the draft/ngram proposer")
    if fc is None:
        raise ConfigError(f"{where} has no fc.weight: not an EAGLE head checkpoint (expected fc.weight [H, 2H] and "
                          f"layers.0.*; found {', '.join(sorted(names)[:6]) or 'no tensors'})")
    if tuple(fc.shape) != (h, 2 * h):
        raise ConfigError(f"{where}: fc.weight has shape {tuple(fc.shape)}, an EAGLE-1/2 head needs [{h}, {2 * h}] "
                          f"(hidden_size {h} in its config.json); this head format is not supported")
    n = int(ckpt.config.num_hidden_layers)
    expected = {"fc.weight"} | {f"layers.{i}.{part}.weight" for i in range(n) for part in LAYER_PARTS}
    expected |= {f"layers.{i}.post_attention_layernorm.weight" for i in range(n)}
    expected |= {f"layers.{i}.input_layernorm.weight" for i in range(1, n)}
    missing = sorted(expected - names)
    if missing:
        raise ConfigError(f"{where} lacks {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''} for the "
                          f"{n} decoder layer(s) its config.json declares; the checkpoint is incomplete or not an "
                          "EAGLE-1/2 head")
    optional = {"fc.bias", "embed_tokens.weight", "layers.0.input_layernorm.weight"}
    optional |= {f"layers.{i}.{part}.bias" for i in range(n) for part in LAYER_PARTS}
    unknown = sorted(names - expected - optional)
    if unknown:
        raise ConfigError(f"{where} has tensors an EAGLE-1/2 head does not: {', '.join(unknown[:6])}; this head "
                          "format is not supported (Pagoda loads fc + Llama decoder layers over the target's "
                          "embedding and LM head)")


def check_head_fits_target(ckpt: HeadCheckpoint, target_config: Any) -> None:
    """The head must have been trained for this target: same hidden size and vocabulary."""
    target_h = int(target_config.hidden_size)
    if ckpt.hidden_size != target_h:
        raise ConfigError(f"the EAGLE head {ckpt.path} has hidden_size {ckpt.hidden_size} but the target model's is "
                          f"{target_h}: a head only works with the model it was trained on; use the EAGLE head "
                          "published for this target")
    head_vocab, target_vocab = getattr(ckpt.config, "vocab_size", None), int(target_config.vocab_size)
    if head_vocab is not None and int(head_vocab) != target_vocab:
        raise ConfigError(f"the EAGLE head {ckpt.path} was trained for a vocabulary of {head_vocab} tokens and the "
                          f"target has {target_vocab}: use the EAGLE head published for this target")


# -- the per-request cache ---------------------------------------------------------------------
@dataclass
class HeadCache:
    """One request's keys and values in the head, per layer, in position order (contiguous, grown
    by doubling). ``positions[j]`` is entry ``j``'s position (a prefix the target took from its
    prefix cache has no hidden states, so the head may start later than position 0)."""

    keys: list[torch.Tensor] = field(default_factory=list)  # per layer [capacity, kv_heads, head_dim]
    values: list[torch.Tensor] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.positions)

    def truncate(self, length: int) -> None:
        del self.positions[length:]

    def truncate_from_position(self, position: int) -> None:
        """Drop the entries at ``position`` and after."""
        self.truncate(bisect.bisect_left(self.positions, position))

    def reserve(self, extra: int, num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                device: torch.device) -> None:
        need = self.length + extra
        capacity = self.keys[0].shape[0] if self.keys else 0
        if need <= capacity:
            return
        new = max(need, 2 * capacity, 16)
        for store in (self.keys, self.values):
            for layer in range(num_layers):
                grown = torch.empty((new, kv_heads, head_dim), dtype=dtype, device=device)
                if layer < len(store):
                    grown[: self.length] = store[layer][: self.length]
                    store[layer] = grown
                else:
                    store.append(grown)


# -- the head ----------------------------------------------------------------------------------
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    y = x.to(compute)
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


class HeadLayer(nn.Module):
    """A Llama decoder layer of the head; layer 0 takes the fc output without a norm (EAGLE-1)."""

    def __init__(self, config: Any, index: int, weights: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        self.heads, self.kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads or
                                                                          config.num_attention_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.eps = float(config.rms_norm_eps)
        prefix = f"layers.{index}."

        def param(name: str) -> nn.Parameter | None:
            t = weights.get(prefix + name)
            return None if t is None else nn.Parameter(t.to(device=device, dtype=dtype), requires_grad=False)

        for part in LAYER_PARTS:
            attr = part.split(".")[1]
            setattr(self, attr, param(part + ".weight"))
            setattr(self, attr + "_bias", param(part + ".bias"))
        self.input_norm = param("input_layernorm.weight") if index > 0 else None  # EAGLE-1: none on layer 0
        self.post_norm = param("post_attention_layernorm.weight")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                spans: list[tuple[HeadCache, int]], layer: int) -> torch.Tensor:
        h = x if self.input_norm is None else _rms_norm(x, self.input_norm, self.eps)
        x = x + self._attention(h, cos, sin, spans, layer)
        h = _rms_norm(x, self.post_norm, self.eps)
        gate = F.linear(h, self.gate_proj, self.gate_proj_bias)
        up = F.linear(h, self.up_proj, self.up_proj_bias)
        return x + F.linear(F.silu(gate) * up, self.down_proj, self.down_proj_bias)

    def _attention(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   spans: list[tuple[HeadCache, int]], layer: int) -> torch.Tensor:
        t, d = h.shape[0], self.head_dim
        q = _rotate(F.linear(h, self.q_proj, self.q_proj_bias).view(t, self.heads, d), cos, sin)
        k = _rotate(F.linear(h, self.k_proj, self.k_proj_bias).view(t, self.kv_heads, d), cos, sin)
        v = F.linear(h, self.v_proj, self.v_proj_bias).view(t, self.kv_heads, d)
        out = torch.empty_like(q)  # [T, heads, d]
        start, group = 0, self.heads // self.kv_heads
        for cache, n in spans:  # each request: its new rows attend to its cache and to each other causally
            old = cache.length
            cache.keys[layer][old : old + n] = k[start : start + n]
            cache.values[layer][old : old + n] = v[start : start + n]
            keys = cache.keys[layer][: old + n].transpose(0, 1).repeat_interleave(group, 0)  # [heads, L, d]
            values = cache.values[layer][: old + n].transpose(0, 1).repeat_interleave(group, 0)
            query = q[start : start + n].transpose(0, 1)  # [heads, n, d]
            mask = None
            if n > 1:  # query j sees the cache and new rows 0..j
                mask = torch.ones((n, old + n), dtype=torch.bool, device=h.device).tril(old)
            out[start : start + n] = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask).transpose(0, 1)
            start += n
        return F.linear(out.reshape(t, self.heads * d), self.o_proj, self.o_proj_bias)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, halves rotated (Llama): ``x`` [T, heads, d], ``cos``/``sin`` [T, rotary_dim / 2]."""
    half = cos.shape[-1]
    y = x.to(cos.dtype)
    x1, x2, rest = y[..., :half], y[..., half : 2 * half], y[..., 2 * half :]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s, rest), dim=-1).to(x.dtype)


def _rope_tables(rope: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_position, rotary_dim / 2], computed in float64 on the host."""
    from pagoda.layers.rotary import inverse_frequencies

    if rope.rope_type == "default":
        exponents = torch.arange(0, rope.rotary_dim, 2, dtype=torch.float64) / rope.rotary_dim
        inv_freq = 1.0 / rope.theta**exponents
    else:
        inv_freq = inverse_frequencies(rope).double()
    angles = torch.arange(rope.max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


class EagleHead(nn.Module):
    """fc over ``[embedding, hidden]``, then the decoder layer(s); no final norm (EAGLE-1/2)."""

    def __init__(self, ckpt: HeadCheckpoint, dtype: torch.dtype, device: torch.device, max_positions: int) -> None:
        super().__init__()
        from pagoda.layers.rotary import rope_config_from_hf

        config, weights = ckpt.config, ckpt.weights
        self.dtype, self.device = dtype, device
        self.fc_weight = nn.Parameter(weights["fc.weight"].to(device=device, dtype=dtype), requires_grad=False)
        bias = weights.get("fc.bias")
        self.fc_bias = None if bias is None else nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
        n = int(config.num_hidden_layers)
        self.layers = nn.ModuleList(HeadLayer(config, i, weights, dtype, device) for i in range(n))
        first = self.layers[0]
        self.kv_heads, self.head_dim = first.kv_heads, first.head_dim
        rope = rope_config_from_hf(config, first.head_dim)
        if rope.rope_type == "longrope" or not rope.is_neox:
            raise ConfigError(f"the EAGLE head {ckpt.path} uses rope type {rope.rope_type!r}, which the eagle "
                              "proposer does not support (default, linear and llama3 are)")
        rope = dataclasses.replace(rope, max_position=max(rope.max_position, max_positions))
        cos, sin = _rope_tables(rope)
        table = torch.float64 if dtype == torch.float64 else torch.float32  # rotations in float32 (as the target's)
        self.register_buffer("cos", cos.to(device=device, dtype=table), persistent=False)  # [positions, rotary_dim / 2]
        self.register_buffer("sin", sin.to(device=device, dtype=table), persistent=False)

    def new_cache(self) -> HeadCache:
        return HeadCache()

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: list[int],
                spans: list[tuple[HeadCache, int]]) -> torch.Tensor:
        """``embeds``, ``hidden`` [T, H] (the target's embedding of token ``p + 1`` and its hidden state
        at ``p``), ``positions`` (T of them); rows packed by request, ``spans`` = (its cache, its row
        count). Appends the rows' keys and values to the caches; returns the predicted hidden states [T, H]."""
        x = F.linear(torch.cat((embeds.to(self.dtype), hidden.to(self.dtype)), dim=-1), self.fc_weight, self.fc_bias)
        for cache, n in spans:
            cache.reserve(n, len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)
        index = torch.tensor(positions, dtype=torch.long).to(self.cos.device, non_blocking=True)
        cos, sin = self.cos[index], self.sin[index]  # [T, rotary_dim / 2]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, spans, i)
        start = 0
        for cache, n in spans:
            cache.positions.extend(positions[start : start + n])
            start += n
        return x


def weight_names(num_layers: int = 1, bias: bool = True) -> list[str]:
    """The tensor names of an EAGLE-1 head (documentation and tests)."""
    names = ["fc.weight"] + (["fc.bias"] if bias else [])
    for i in range(num_layers):
        names += [f"layers.{i}.{part}.weight" for part in LAYER_PARTS]
        names += [f"layers.{i}.post_attention_layernorm.weight"] + ([f"layers.{i}.input_layernorm.weight"] if i else [])
    return names


