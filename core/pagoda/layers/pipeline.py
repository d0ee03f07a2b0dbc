"""What a model builds of itself on one pipeline stage (docs/distributed.md, pipeline parallelism).

A stage builds only its own decoder layers; the others, and the embedding, final norm or LM head it does
not hold, become :class:`MissingLayer`s. They keep the module tree's names (``model.layers.7`` is still
layer 7, as the checkpoint names it), hold no parameters, and the weight loader skips the checkpoint
tensors under them (:func:`is_missing`).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from pagoda.interfaces.parallel import PipelineParallel


class MissingLayer(nn.Module):
    """A module another pipeline stage holds: no parameters, never called."""

    def forward(self, *args, **kwargs):
        raise RuntimeError("this layer lives on another pipeline stage; a stage runs only its own layers")


def stage_layers(num_layers: int, pp: PipelineParallel, build: Callable[[int], nn.Module]) -> nn.ModuleList:
    """``build(i)`` for each layer ``i`` of this stage, a :class:`MissingLayer` in place of the others."""
    own = pp.layers(num_layers)
    return nn.ModuleList(build(i) if i in own else MissingLayer() for i in range(num_layers))


def on_stage(keep: bool, build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` where this stage holds the module (``keep``), else a :class:`MissingLayer`."""
    return build() if keep else MissingLayer()


def missing_paths(model: nn.Module) -> frozenset[str]:
    """The module paths of ``model``'s missing layers."""
    return frozenset(path for path, module in model.named_modules() if isinstance(module, MissingLayer))


def is_missing(name: str, missing: frozenset[str]) -> bool:
    """Whether the tensor or module ``name`` lies under one of the ``missing`` paths."""
    if not missing:
        return False
    parts = name.split(".")
    return any(".".join(parts[:i]) in missing for i in range(1, len(parts)))
