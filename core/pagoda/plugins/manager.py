"""Plugin discovery and loading: entry points of the ``pagoda.plugins`` group, loaded one by one
(by distribution and name), registered with pluggy, whose hooks fill the registries.

Failure isolation: a plugin that fails to import, implements a hook that does not exist, raises
inside a hook or registers something its kind's interface refuses is recorded with its error and
skipped (its other registrations are dropped); the host keeps working. A registration of a name
that belongs to another plugin is refused alone, unless the user allows that name's replacement.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Iterable, Mapping

import pluggy

from pagoda import envs, hookspecs
from pagoda.plugins.catalog import FIRST_PARTY, KINDS, distribution_of, plugin_name_of
from pagoda.plugins.discovery import Found, installed_plugins
from pagoda.plugins.info import PluginInfo, parse_names
from pagoda.plugins.names import OVERRIDES_FLAG, Overrides, first_party_owner, is_first_party, owns, refusal
from pagoda.plugins.registry import Entry, Registry
from pagoda.plugins.validate import registration_problem, unknown_hooks

logger = logging.getLogger(__name__)

ENV_ALLOW = envs.PLUGINS.name  # the lists' variables, as messages name them
ENV_BLOCK = envs.DISABLE_PLUGINS.name
ENV_OVERRIDES = envs.ALLOW_PLUGIN_OVERRIDES.name
BUILTIN_MODULES = ("pagoda.builtin",)

__all__ = ["PluginInfo", "PluginManager", "configure", "get_plugin_manager", "parse_names"]


class PluginManager:
    """Loads built-in and installed plugins once, then answers registry queries.

    ``modules`` adds in-process plugins (name -> module or object with hookimpls), loaded after
    the built-ins and subject to the same allow/block lists; tests and notebooks use it with
    ``entry_points=False`` to see only the built-ins plus the given modules. ``overrides`` lists
    the names (``NAME`` or ``KIND:NAME``) a plugin may take over from the one they belong to.
    """

    def __init__(
        self,
        allow: str | Iterable[str] | None = None,
        block: str | Iterable[str] | None = None,
        *,
        overrides: str | Iterable[str] | None = None,
        modules: Mapping[str, Any] | None = None,
        entry_points: bool = True,
    ):
        self.allow = parse_names(allow if allow is not None else envs.PLUGINS.get())
        self.block = parse_names(block if block is not None else envs.DISABLE_PLUGINS.get()) or set()
        self.overrides = Overrides.parse(overrides if overrides is not None else envs.ALLOW_PLUGIN_OVERRIDES.get())
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.registries = {key: Registry(kind, self.missing_hint) for key, kind in KINDS.items()}
        self.refused: dict[tuple[str, str], list[str]] = {}  # (kind, name) -> plugins refused that name
        self._load_builtins()
        self._load_modules(modules or {})
        if entry_points:
            self._load_entry_points()
        self._reject_unknown_hooks()
        self._call_register_hooks()

    @property
    def settings(self) -> tuple[Any, ...]:
        """``configure(*settings)`` in another process loads the same plugins as this one."""
        return self.allow, self.block, str(self.overrides)

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
            self._register(name, module)

    def _is_enabled(self, name: str, distribution: str | None) -> bool:
        ids = {name, distribution} - {None}
        if ids & self.block:
            return False
        return self.allow is None or bool(ids & self.allow)

    def _load_entry_points(self) -> None:
        for found in installed_plugins():
            name = found.name
            info = PluginInfo(name, found.entry_point.value, found.distribution, found.version)
            holder = self.plugins.get(name)
            if holder is not None:  # the same name from a second distribution: the newcomer fails
                key = f"{name} ({found.distribution})"
                self.plugins[key] = info
                self._fail(key, _name_taken(found, holder))
                continue
            self.plugins[name] = info
            if not self._is_enabled(name, found.distribution):
                info.status = "disabled"
                continue
            try:
                module = found.entry_point.load()
            except Exception as exc:
                self._fail(name, f"import failed: {_one_line(exc)}")
                continue
            self._register(name, module)

    def _register(self, name: str, module: Any) -> None:
        try:
            self.pm.register(module, name=name)
        except Exception as exc:  # a hook whose arguments differ from its spec's
            self._fail(name, f"registration with pluggy failed: {exc}")

    def _reject_unknown_hooks(self) -> None:
        """A hook function that matches no hook spec (a typo) fails its plugin."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin)
                problems = unknown_hooks(self.pm, exc.plugin) or [str(exc)]
                self._fail(name, "; ".join(problems) + "; Pagoda's hooks are listed in pagoda.hookspecs")

    def _fail(self, name: str, error: str) -> None:
        info = self.plugins[name]
        info.status = "failed"
        info.errors.append(error)
        info.registers.clear()
        for registry in self.registries.values():  # e.g. register_commands raised after the registrations
            registry.remove_plugin(name)
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)
        logger.warning("Pagoda plugin '%s' (%s) skipped: %s", info.name, info.distribution or info.module, error)

    def _call_register_hooks(self) -> None:
        """Call each plugin's hooks on its own, so one failure skips only that plugin."""
        pending: dict[str, list[tuple[str, str, Any]]] = {}
        for kind in KINDS.values():
            for impl in getattr(self.pm.hook, kind.hook).get_hookimpls():
                plugin = impl.plugin_name
                try:
                    found = _collect(impl, kind.key)
                    problem = next(filter(None, (registration_problem(*item) for item in found)), None)
                except Exception as exc:
                    problem = f"{kind.hook} raised: {_one_line(exc)}"
                if problem:
                    self._fail(plugin, problem)
                    pending.pop(plugin, None)
                    continue
                pending.setdefault(plugin, []).extend(found)
        for plugin in sorted(pending, key=self._precedence):
            for key, reg_name, obj in pending[plugin]:
                self._add(key, reg_name, obj, plugin)

    def _precedence(self, plugin: str) -> tuple[int, int]:
        """Who registers first and so keeps a name: the built-ins, the first-party plugins, then the
        others in load order."""
        info = self.plugins[plugin]
        rank = 0 if info.builtin else 1 if is_first_party(info) else 2
        return rank, list(self.plugins).index(plugin)

    # -- names -----------------------------------------------------------------------------
    def _add(self, key: str, name: str, obj: Any, plugin: str) -> None:
        info = self.plugins[plugin]
        label = KINDS[key].label
        holder = self._holder(key, name, info)
        if holder is not None and not self.overrides.allows(key, name):
            note = refusal(label, name, key, info, holder)
            info.notes.append(note)
            self.refused.setdefault((key, name), []).append(plugin)
            logger.warning("Pagoda plugin '%s': %s", plugin, note)
            return
        source = "" if info.builtin else " ".join(filter(None, (info.distribution, info.version))) or f"plugin {plugin}"
        entry = Entry(name, obj, plugin, info.describe(), source, builtin=info.builtin, replaced=holder)
        previous = self.registries[key].add(entry)
        if previous is not None and previous.plugin != plugin:
            self._drop(previous.plugin, key, name, f"{label} '{name}' replaced by {info.describe()} ({OVERRIDES_FLAG})")
        if holder is not None:
            info.notes.append(f"{label} '{name}' replaces the one of {holder} (allowed by {OVERRIDES_FLAG})")
            logger.warning("Pagoda plugin '%s': %s '%s' replaces the one of %s (allowed by %s)",
                           plugin, label, name, holder, OVERRIDES_FLAG)
        if name not in info.registers.setdefault(key, []):
            info.registers[key].append(name)

    def _holder(self, key: str, name: str, info: PluginInfo) -> str | None:
        """Who ``name`` belongs to, when that is not ``info``'s plugin: the plugin that registered it
        first, or the first-party distribution the catalogue reserves it for."""
        existing = self.registries[key]._entries.get(name)
        if existing is not None and existing.plugin != info.name:
            return existing.origin
        owner = first_party_owner(key, name)
        if existing is None and owner is not None and not owns(info, owner):
            return f"the first-party distribution {owner}"
        return None

    def _drop(self, plugin: str, key: str, name: str, note: str) -> None:
        info = self.plugins[plugin]
        info.registers[key].remove(name)
        if not info.registers[key]:
            del info.registers[key]
        info.notes.append(note)

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
        refused = self.refused.get((kind, name))
        also = (f" (plugin {', '.join(repr(p) for p in refused)} registers '{name}' too, refused: the name is taken; "
                f"{OVERRIDES_FLAG} {kind}:{name} lets it replace the owner)") if refused else ""
        return self._install_hint(kind, name) + also

    def _install_hint(self, kind: str, name: str) -> str:
        folder = FIRST_PARTY.get((kind, name))
        if folder is None:
            return (
                f"Install a plugin that provides it: one whose `{KINDS[kind].hook}` hook registers '{name}' "
                "(`pagoda plugins` lists what is installed; docs/writing_plugins.md explains how to write one)."
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


def _name_taken(found: Found, holder: PluginInfo) -> str:
    """Why the second distribution with an entry-point name fails, naming both distributions."""
    first = holder.distribution or holder.module
    return (f"entry point name '{found.name}' of {found.distribution} is already used by {first} (installed "
            f"earlier), which keeps it; rename the entry point in {found.distribution}'s pyproject.toml "
            f"([project.entry-points.\"{hookspecs.ENTRY_POINT_GROUP}\"]) or uninstall one of the two")


def _one_line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _collect(impl: Any, key: str) -> list[tuple[str, Any, Any]]:
    """Call one hookimpl with a recording ``register``; returns ``[(kind, name, obj)]``."""
    found: list[tuple[str, Any, Any]] = []

    def register(name: str, obj: Any) -> None:
        found.append((key, name, obj))

    impl.function(**({"register": register} if "register" in impl.argnames else {}))
    return found


def _version(dist: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


_MANAGER: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide manager (allow/block lists and overrides from the environment unless configured)."""
    global _MANAGER
    if _MANAGER is None:
        _MANAGER = PluginManager()
    return _MANAGER


def configure(
    allow: str | Iterable[str] | None = None,
    block: str | Iterable[str] | None = None,
    overrides: str | Iterable[str] | None = None,
) -> PluginManager:
    """Replace the process-wide manager (the CLI's ``--plugins``/``--disable-plugins``/
    ``--allow-plugin-overrides`` call this first; ``None`` reads the environment variable)."""
    global _MANAGER
    _MANAGER = PluginManager(allow=allow, block=block, overrides=overrides)
    return _MANAGER
