"""``--kv-transfer-config`` (vLLM's JSON) and ``--kv-offload-gib``: which KV connector an engine runs with.

A KV connector keeps KV cache blocks beyond the device's prefix cache (host memory, disk, another
engine) and hands them back to prompts that start with them (docs/kv_offload.md). ``--kv-offload-gib N``
is the built-in ``offload`` connector (``--kv-offload-dir`` adds its disk tier); ``--kv-transfer-config``
names any registered connector, as in ``{"kv_connector": "shared_storage", "kv_role": "kv_producer",
"kv_connector_extra_config": {"path": "/mnt/kv"}}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pagoda.errors import ConfigError
from pagoda.speculative_config import json_object

ROLES = ("kv_producer", "kv_consumer", "kv_both")  # saves blocks, loads blocks, or both
OFFLOAD = "offload"  # the built-in host-memory (and disk) tier that --kv-offload-gib turns on
_KEYS = ("kv_connector", "kv_role", "kv_connector_extra_config")


@dataclass(frozen=True)
class KVTransferConfig:
    """A connector by registered name, its role, and its own options."""

    kv_connector: str
    kv_role: str = "kv_both"
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)

    @property
    def saves(self) -> bool:
        """Whether the engine offers the connector the blocks it computes (producer or both)."""
        return self.kv_role != "kv_consumer"

    @property
    def loads(self) -> bool:
        """Whether the engine asks the connector for prompt blocks (consumer or both)."""
        return self.kv_role != "kv_producer"

    def option(self, name: str, default: Any = None) -> Any:
        """One of ``kv_connector_extra_config``'s options."""
        return self.kv_connector_extra_config.get(name, default)


def parse_kv_transfer_config(value: str | dict[str, Any] | None) -> KVTransferConfig | None:
    """A JSON object (or dict) -> :class:`KVTransferConfig`; ConfigError naming what is wrong."""
    if value is None or value == "":
        return None
    raw = json_object(value, "--kv-transfer-config")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ConfigError(f"--kv-transfer-config: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
                          f"{', '.join(_KEYS)} (a connector's own options go in kv_connector_extra_config)")
    name = raw.get("kv_connector")
    if not isinstance(name, str) or not name:
        raise ConfigError('--kv-transfer-config needs "kv_connector", a registered connector name, e.g. '
                          '\'{"kv_connector": "shared_storage", "kv_role": "kv_both"}\' (`pagoda plugins` lists them)')
    role = raw.get("kv_role", "kv_both")
    if role not in ROLES:
        raise ConfigError(f"--kv-transfer-config: kv_role must be one of {', '.join(ROLES)}, got {role!r}")
    extra = raw.get("kv_connector_extra_config", {})
    if not isinstance(extra, dict):
        raise ConfigError(f"--kv-transfer-config: kv_connector_extra_config must be a JSON object, got {extra!r}")
    return KVTransferConfig(name, role, dict(extra))


def engine_kv_transfer(kv_transfer_config: str | dict[str, Any] | None, kv_offload_gib: float,
                       kv_offload_dir: str | None) -> KVTransferConfig | None:
    """The connector an engine runs with: ``--kv-transfer-config``'s, or the ``offload`` connector that
    ``--kv-offload-gib`` (and ``--kv-offload-dir``) describe, or None."""
    if not isinstance(kv_offload_gib, (int, float)) or isinstance(kv_offload_gib, bool) or kv_offload_gib < 0:
        raise ConfigError(f"kv_offload_gib must be a number of GiB >= 0, got {kv_offload_gib!r}")
    if kv_offload_dir is not None and not kv_offload_gib:
        raise ConfigError("--kv-offload-dir is the disk tier behind the host-memory tier; set --kv-offload-gib too "
                          "(e.g. --kv-offload-gib 16)")
    explicit = parse_kv_transfer_config(kv_transfer_config)
    if explicit is not None and kv_offload_gib:
        raise ConfigError("--kv-offload-gib and --kv-transfer-config each choose a KV connector; keep one (the offload "
                          'connector through the JSON: \'{"kv_connector": "offload", "kv_connector_extra_config": '
                          '{"cpu_gib": 16}}\')')
    if explicit is not None or not kv_offload_gib:
        return explicit
    extra: dict[str, Any] = {"cpu_gib": float(kv_offload_gib)}
    if kv_offload_dir is not None:
        extra["disk_dir"] = kv_offload_dir
    return KVTransferConfig(OFFLOAD, "kv_both", extra)
