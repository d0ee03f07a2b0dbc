"""Plugin discovery and loading: stevedore finds entry points, pluggy calls their hooks.

Failure isolation: a plugin that fails to import, or raises inside a hook, is recorded with its
error and skipped (its partial registrations are dropped); the host keeps working.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import pluggy
from stevedore import NamedExtensionManager

from pagoda import envs, hookspecs
from pagoda.plugins.catalog import FIRST_PARTY, KINDS, distribution_of, plugin_name_of
from pagoda.plugins.registry import Registry

logger = logging.getLogger(__name__)

ENV_ALLOW = envs.PLUGINS.name  # the lists' variables, as messages name them
ENV_BLOCK = envs.DISABLE_PLUGINS.name
BUILTIN_MODULES = ("pagoda.builtin",)


@dataclass
class PluginInfo:
    """What ``pagoda plugins`` shows for one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: str = "loaded"  # loaded | disabled | failed
    errors: list[str] = field(default_factory=list)
    registers: dict[str, list[str]] = field(default_factory=dict)

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
        }


def parse_names(value: str | Iterable[str] | None) -> set[str] | None:
    """``"a,b"`` or ``["a", "b"]`` -> ``{"a", "b"}``; ``None``/empty -> ``None`` (no list)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {item.strip() for item in items if item.strip()}
    return names or None


class PluginManager:
    """Loads built-in and installed plugins once, then answers registry queries.

    ``modules`` adds in-process plugins (name -> module or object with hookimpls), loaded after
    the built-ins and subject to the same allow/block lists; tests and notebooks use it with
    ``entry_points=False`` to see only the built-ins plus the given modules.
    """

    def __init__(
        self,
        allow: str | Iterable[str] | None = None,
        block: str | Iterable[str] | None = None,
        *,
        modules: Mapping[str, Any] | None = None,
        entry_points: bool = True,
    ):
        self.allow = parse_names(allow if allow is not None else envs.PLUGINS.get())
        self.block = parse_names(block if block is not None else envs.DISABLE_PLUGINS.get()) or set()
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.registries = {key: Registry(kind, self.missing_hint) for key, kind in KINDS.items()}
        self._load_builtins()
        self._load_modules(modules or {})
        if entry_points:
            self._load_entry_points()
        self._call_register_hooks()

    # -- loading ---------------------------------------------------------------------------
    def _load_builtins(self) -> None:
        import importlib

        for module_name in BUILTIN_MODULES:
            module = importlib.import_module(module_name)
            name = "builtin"
            self.plugins[name] = PluginInfo(name, module_name, "pagoda", _version("pagoda"), builtin=True)
            self.pm.register(module, name=name)

    def _load_modules(self, modules: Mapping[str, Any]) -> None:
        for name, module in modules.items():
            module_name = getattr(module, "__name__", type(module).__name__)
            info = self.plugins[name] = PluginInfo(name, module_name)
            if not self._is_enabled(name, None):
                info.status = "disabled"
                continue
            try:
                self.pm.register(module, name=name)
            except Exception as exc:  # a hookimpl that matches no hookspec, a taken name
                self._fail(name, f"registration with pluggy failed: {exc}")

    def _is_enabled(self, name: str, distribution: str | None) -> bool:
        ids = {name, distribution} - {None}
        if ids & self.block:
            return False
        return self.allow is None or bool(ids & self.allow)

    def _load_entry_points(self) -> None:
        selected = []
        for ep in md.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = ep.dist.metadata["Name"] if ep.dist else None
            info = PluginInfo(ep.name, ep.value, dist, ep.dist.version if ep.dist else None)
            if ep.name in self.plugins:
                info.status = "failed"
                info.errors.append(f"entry point name '{ep.name}' is already taken by {self.plugins[ep.name].module}")
                self.plugins[f"{ep.name} ({dist})"] = info
                continue
            self.plugins[ep.name] = info
            if self._is_enabled(ep.name, dist):
                selected.append(ep.name)
            else:
                info.status = "disabled"
        if not selected:
            return
        manager = NamedExtensionManager(
            hookspecs.ENTRY_POINT_GROUP,
            names=selected,
            on_load_failure_callback=self._on_load_failure,
            name_order=True,
        )
        for ext in manager:
            try:
                self.pm.register(ext.plugin, name=ext.name)
            except Exception as exc:  # e.g. a hookimpl that matches no hookspec
                self._fail(ext.name, f"registration with pluggy failed: {exc}")
        for name in selected:  # stevedore reads a cached entry-point scan that can lag behind
            if self.plugins[name].status == "loaded" and not self.pm.has_plugin(name):
                self._fail(name, "its entry point was not loaded (stale stevedore entry-point cache?); run again")

    def _on_load_failure(self, _manager: Any, entry_point: Any, exc: BaseException) -> None:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self._fail(entry_point.name, f"import failed: {detail}")

    def _fail(self, name: str, error: str) -> None:
        info = self.plugins[name]
        info.status = "failed"
        info.errors.append(error)
        logger.warning("Pagoda plugin '%s' (%s) skipped: %s", name, info.distribution, error)

    def _call_register_hooks(self) -> None:
        """Call each plugin's hooks on its own, so one failure skips only that plugin."""
        pending: dict[str, list[tuple[str, str, Any]]] = {}
        for kind in KINDS.values():
            for impl in getattr(self.pm.hook, kind.hook).get_hookimpls():
                plugin = impl.plugin_name
                if self.plugins[plugin].status == "failed":
                    continue
                try:
                    found = _collect(impl, kind.key)
                except Exception as exc:
                    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    self._fail(plugin, f"{kind.hook} raised: {detail}")
                    pending.pop(plugin, None)
                    continue
                pending.setdefault(plugin, []).extend(found)
        for plugin in self.plugins:
            for key, reg_name, obj in pending.get(plugin, []):
                self._add(key, reg_name, obj, plugin)

    def _add(self, key: str, name: str, obj: Any, plugin: str) -> None:
        previous = self.registries[key].add(name, obj, plugin)
        if previous is not None and previous.plugin != plugin:
            logger.warning("%s '%s' of plugin '%s' replaces the one of '%s'", KINDS[key].label, name, plugin, previous.plugin)
            replaced = self.plugins[previous.plugin].registers
            replaced[key].remove(name)
            if not replaced[key]:
                del replaced[key]
        self.plugins[plugin].registers.setdefault(key, []).append(name)

    # -- queries ---------------------------------------------------------------------------
    def registry(self, key: str) -> Registry:
        return self.registries[key]

    def list_plugins(self) -> list[PluginInfo]:
        return list(self.plugins.values())

    def extra_commands(self, subparsers: Any) -> None:
        """Let plugins add CLI subcommands (failures are reported, not raised)."""
        for name, module in self.pm.list_name_plugin():
            hook = getattr(module, "register_commands", None)
            if hook is None:
                continue
            try:
                hook(subparsers=subparsers)
            except Exception as exc:
                self._fail(name, f"register_commands raised: {exc}")

    def missing_hint(self, kind: str, name: str) -> str:
        """Explain how to get a name that is not registered (install, enable, fix the plugin)."""
        folder = FIRST_PARTY.get((kind, name))
        if folder is None:
            return (
                f"Install a plugin that provides it: one whose `{KINDS[kind].hook}` hook registers '{name}' "
                "(`pagoda plugins` lists what is installed; docs/plugins.md explains how to write one)."
            )
        dist = distribution_of(folder)
        info = self.plugins.get(plugin_name_of(dist)) or next(
            (p for p in self.plugins.values() if p.distribution == dist), None
        )
        if info is None:
            return f"'{name}' is provided by the plugin distribution {dist}: pip install {dist} (from a Pagoda checkout: pip install ./plugins/{folder})."
        if info.status == "disabled":
            return f"{dist} is installed but its plugin '{info.name}' is disabled (--plugins/--disable-plugins or {ENV_ALLOW}/{ENV_BLOCK}); enable it to use '{name}'."
        if info.status == "failed":
            return f"{dist} is installed but failed to load: {'; '.join(info.errors)}. See `pagoda plugins`."
        version = f" {info.version}" if info.version else ""
        return f"{dist}{version} is installed but does not register '{name}' (yet); upgrade it."


