"""The installed entry points of the ``pagoda.plugins`` group, each with its distribution, oldest
install first (so that of two distributions using one entry-point name, the later one is the
newcomer)."""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass

from pagoda import hookspecs


@dataclass(frozen=True)
class Found:
    """One entry point, identified by (distribution, name)."""

    entry_point: md.EntryPoint
    distribution: str | None
    version: str | None
    installed_at: float  # modification time of the distribution's metadata (0 when unknown)

    @property
    def name(self) -> str:
        return self.entry_point.name


def installed_plugins() -> list[Found]:
    """Every entry point of the group, oldest installed distribution first."""
    found = []
    for ep in md.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        dist = ep.dist
        name = dist.metadata["Name"] if dist is not None else None
        found.append(Found(ep, name, dist.version if dist is not None else None, _installed_at(dist)))
    return sorted(found, key=lambda f: (f.installed_at, f.distribution or "", f.name))


def _installed_at(dist: md.Distribution | None) -> float:
    """When ``dist`` was installed: the modification time of its METADATA file."""
    for path in (dist.files or []) if dist is not None else []:
        if path.name == "METADATA" and path.parent.name.endswith(".dist-info"):
            try:
                return path.locate().stat().st_mtime
            except OSError:
                break
    return 0.0
