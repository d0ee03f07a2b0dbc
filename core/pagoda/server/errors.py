"""Error bodies with the right status: OpenAI's ``{"error": {"message", "type", "param", "code"}}``, and on
Anthropic's Messages API (``/v1/messages...``) Anthropic's ``{"type": "error", "error": {"type", "message"}}``."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams

# Request fields an error message may start with (it then names them as ``param``).
KNOWN_FIELDS = set(SamplingParams.__dataclass_fields__) | {"max_completion_tokens", "top_logprobs", "prompt", "messages"}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    500: "server_error",
    503: "service_unavailable",
    504: "timeout_error",
}


# Anthropic's error types by status (its API reference, "Errors")
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
ANTHROPIC_PATH = "/v1/messages"


class APIError(Exception):
    """An error to answer with an OpenAI-shaped body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class EngineUnavailable(APIError):
    """The engine loop died or the server is shutting down: 503."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message, code="engine_unavailable")


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code if code is not None else status}}


def anthropic_error_body(status: int, message: str, param: str | None = None) -> dict:
    """Anthropic's error body; the field, when known, leads the message (``max_tokens: Field required``)."""
    named = param is None or message.startswith(param) or message.startswith(f"'{param}'")
    text = message if named else f"{param}: {message}"
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": text}}


def speaks_anthropic(path: str) -> bool:
    """Whether the route at ``path`` answers in Anthropic's shapes."""
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def error_payload(err: APIError, path: str = "") -> dict:
    """The error body of ``err`` in the shape of the API at ``path``."""
    if speaks_anthropic(path):
        return anthropic_error_body(err.status, err.message, err.param)
    return error_body(err.status, err.message, err.param, err.code)


def error_response(err: APIError, path: str = "") -> JSONResponse:
    return JSONResponse(error_payload(err, path), status_code=err.status)


def bad_request(exc: Exception) -> APIError:
    """A 400 for a RequestError / SamplingParams ValueError; ``param`` is the field its message names."""
    message = str(exc)
    first = message.split(" ", 1)[0]
    return APIError(400, message, param=first if first in KNOWN_FIELDS else None)


def _validation_message(exc: RequestValidationError, path: str) -> tuple[str, str | None]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return "the request body is not valid JSON", None
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    details = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
                        for e in errors[:5])
    return (details if speaks_anthropic(path) else f"invalid request: {details}"), param


def install_error_handlers(app: FastAPI) -> None:
    """Map every failure to an OpenAI-shaped body; a failing request never affects the others."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc, request.url.path)
        return error_response(APIError(400, message, param=param), request.url.path)

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return error_response(bad_request(exc), request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(APIError(exc.status_code, str(exc.detail)), request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}"), request.url.path)
