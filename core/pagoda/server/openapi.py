"""What /openapi.json says besides the routes' response models: the error answers and the event streams.

Errors: every route behind the API-key gate may answer 4XX (400 bad request, 401 key, 404 model,
413 body size) or 5XX (503 engine gone or draining, 504 ``--request-timeout``, 500) with OpenAI's
error body. Documenting ``4XX`` also keeps FastAPI from advertising a 422 the server never sends.

Streams: ``text/event-stream`` answers are described per event (OpenAPI 3.1 reads a stream's
``schema`` as one event's): ``data`` is ``[DONE]`` or JSON, a chunk model or an error body; the
Responses and Messages APIs' streams (``typed_event_stream``) have an ``event`` line naming each
event's type and no ``[DONE]``. The chunk and event models are added to ``components/schemas`` (no
route returns them as JSON).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from pagoda.server.responses import ChatCompletionChunk, CompletionChunk, ErrorResponse

REF = "#/components/schemas/{model}"
STREAM_CHUNKS: list[type[BaseModel]] = [CompletionChunk, ChatCompletionChunk]  # and each typed_event_stream's

ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorResponse, "description": "400 invalid request (`param` names the field), 401 missing or "
                                                   "wrong API key, 404 unknown model, 413 body too large"},
    "5XX": {"model": ErrorResponse, "description": "503 the engine failed or the server is shutting down, "
                                                   "504 the request ran past --request-timeout"},
}


def event_stream(chunk: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """``responses`` of a route answering its response model as JSON or, with ``stream: true``, SSE of ``chunk``."""
    payload = {"anyOf": [{"$ref": REF.format(model=chunk.__name__)}, {"$ref": REF.format(model="ErrorResponse")}]}
    data = {"type": "string", "if": {"const": "[DONE]"},
            "else": {"contentMediaType": "application/json", "contentSchema": payload}}
    event = {"type": "object", "required": ["data"], "properties": {"data": data}}
    description = f"JSON; with `stream: true`, server-sent events of {chunk.__name__} JSON, then `[DONE]`"
    return {**ERRORS, 200: {"description": description, "content": {"text/event-stream": {"schema": event}}}}


def typed_event_stream(event: type[BaseModel], errors: dict[int | str, dict[str, Any]] = ERRORS,
                       ) -> dict[int | str, dict[str, Any]]:
    """``responses`` of a route answering JSON or, with ``stream: true``, SSE whose ``event`` line names the
    type of the ``event`` JSON in ``data`` (an error is such an event too)."""
    if event not in STREAM_CHUNKS:
        STREAM_CHUNKS.append(event)
    data = {"type": "string", "contentMediaType": "application/json",
            "contentSchema": {"$ref": REF.format(model=event.__name__)}}
    schema = {"type": "object", "required": ["data"], "properties": {"event": {"type": "string"}, "data": data}}
    description = f"JSON; with `stream: true`, server-sent events of {event.__name__} JSON, each named by its type"
    return {**errors, 200: {"description": description, "content": {"text/event-stream": {"schema": schema}}}}


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` publish the stream chunk models as components too."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if not all(model.__name__ in components for model in STREAM_CHUNKS):
            _, definitions = models_json_schema([(m, "serialization") for m in STREAM_CHUNKS], ref_template=REF)
            for name, definition in definitions.get("$defs", {}).items():
                components.setdefault(name, definition)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
