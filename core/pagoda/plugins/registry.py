"""One registry per kind: one-of-N selection with one error shape."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable

from pagoda.errors import IncompatibleChoiceError, UnknownChoiceError
from pagoda.plugins.catalog import Kind

AUTO = "auto"


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any
    plugin: str  # the plugin that registered it


class Registry:
    """Names -> registered objects of one kind. ``hint`` explains a missing name (installable?)."""

    def __init__(self, kind: Kind, hint: Callable[[str, str], str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._hint = hint or (lambda kind, name: "")

    def add(self, name: str, obj: Any, plugin: str) -> Entry | None:
        """Register ``obj``; returns the entry it replaced, if any (the caller reports it)."""
        previous = self._entries.get(name)
        self._entries[name] = Entry(name, obj, plugin)
        return previous

    def remove_plugin(self, plugin: str) -> None:
        self._entries = {n: e for n, e in self._entries.items() if e.plugin != plugin}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        """The object registered as ``name``, or UnknownChoiceError naming the alternatives."""
        if name not in self._entries:
            raise UnknownChoiceError(self._unknown_message(name))
        return self._entries[name].obj

    def reason_against(self, name: str, **context: Any) -> str | None:
        """Why ``name`` cannot be used in ``context`` (``None`` if it can)."""
        obj = self.get(name)
        args = {k: context.get(k) for k in self.kind.check_args}
        if self.kind.requirement is not None:
            reason = self.kind.requirement(obj, **args)
            if reason:
                return reason
        check = getattr(obj, "check", None)
        return None if check is None else check(**args)

    def select(self, name: str | None, **context: Any) -> tuple[str, Any]:
        """Resolve ``name`` (or ``auto``/``None``: the best usable by priority) to ``(name, obj)``."""
        if name in (None, AUTO):
            return self._select_auto(context)
        obj = self.get(name)
        reason = self.reason_against(name, **context)
        if reason:
            usable = [n for n in self.names() if n != name and not self.reason_against(n, **context)]
            raise IncompatibleChoiceError(
                f"{self.kind.label.capitalize()} '{name}' cannot be used here: {reason}. "
                f"Usable here: {', '.join(usable) or 'none'}."
            )
        return name, obj

    def _select_auto(self, context: dict[str, Any]) -> tuple[str, Any]:
        ranked = sorted(self._entries.values(), key=lambda e: (-getattr(e.obj, "priority", 0), e.name))
        reasons = []
        for entry in ranked:
            reason = self.reason_against(entry.name, **context)
            if reason is None:
                return entry.name, entry.obj
            reasons.append(f"{entry.name}: {reason}")
        raise IncompatibleChoiceError(
            f"No usable {self.kind.label} here ({'; '.join(reasons) or 'none is registered'}). "
            "Run `pagoda plugins` to see what is installed."
        )

    def _unknown_message(self, name: str) -> str:
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
