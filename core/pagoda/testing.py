"""Test helpers for Pagoda and its plugins, also a pytest plugin (entry point ``pytest11``).

Wherever pagoda is installed, pytest knows the ``gpu`` marker and skips such tests without a
CUDA device, so plugin test suites need no conftest of their own for it.
"""

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


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items) -> None:
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
