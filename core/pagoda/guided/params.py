"""What one request asks its output to match: a JSON schema, any JSON, a regex, a choice or a grammar.

``GuidedDecodingParams`` is plain data (it travels to the engine core inside ``SamplingParams``):
exactly one of ``json``, ``json_object``, ``regex``, ``choice`` or ``grammar`` is set. Its shape is
checked here; whether the schema/regex/grammar itself is valid is the backend's call
(:meth:`pagoda.interfaces.guided.GuidedDecodingBackend.validate`), made by the front end.
"""

from __future__ import annotations

import json as jsonlib
from dataclasses import dataclass
from typing import Any

from pagoda.errors import RequestError

KINDS = ("json", "json_object", "regex", "choice", "grammar")


@dataclass
class GuidedDecodingParams:
    """Constrain a request's output; names follow vLLM's ``GuidedDecodingParams``."""

    json: dict[str, Any] | str | None = None  # a JSON schema (a dict or its JSON text)
    json_object: bool = False  # any JSON object
    regex: str | None = None
    choice: list[str] | None = None  # the output is exactly one of these strings
    grammar: str | None = None  # an EBNF grammar (GBNF style, with a ``root`` rule)
    backend: str | None = None  # a registered guided decoding backend; None: the engine's choice

    def __post_init__(self) -> None:
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise RequestError(f"guided decoding takes exactly one of {', '.join(KINDS)}; got "
                               f"{', '.join(given) if given else 'none'}: set one")
        if isinstance(self.json, str):
            self.json = _parse_schema(self.json)
        if self.json is not None and not isinstance(self.json, dict):
            raise RequestError(f"guided json must be a JSON schema object, got {type(self.json).__name__}")
        if self.choice is not None:
            self.choice = _check_choice(self.choice)
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise RequestError(f"guided {name} must be a non-empty string, got {value!r}")

    @property
    def kind(self) -> str:
        """Which of ``KINDS`` this is."""
        return next(k for k in KINDS if getattr(self, k) not in (None, False))


def _parse_schema(text: str) -> dict[str, Any]:
    try:
        schema = jsonlib.loads(text)
    except ValueError as exc:
        raise RequestError(f"guided json is not valid JSON ({exc}); send a JSON schema object") from exc
    if not isinstance(schema, dict):
        raise RequestError(f"guided json must be a JSON schema object, got {type(schema).__name__}")
    return schema


def _check_choice(choice: list[str]) -> list[str]:
    choice = list(choice) if isinstance(choice, (list, tuple)) else choice
    if not isinstance(choice, list) or not choice or not all(isinstance(c, str) and c for c in choice):
        raise RequestError(f"guided choice must be a non-empty list of non-empty strings, got {choice!r}")
    return choice
