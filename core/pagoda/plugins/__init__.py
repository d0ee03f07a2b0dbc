"""Plugin discovery (stevedore + pluggy) and the one-of-N registries."""

from pagoda.plugins.manager import PluginManager, configure, get_plugin_manager

__all__ = ["PluginManager", "configure", "get_plugin_manager"]
