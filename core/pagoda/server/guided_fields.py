"""Structured-output fields of a request -> GuidedDecodingParams.

OpenAI's ``response_format`` (``{"type": "json_schema", "json_schema": {"schema": ...}}`` or
``{"type": "json_object"}``; ``{"type": "text"}`` asks for nothing) and vLLM's extra fields
``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar`` (with
``guided_decoding_backend``). At most one of them may constrain a request.
"""

from __future__ import annotations

from typing import Any

from pagoda.errors import RequestError
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.runtime import validate_guided
from pagoda.server.errors import APIError

VLLM_FIELDS = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


def guided_params(extra: dict[str, Any] | None) -> GuidedDecodingParams | None:
    """The request's guided decoding, or None; a malformed or conflicting field is a 400 naming it."""
    extra = extra or {}
    found = {name: _spec(name, value) for name, value in extra.items()
             if name in VLLM_FIELDS or name == "response_format"}
    found = {name: spec for name, spec in found.items() if spec is not None}
    if len(found) > 1:
        raise APIError(400, f"{' and '.join(sorted(found))} both constrain the output; send only one of them",
                       param=sorted(found)[1])
    if not found:
        return None
    (name, spec), = found.items()
    backend = extra.get("guided_decoding_backend")
    try:
        params = GuidedDecodingParams(**spec, backend=backend)
        validate_guided(params)
        return params
    except RequestError as exc:
        raise APIError(400, f"{name}: {exc}", param=name) from exc


def _spec(name: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if name != "response_format":
        return {VLLM_FIELDS[name]: value}
    return _response_format(value)


def _response_format(value: Any) -> dict[str, Any] | None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        schema = (value.get("json_schema") or {}).get("schema") if isinstance(value.get("json_schema"), dict) else None
        if not isinstance(schema, dict):
            raise APIError(400, "response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}",
                           param="response_format")
        return {"json": schema}
    raise APIError(400, f"response_format type {kind!r} is not supported; use 'text', 'json_object' or "
                        "'json_schema', or remove 'response_format'",
                   param="response_format", code="unsupported_parameter")
