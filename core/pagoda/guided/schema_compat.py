"""Work around JSON-schema features that xgrammar 0.2.8 compiles into grammars admitting invalid JSON.

A string with ``minLength``/``maxLength`` (and no ``pattern``) becomes a bounded repetition of
``[^"\\\r\n]``: raw control characters (U+0000-U+001F other than CR/LF) are allowed inside the
string, which RFC 8259 forbids, so ``json.loads`` rejects the output (xgrammar issue #800,
fixes pending upstream). The ``pattern`` path uses a JSON-string-aware regex that rejects them, so
such strings are rewritten as ``"pattern": "^[\\s\\S]{min,max}$"``: the same length bounds, never
a raw control character. (Neither path can emit escapes such as ``\\n`` or ``\\"`` in a bounded
string.) Remove this once the xgrammar in use has the fix.
"""

from __future__ import annotations

import copy
from typing import Any

_NOT_SCHEMAS = ("const", "enum", "default", "examples")  # values, not schemas: left alone


def json_safe_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` whose length-bounded strings cannot hold raw control characters."""
    schema = copy.deepcopy(schema)
    _rewrite(schema)
    return schema


def _rewrite(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _rewrite(item)
        return
    if not isinstance(node, dict):
        return
    if _bounded_string(node):
        low, high = node.pop("minLength", 0), node.pop("maxLength", "")
        node["pattern"] = f"^[\\s\\S]{{{low},{high}}}$"
    for key, value in node.items():
        if key not in _NOT_SCHEMAS:
            _rewrite(value)


def _bounded_string(node: dict[str, Any]) -> bool:
    return (node.get("type") == "string" and ("minLength" in node or "maxLength" in node)
            and "pattern" not in node and "format" not in node)