def _collect(impl: Any, key: str) -> list[tuple[str, str, Any]]:
    """Call one hookimpl with a recording ``register``; validate what it registered."""
    found: list[tuple[str, str, Any]] = []

    def register(name: str, obj: Any) -> None:
        found.append((key, name, obj))

    impl.function(**({"register": register} if "register" in impl.argnames else {}))
    for _, name, obj in found:
        _validate(key, name, obj)
    return found


def _validate(key: str, name: str, obj: Any) -> None:
    """A registration must be a subclass of its kind's interface, under a non-empty name."""
    import pagoda.interfaces as api

    base = {
        "platform": api.Platform,
        "attention": api.AttentionBackend,
        "quantization": api.QuantizationMethod,
        "model": (api.CausalLM, api.PoolingModel),
        "scheduler": api.Scheduler,
        "proposer": api.Proposer,
        "guided_decoding": api.GuidedDecodingBackend,
        "tool_parser": api.ToolParser,
        "reasoning_parser": api.ReasoningParser,
    }[key]
    if not isinstance(name, str) or not name:
        raise TypeError(f"{KINDS[key].label} names must be non-empty strings, got {name!r}")
    if not (isinstance(obj, type) and issubclass(obj, base)):
        names = " or ".join(f"pagoda.interfaces.{b.__name__}" for b in (base if isinstance(base, tuple) else (base,)))
        raise TypeError(f"{KINDS[key].label} '{name}' must be a subclass of {names}, got {obj!r}")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


_MANAGER: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide manager (allow/block lists from the environment unless configured)."""
    global _MANAGER
    if _MANAGER is None:
        _MANAGER = PluginManager()
    return _MANAGER


def configure(allow: str | Iterable[str] | None = None, block: str | Iterable[str] | None = None) -> PluginManager:
    """Replace the process-wide manager (CLI ``--plugins``/``--disable-plugins`` call this first)."""
    global _MANAGER
    _MANAGER = PluginManager(allow=allow, block=block)
    return _MANAGER
