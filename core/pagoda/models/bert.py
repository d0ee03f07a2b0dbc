"""BERT-family encoders for pooling: ``BertModel`` (embeddings, e.g. all-MiniLM-L6-v2) and
``BertForSequenceClassification`` (cross-encoders that score a text pair).

Post-LayerNorm blocks of bidirectional multi-head attention and a GELU MLP; absolute position
and token-type (segment) embeddings. Tokens of all sequences are packed (no batch axis); each
prompt runs whole in one step (the attention backend is built with ``causal=False``). Module
paths mirror HF's, so checkpoint names map one to one (q/k/v are fused into ``qkv_proj``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext, ForwardContext, PoolingModel
from pagoda.layers.attention import Attention
from pagoda.layers.embedding import VocabEmbedding
from pagoda.layers.layer_norm import LayerNorm
from pagoda.layers.linear import Linear, QKVLinear
from pagoda.models import spec
from pagoda.models.weights import Stacked, WeightMapper

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,  # exact (erf), as HF's "gelu"
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}
# checkpoint fragments that carry nothing to load: buffers, and heads a BertModel does not have
SKIPPED = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.", "rotary_emb")


def activation(cfg: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    name = getattr(cfg, "hidden_act", "gelu")
    if name not in ACTIVATIONS:
        raise ModelLoadError(f"hidden_act '{name}' in config.json is not supported by Pagoda's BERT "
                             f"(supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class BertEmbeddings(nn.Module):
    """word + absolute position + token type embeddings, then LayerNorm."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        kind = getattr(cfg, "position_embedding_type", "absolute") or "absolute"
        if kind != "absolute":
            raise ModelLoadError(f"position_embedding_type '{kind}' is not supported (only 'absolute')")
        h, dt = cfg.hidden_size, ctx.dtype
        self.word_embeddings = VocabEmbedding(cfg.vocab_size, h, dt)
        self.position_embeddings = VocabEmbedding(cfg.max_position_embeddings, h, dt)
        self.token_type_embeddings = VocabEmbedding(max(1, getattr(cfg, "type_vocab_size", 2)), h, dt)
        self.LayerNorm = LayerNorm(h, cfg.layer_norm_eps, dt)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                token_type_ids: torch.Tensor | None) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # [T, hidden]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext) -> None:
        super().__init__()
        d, heads = spec.head_dim(cfg), int(cfg.num_attention_heads)
        self.qkv_proj = QKVLinear(cfg.hidden_size, d, heads, heads, bias=True, quant_method=ctx.quant_method,
                                  dtype=ctx.dtype)
        self.attn = Attention(layer_idx, heads, heads, d, ctx.attention)

    def forward(self, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))  # [T, heads * d] each
        return self.attn(q, k, v, fwd)  # [T, heads * d]


class BertOutput(nn.Module):
    """``LayerNorm(residual + dense(x))``: the output of the attention and of the MLP."""

    def __init__(self, in_features: int, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.dense = Linear(in_features, cfg.hidden_size, bias=True, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, ctx.dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x), residual)


class BertAttention(nn.Module):
    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg, layer_idx, ctx)
        self.output = BertOutput(cfg.hidden_size, cfg, ctx)

    def forward(self, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        return self.output(self.self(x, fwd), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.intermediate_size, bias=True, quant_method=ctx.quant_method,
                            dtype=ctx.dtype)
        self.act = activation(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))  # [T, intermediate]


class BertLayer(nn.Module):
    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext) -> None:
        super().__init__()
        self.attention = BertAttention(cfg, layer_idx, ctx)
        self.intermediate = BertIntermediate(cfg, ctx)
        self.output = BertOutput(cfg.intermediate_size, cfg, ctx)

    def forward(self, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        x = self.attention(x, fwd)
        return self.output(self.intermediate(x), x)  # [T, hidden]


class BertEncoder(nn.Module):
    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg, i, ctx) for i in range(spec.num_kv_cache_layers(cfg)))

    def forward(self, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, fwd)
        return x


class BertPooler(nn.Module):
    """``tanh(dense(cls))``: the pooled output a classification head reads."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size, bias=True, quant_method=ctx.quant_method,
                            dtype=ctx.dtype)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(cls))


class BertModel(PoolingModel):
    """The BERT encoder; returns the last layer's hidden states (pooled by the runner)."""

    stacked: ClassVar[Stacked] = {"query": ("qkv_proj", "q"), "key": ("qkv_proj", "k"), "value": ("qkv_proj", "v")}
    default_pooling_type: ClassVar[str] = "CLS"

    def __init__(self, hf_config: Any, ctx: BuildContext, with_pooler: bool = False) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        self.embeddings = BertEmbeddings(hf_config, ctx)
        self.encoder = BertEncoder(hf_config, ctx)
        self.pooler = BertPooler(hf_config, ctx) if with_pooler else None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions, fwd.token_type_ids), fwd)  # [T, hidden]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        skip = SKIPPED if self.pooler is not None else (*SKIPPED, "pooler.")
        renamed = ((_hf_name(name).removeprefix("bert."), tensor) for name, tensor in weights)
        return WeightMapper(self, self.stacked, skip=skip).load(renamed)

    def checkpoint_names(self, param_name: str) -> list[str]:
        return WeightMapper(self, self.stacked).checkpoint_names(param_name)


class BertForSequenceClassification(PoolingModel):
    """BERT + the pooler (tanh dense on [CLS]) + a linear classifier: label logits per sequence."""

    default_pooling_type: ClassVar[str] = "CLS"
    is_classifier: ClassVar[bool] = True

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        self.num_labels = int(getattr(hf_config, "num_labels", 2))
        self.bert = BertModel(hf_config, ctx, with_pooler=True)
        self.classifier = Linear(hf_config.hidden_size, self.num_labels, bias=True, quant_method=ctx.quant_method,
                                 dtype=ctx.dtype)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        return self.bert(input_ids, positions, fwd)

    def pooled_head(self, pooled: torch.Tensor) -> torch.Tensor:
        """[n, hidden] [CLS] states -> [n, num_labels] logits."""
        return self.classifier(self.bert.pooler(pooled.to(self.classifier.bias.dtype)))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        mapper = WeightMapper(self, BertModel.stacked, skip=SKIPPED)
        return mapper.load((_prefixed(_hf_name(name)), tensor) for name, tensor in weights)

    def checkpoint_names(self, param_name: str) -> list[str]:
        return WeightMapper(self, BertModel.stacked).checkpoint_names(param_name)


def _hf_name(name: str) -> str:
    """Old TF-converted checkpoints name LayerNorm parameters gamma/beta."""
    if name.endswith(".gamma"):
        return name[: -len("gamma")] + "weight"
    if name.endswith(".beta"):
        return name[: -len("beta")] + "bias"
    return name


def _prefixed(name: str) -> str:
    """A classifier checkpoint names the encoder ``bert.``; the head stays at the top."""
    if name.startswith(("bert.", "classifier.")):
        return name
    return f"bert.{name}"
