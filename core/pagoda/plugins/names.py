"""Who may register a name: the first plugin that registers it keeps it; the built-ins' names and
the first-party plugins' names (the catalog) belong to them. Another plugin's registration of a
taken name is refused, unless the user allows that name to be replaced
(``--allow-plugin-overrides NAME`` or ``KIND:NAME``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pagoda import envs
from pagoda.plugins.catalog import FIRST_PARTY, KINDS, distribution_of, plugin_name_of
from pagoda.plugins.info import PluginInfo, parse_names

OVERRIDES_FLAG = "--allow-plugin-overrides"
SWITCHES = f"{OVERRIDES_FLAG} / {envs.ALLOW_PLUGIN_OVERRIDES.name}"


@dataclass(frozen=True)
class Overrides:
    """The names the user allows a plugin to take over: ``{"fcfs", "attention:triton"}``."""

    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: str | Iterable[str] | None) -> "Overrides":
        names = parse_names(value) or set()
        for item in names:
            kind, _, name = item.rpartition(":")
            if kind and kind not in KINDS:
                raise ValueError(
                    f"{SWITCHES}: unknown kind '{kind}' in '{item}'; give NAME or KIND:NAME with KIND one of "
                    f"{', '.join(KINDS)}"
                )
            if not name:
                raise ValueError(f"{SWITCHES}: '{item}' names no registration; give NAME or KIND:NAME")
        return cls(frozenset(names))

    def allows(self, key: str, name: str) -> bool:
        return name in self.names or f"{key}:{name}" in self.names

    def __str__(self) -> str:
        return ",".join(sorted(self.names))


def first_party_owner(key: str, name: str) -> str | None:
    """The distribution a catalogued name belongs to (``pagoda-attention-triton``), else ``None``."""
    folder = FIRST_PARTY.get((key, name))
    return distribution_of(folder) if folder else None


def is_first_party(info: PluginInfo) -> bool:
    """Whether ``info`` is one of the catalogue's distributions (by distribution or entry-point name)."""
    names = {distribution_of(folder) for folder in FIRST_PARTY.values()}
    return info.distribution in names or info.name in {plugin_name_of(d) for d in names}


def owns(info: PluginInfo, distribution: str) -> bool:
    return info.distribution == distribution or info.name == plugin_name_of(distribution)


def refusal(label: str, name: str, key: str, newcomer: PluginInfo, holder: str) -> str:
    """The note of a refused registration: whose name it is and how to allow the replacement."""
    return (f"{label} '{name}' not registered: the name belongs to {holder}; to let {newcomer.describe()} "
            f"replace it, pass {OVERRIDES_FLAG} {key}:{name}")
