"""Plugin discovery (entry points + pluggy), load-time checks and the one-of-N registries."""

from pagoda.plugins.manager import PluginManager, configure, get_plugin_manager
from pagoda.plugins.registry import PluginCodeError

__all__ = ["PluginCodeError", "PluginManager", "configure", "get_plugin_manager"]
