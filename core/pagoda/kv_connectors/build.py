"""A rank's KV connector step feature, from the engine's config (:mod:`pagoda.executor.features`).

The feature is made with the model, before the rank's runner exists, and binds to the runner (its KV cache
tensors, attention backend and tensor-parallel rank) when first needed: rank 0's engine binds it at start
(the scheduler asks its connector), the other ranks at their first step.
"""

from __future__ import annotations

import torch

from pagoda.config import EngineConfig
from pagoda.errors import ConfigError
from pagoda.interfaces.kv_connector import KVConnectorContext
from pagoda.interfaces.platform import Platform
from pagoda.kv_connectors.layout import block_axis, cache_layout
from pagoda.kv_connectors.mover import BlockMover
from pagoda.kv_connectors.step import SAVE_BUFFER_BYTES, KVTransferStep, Parts
from pagoda.kv_transfer_config import KVTransferConfig, engine_kv_transfer
from pagoda.plugins import get_plugin_manager

MAX_SAVE_BUFFERS = 4096


def kv_transfer_step(config: EngineConfig, model: torch.nn.Module, platform: Platform) -> KVTransferStep | None:
    """The feature moving this rank's blocks for the engine's KV connector, or None without one."""
    transfer = engine_kv_transfer(config.kv_transfer_config, config.kv_offload_gib, config.kv_offload_dir)
    if transfer is None:
        return None
    registry = get_plugin_manager().registry("kv_connector")
    name, cls = registry.select(transfer.kv_connector)
    if transfer.kv_role not in cls.roles:
        raise ConfigError(f"KV connector '{name}' serves kv_role {', '.join(cls.roles)}, not {transfer.kv_role}; "
                          "change kv_role in --kv-transfer-config")
    return KVTransferStep(lambda runner: _parts(config, transfer, name, model, platform, runner))


def _parts(config: EngineConfig, transfer: KVTransferConfig, name: str, model: torch.nn.Module, platform: Platform,
           runner) -> Parts:
    """The connector (built by its registry: errors name the plugin), the block mover and the save buffers."""
    tp = runner.tp
    layout = cache_layout(config, runner.attention, runner.kv_caches, model, tp.rank, tp.size)

    def host_blocks(n: int) -> torch.Tensor:
        return platform.host_buffer(n * layout.block_bytes).view(layout.dtype).view(n, *layout.block_shape)

    context = KVConnectorContext(transfer, layout, host_blocks, answers_scheduler=tp.rank == 0)
    connector = get_plugin_manager().registry("kv_connector").create(name, context)
    mover = BlockMover(runner.kv_caches, block_axis(runner.attention), layout, platform)
    num_buffers = min(MAX_SAVE_BUFFERS, max(2 * mover.chunk, SAVE_BUFFER_BYTES // layout.block_bytes))
    return Parts(connector, mover, host_blocks(num_buffers))
