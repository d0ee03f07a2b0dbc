"""Helpers for testing plugins (used by the first-party plugins' tests; third-party authors welcome)."""

from __future__ import annotations

import importlib.metadata as md

from pagoda.plugins.manager import PluginInfo, PluginManager


def load_installed_plugin(distribution: str, entry_point: str) -> PluginInfo:
    """Load only ``entry_point`` through a fresh PluginManager and return its info.

    Skips the calling test when ``distribution`` is not installed; fails it when the plugin does
    not load or belongs to another distribution.
    """
    import pytest

    try:
        version = md.version(distribution)
    except md.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed (pip install it to run this test)")
    info = PluginManager(allow=[entry_point], block="").plugins[entry_point]
    assert info.status == "loaded", info.errors
    assert (info.distribution, info.version) == (distribution, version)
    return info
