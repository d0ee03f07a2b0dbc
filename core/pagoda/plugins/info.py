"""What ``pagoda plugins`` shows for one plugin, and the comma-separated name lists of the switches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class PluginInfo:
    """One plugin: where it comes from, whether it loaded, what it registers.

    ``errors`` say why a ``failed`` plugin registers nothing; ``notes`` tell about single
    registrations: a name refused (it belongs to another plugin) or one allowed to replace another.
    """

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: str = "loaded"  # loaded | disabled | failed
    errors: list[str] = field(default_factory=list)
    registers: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "builtin": self.builtin,
            "status": self.status,
            "registers": self.registers,
            "errors": self.errors,
            "notes": self.notes,
        }

    def describe(self) -> str:
        """``plugin 'fake-attention' (pagoda-fake-attention 0.1.0)``: how messages name it."""
        if self.builtin:
            return "Pagoda's built-ins"
        source = " ".join(part for part in (self.distribution, self.version) if part) or self.module
        return f"plugin '{self.name}' ({source})"


def parse_names(value: str | Iterable[str] | None) -> set[str] | None:
    """``"a,b"`` or ``["a", "b"]`` -> ``{"a", "b"}``; ``None``/empty -> ``None`` (no list)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {item.strip() for item in items if item.strip()}
    return names or None
