"""``tool_choice`` "required" or a named function: enforced by guided decoding, read back as calls.

The output is constrained by a JSON schema built from the tools' ``parameters``:

- a named function: the output *is* that function's arguments object;
- ``required``: a JSON array of ``{"name": ..., "arguments": {...}}`` items, each matching one of
  the tools (``anyOf``), at least one item, at most one when ``parallel_tool_calls`` is false.

The readers below turn that output into the same events a tool parser reports, so the server
streams and collects forced calls exactly like parsed ones. No tool-call parser is needed.
"""

from __future__ import annotations

import copy
from typing import Any

from pagoda.interfaces.tool_parser import CallStarted, ToolEvent, ToolParser
from pagoda.tools.json_stream import ArgumentsReader, CallListReader

ANY_OBJECT: dict[str, Any] = {"type": "object"}
_DEFS_PREFIXES = ("#/$defs/", "#/definitions/")


def named_schema(parameters: dict[str, Any] | None) -> dict[str, Any]:
    """The schema of a named function's output: its parameters (any object without them)."""
    return parameters if parameters else dict(ANY_OBJECT)


def required_schema(tools: list[tuple[str, dict[str, Any] | None]], parallel: bool) -> dict[str, Any]:
    """The schema of ``tool_choice: "required"``: an array of calls to the ``(name, parameters)`` tools.

    Each tool's parameters move to ``$defs`` (with their own ``$defs`` renamed under the tool's
    number), so ``$ref``\\ s inside them keep pointing where they did.
    """
    defs: dict[str, Any] = {}
    items = []
    for number, (name, parameters) in enumerate(tools):
        ref = _hoist(named_schema(parameters), f"tool{number}", defs)
        items.append({"type": "object", "properties": {"name": {"const": name}, "arguments": ref},
                      "required": ["name", "arguments"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items}, "minItems": 1}
    if not parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def _hoist(parameters: dict[str, Any], key: str, defs: dict[str, Any]) -> dict[str, Any]:
    """Put ``parameters`` into ``defs[key]`` (its local definitions as ``key__Name``); return a ``$ref`` to it."""
    schema = copy.deepcopy(parameters)
    for section in ("$defs", "definitions"):
        for name, definition in (schema.pop(section, None) or {}).items():
            defs[f"{key}__{name}"] = definition
    defs[key] = schema
    for definition in [schema] + [defs[k] for k in defs if k.startswith(f"{key}__")]:
        _rewrite_refs(definition, key)
    return {"$ref": f"#/$defs/{key}"}


def _rewrite_refs(node: Any, key: str) -> None:
    """``#`` -> ``#/$defs/key``; ``#/$defs/Name...`` -> ``#/$defs/key__Name...`` (in place)."""
    if isinstance(node, list):
        for item in node:
            _rewrite_refs(item, key)
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref == "#":
            node["$ref"] = f"#/$defs/{key}"
        for prefix in _DEFS_PREFIXES:
            if ref.startswith(prefix):
                node["$ref"] = f"#/$defs/{key}__{ref[len(prefix):]}"
    for value in node.values():
        _rewrite_refs(value, key)


class NamedCallReader(ToolParser):
    """The output of a named ``tool_choice``: one call to ``name`` whose arguments are the output."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._pending_start: list[ToolEvent] = [CallStarted(0, name)]
        self._reader = ArgumentsReader(0)

    def feed(self, text: str) -> list[ToolEvent]:
        events, self._pending_start = self._pending_start, []
        if not self._reader.done:
            events = events + self._reader.feed(text)[0]
        return events

    def finish(self) -> list[ToolEvent]:
        events, self._pending_start = self._pending_start, []
        return events


class RequiredCallsReader(ToolParser):
    """The output of ``tool_choice: "required"``: a JSON array of calls."""

    def __init__(self) -> None:
        super().__init__()
        self._reader = CallListReader(0)

    def feed(self, text: str) -> list[ToolEvent]:
        return [] if self._reader.done else self._reader.feed(text)[0]
