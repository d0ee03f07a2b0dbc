"""A request of another API (OpenAI's Responses, Anthropic's Messages) as the chat request it runs as,
with what is needed to answer its errors in that API's own terms.

The chat pipeline names chat fields in its 400s (``messages.3.role``, ``max_tokens``,
``response_format``); :meth:`Translated.rename` rewrites ``param`` and the message so that a client of
the other API reads the field it sent (``input.2``, ``max_output_tokens``, ``text.format``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from pagoda.server.errors import APIError
from pagoda.server.protocol import ChatCompletionRequest

_MESSAGE_PARAM = re.compile(r"^messages\.(\d+)(?:\.|$)")
_MESSAGE_TEXT = re.compile(r"messages\[(\d+)\]")


@dataclass
class Translated:
    """``chat``: the request to run; ``message_paths[i]``: where chat message ``i`` came from (e.g.
    ``input.2``, ``instructions``); ``fields``: chat field name -> this API's."""

    chat: ChatCompletionRequest
    message_paths: list[str]
    fields: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, chat: dict[str, Any], message_paths: list[str], fields: dict[str, str]) -> "Translated":
        """The chat request made from ``chat`` (a 400 in this API's terms when a value does not fit)."""
        try:
            request = ChatCompletionRequest(**chat)
        except ValidationError as exc:
            error = exc.errors()[0]
            param = ".".join(str(p) for p in error.get("loc", ()))
            empty = cls(ChatCompletionRequest.model_construct(), message_paths, fields)
            raise empty.rename(APIError(400, f"invalid request: {param}: {error.get('msg')}", param=param)) from None
        return cls(request, message_paths, fields)

    def rename(self, err: APIError) -> APIError:
        """``err`` with the chat fields it names renamed to this API's."""
        if err.status != 400 and err.param is None:
            return err
        param = self._param(err.param) if err.param else err.param
        message = _MESSAGE_TEXT.sub(lambda m: self._path(int(m.group(1))), err.message)
        for chat_name, name in self.fields.items():
            message = re.sub(rf"(?<![\w.]){re.escape(chat_name)}(?!\w)", name, message)
        renamed = APIError(err.status, message, param=param, code=err.code)
        return renamed

    def _param(self, param: str) -> str:
        match = _MESSAGE_PARAM.match(param)
        if match:
            return self._path(int(match.group(1)))
        head, _, rest = param.partition(".")
        name = self.fields.get(param) or self.fields.get(head)
        if name is None:
            return param
        return name if param in self.fields or not rest else f"{name}.{rest}"

    def _path(self, index: int) -> str:
        return self.message_paths[index] if 0 <= index < len(self.message_paths) else self.fields.get("messages",
                                                                                                      "messages")


def text_of(parts: Any, kinds: tuple[str, ...], path: str) -> str:
    """The text of ``parts`` (a string, or a list of ``{"type": kind, "text": ...}`` blocks of ``kinds``)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise APIError(400, f"{path} must be a string or a list of text parts", param=path)
    texts = []
    for number, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds or not isinstance(part.get("text"), str):
            raise APIError(400, f"{path}.{number} must be a {' or '.join(repr(k) for k in kinds)} part with text, "
                                f"got {str(part)[:80]}", param=f"{path}.{number}")
        texts.append(part["text"])
    return "".join(texts)


# field -> (does this value ask for something this server cannot do?, why not, the fix)
Refusals = dict[str, tuple[Callable[[Any], bool], str, str]]


def unknown_fields(body: BaseModel, refusals: Refusals, known_extras: tuple[str, ...] = ()) -> list[str]:
    """Raise the 400 of the first field of ``body`` that ``refusals`` refuses; return the fields ``body``
    carries that are neither its own, refused, nor ``known_extras``."""
    values = {**body.model_dump(exclude_unset=True), **(body.model_extra or {})}
    for name, (asks, why, fix) in refusals.items():
        if name in values and asks(values[name]):
            raise refuse(name, why, fix)
    return [name for name in body.model_extra or {} if name not in refusals and name not in known_extras]


def refuse_options(item: dict, known: set[str], path: str) -> None:
    """400 for an option of ``item`` (a tool) beyond ``known`` that asks for something (not null, false or [])."""
    extra = sorted(key for key in set(item) - known if item[key] not in (None, False, []))
    if extra:
        raise refuse(f"{path}.{extra[0]}", "this tool option is not implemented", f"remove {extra[0]}")


def refuse(field_name: str, why: str, fix: str) -> APIError:
    """The 400 of a field this server cannot honour (never ignored)."""
    return APIError(400, f"'{field_name}' is not supported by this server: {why}; {fix}", param=field_name,
                    code="unsupported_parameter")
