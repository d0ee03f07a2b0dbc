"""One registry per kind: one-of-N selection with one error shape, and errors of a plugin's code
that name the plugin."""

from __future__ import annotations

import difflib
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pagoda.errors import IncompatibleChoiceError, PagodaError, UnknownChoiceError
from pagoda.plugins.catalog import Kind

AUTO = "auto"

logger = logging.getLogger(__name__)


class PluginCodeError(PagodaError):
    """A plugin's class raised while Pagoda built or checked it; the message names the plugin,
    the kind and the registered name (the original exception is chained as ``__cause__``)."""


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any
    plugin: str  # the plugin that registered it
    origin: str = "Pagoda's built-ins"  # how messages name that plugin
    source: str = ""  # its distribution and version ("" for the built-ins)
    builtin: bool = True
    replaced: str | None = None  # whose registration of the name it replaced (allowed by the user)

    @property
    def priority(self) -> int:
        return getattr(self.obj, "priority", 0)


class Registry:
    """Names -> registered objects of one kind. ``hint`` explains a missing name (installable?)."""

    def __init__(self, kind: Kind, hint: Callable[[str, str], str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._hint = hint or (lambda kind, name: "")

    def add(self, entry: Entry) -> Entry | None:
        """Register ``entry``; returns the entry it replaced, if any (the caller decides and reports)."""
        previous = self._entries.get(entry.name)
        self._entries[entry.name] = entry
        return previous

    def remove_plugin(self, plugin: str) -> None:
        self._entries = {n: e for n, e in self._entries.items() if e.plugin != plugin}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def entry(self, name: str) -> Entry:
        """The entry registered as ``name``, or UnknownChoiceError naming the alternatives."""
        if name not in self._entries:
            raise UnknownChoiceError(self.unknown_message(name))
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        """The object registered as ``name``, or UnknownChoiceError naming the alternatives."""
        return self.entry(name).obj

    def describe(self, name: str) -> str:
        """``name``, with the distribution that provides it when that is not Pagoda itself, and
        whose registration it replaced (for the engine's start-up line)."""
        entry = self._entries.get(name)
        if entry is None or (entry.builtin and entry.replaced is None):
            return name
        details = [entry.source or "built-in"] + ([f"replacing the one of {entry.replaced}"] if entry.replaced else [])
        return f"{name} ({', '.join(details)})"

    # -- a plugin's own code ---------------------------------------------------------------
    @contextmanager
    def blame(self, name: str, action: str) -> Iterator[None]:
        """Run a plugin's code for ``name`` (``action``: what Pagoda was doing); an exception it
        raises comes out naming the plugin, the kind and the name (the built-ins' pass unchanged)."""
        entry = self._entries.get(name)
        try:
            yield
        except PagodaError as exc:  # deliberate: keep its type, say whose it is
            if entry is not None and not entry.builtin and exc.args and not str(exc).startswith(self._whose(entry)):
                exc.args = (f"{self._whose(entry)}: {exc}", *exc.args[1:])
            raise
        except Exception as exc:
            if entry is None or entry.builtin:
                raise
            raise PluginCodeError(
                f"{self._whose(entry)} raised {type(exc).__name__} in {action}: {exc} (a bug in that plugin: "
                f"update it, or choose another {self.kind.label}; `pagoda plugins` lists them)"
            ) from exc

    def _whose(self, entry: Entry) -> str:
        return f"{self.kind.label.capitalize()} '{entry.name}' of {entry.origin}"

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """An instance of the class registered as ``name`` (its errors name the plugin)."""
        cls = self.get(name)
        with self.blame(name, f"{getattr(cls, '__name__', cls)}(...)"):
            return cls(*args, **kwargs)

    # -- selection -------------------------------------------------------------------------
    def reason_against(self, name: str, **context: Any) -> str | None:
        """Why ``name`` cannot be used in ``context`` (``None`` if it can)."""
        obj = self.get(name)
        args = {k: context.get(k) for k in self.kind.check_args}
        with self.blame(name, "check()"):
            if self.kind.requirement is not None:
                reason = self.kind.requirement(obj, **args)
                if reason:
                    return reason
            check = getattr(obj, "check", None)
            return None if check is None else check(**args)

    def select(self, name: str | None, **context: Any) -> tuple[str, Any]:
        """Resolve ``name`` (or ``auto``/``None``) to ``(name, obj)``: ``auto`` is the kind's fixed
        default where it has one (quantization: ``none``), else the best usable by priority."""
        if name in (None, AUTO):
            if not self.kind.auto:  # e.g. tool-call parsers: the model's format must be named
                raise UnknownChoiceError(self.unknown_message(AUTO))
            if self.kind.auto_name is None:
                return self._select_auto(context)
            name = self.kind.auto_name
        obj = self.get(name)
        reason = self.reason_against(name, **context)
        if reason:
            usable = [n for n in self.names() if n != name and not self._usable_reason(self._entries[n], context)]
            raise IncompatibleChoiceError(
                f"{self.kind.label.capitalize()} '{name}' cannot be used here: {reason}. "
                f"Usable here: {', '.join(usable) or 'none'}."
            )
        return name, obj

    def ranked(self) -> list[Entry]:
        """Entries in ``auto``'s order: higher ``priority`` first; on a tie the built-in, then by name."""
        return sorted(self._entries.values(), key=lambda e: (-e.priority, not e.builtin, e.name))

    def _select_auto(self, context: dict[str, Any]) -> tuple[str, Any]:
        reasons = []
        for entry in self.ranked():
            reason = self._usable_reason(entry, context)
            if reason is None:
                return entry.name, entry.obj
            reasons.append(f"{entry.name}: {reason}")
        raise IncompatibleChoiceError(
            f"No usable {self.kind.label} here ({'; '.join(reasons) or 'none is registered'}). "
            "Run `pagoda plugins` to see what is installed."
        )

    def _usable_reason(self, entry: Entry, context: dict[str, Any]) -> str | None:
        """``reason_against``, where a plugin whose check raises counts as unusable (and is logged)."""
        try:
            return self.reason_against(entry.name, **context)
        except PagodaError as exc:
            if entry.builtin:
                raise
            logger.warning("%s; skipped", exc)
            return str(exc)

    def unknown_message(self, name: str) -> str:
        """What exists, the closest name, and how to get ``name`` (install, enable, fix a plugin)."""
        label = self.kind.label
        names = self.names()
        choices = ", ".join(names) if names else "none"
        if self.kind.auto and (self.kind.check_args or self.kind.flag):
            choices += f" (or '{AUTO}')"
        message = f"Unknown {label} '{name}'. Available: {choices}."
        close = difflib.get_close_matches(name, names, n=1)
        if close:
            message += f" Did you mean '{close[0]}'?"
        hint = self._hint(self.kind.key, name)
        return f"{message} {hint}".strip()
