"""A Responses API request -> the chat request it runs as (``pagoda.server.chat_pipeline``).

- ``instructions`` -> a first ``system`` message (not carried over to a follow-up: OpenAI's rule);
- ``input`` items -> chat messages: ``message`` items (``input_text``, ``output_text``, ``refusal``,
  ``input_image`` parts), ``function_call`` items -> the assistant turn's ``tool_calls``,
  ``function_call_output`` -> a ``tool`` message; ``reasoning`` items of earlier turns are left out of
  the prompt, as chat templates leave out earlier turns' reasoning;
- ``tools`` (``function`` tools) / ``tool_choice`` / ``parallel_tool_calls``, ``text.format``
  (``json_schema``, ``json_object``) -> ``response_format``, ``max_output_tokens`` -> ``max_tokens``.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from pagoda.server.errors import APIError
from pagoda.server.responses_api.protocol import ResponsesRequest
from pagoda.server.translation import Translated, refuse, refuse_options, text_of

FIELDS = {"messages": "input", "max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens",
          "response_format": "text.format"}
_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "refusal")
_TOOL_KEYS = {"type", "name", "description", "parameters", "strict"}


def translate(body: ResponsesRequest, history: Optional[list[dict]] = None) -> Translated:
    """The chat request of ``body``, after the conversation ``history`` of ``previous_response_id``."""
    if body.input is None:
        raise APIError(400, "input is required: a string, or a list of input items", param="input")
    messages, paths = [], []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
        paths.append("instructions")
    for message in copy.deepcopy(history or []):  # the stored conversation stays as it was
        messages.append(message)
        paths.append("previous_response_id")
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    for number, item in enumerate(items):
        path = "input" if isinstance(body.input, str) else f"input.{number}"
        before = len(messages)
        add_item(messages, item, path)
        paths += [path] * (len(messages) - before)
    if not messages:
        raise APIError(400, "input has no message to answer", param="input")
    chat = {"model": body.model, "messages": messages, "stream": False, **body.chat_extras(),
            "max_completion_tokens": body.max_output_tokens, "temperature": body.temperature, "top_p": body.top_p}
    if body.tools:
        chat["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(body.tool_choice)
    if body.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = body.parallel_tool_calls
    response_format = text_format(body.text)
    if response_format is not None:
        chat["response_format"] = response_format
    return Translated.build({k: v for k, v in chat.items() if v is not None}, paths, FIELDS)


def add_item(messages: list[dict], item: Any, path: str) -> None:
    """Append the chat message(s) of one input (or output) item to ``messages``."""
    if not isinstance(item, dict):
        raise APIError(400, f"{path} must be an input item object", param=path)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        messages.append(_message(item, path))
    elif kind == "function_call":
        call = {"id": _string(item, "call_id", path), "type": "function",
                "function": {"name": _string(item, "name", path), "arguments": _string(item, "arguments", path)}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # a reply's text and calls are one assistant turn
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = text_of(item.get("output"), ("input_text", "output_text"), f"{path}.output")
        messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", path), "content": output})
    elif kind != "reasoning":  # earlier reasoning is left out of the prompt, as chat templates do
        raise refuse(f"{path}.type", f"input items of type {kind!r} are not supported (message, function_call, "
                                     "function_call_output and reasoning items are)", "send those item types")


def _message(item: dict, path: str) -> dict:
    role = item.get("role")
    if role not in _ROLES:
        raise APIError(400, f"{path}.role must be one of {', '.join(_ROLES)}, got {role!r}", param=f"{path}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise APIError(400, f"{path}.content must be a string or a list of content parts", param=f"{path}.content")
    parts = [_part(part, f"{path}.content.{i}") for i, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def _part(part: Any, path: str) -> dict:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS:
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise APIError(400, f"{path} ({kind}) has no text", param=path)
        return {"type": "text", "text": text}
    if kind == "input_image":
        if not isinstance(part.get("image_url"), str):
            raise refuse(f"{path}.file_id", "images by file id are not available (this server has no file store)",
                         "send the image as image_url (a data: URL, or a URL the server may read)")
        return {"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail")}}
    raise refuse(f"{path}.type", f"content parts of type {kind!r} are not supported (input_text, output_text, "
                                 "refusal and input_image are)", "send those part types")


def _string(item: dict, key: str, path: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise APIError(400, f"{path}.{key} must be a string", param=f"{path}.{key}")
    return value


def _tool(tool: dict, path: str) -> dict:
    """A Responses function tool (``name``, ``parameters``, ... at the top level) as a chat tool."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise refuse(f"{path}.type", f"tools of type {kind!r} are not available here (no hosted tools)",
                     "send function tools: {'type': 'function', 'name': ..., 'parameters': {...}}")
    refuse_options(tool, _TOOL_KEYS, path)
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise refuse("tool_choice", f"tool_choice {choice!r} is not supported",
                 "send 'none', 'auto', 'required' or {'type': 'function', 'name': ...}")


def text_format(text: Optional[dict]) -> Optional[dict]:
    """``text.format`` as the chat route's ``response_format`` (None: plain text)."""
    if not text:
        return None
    if text.get("verbosity") is not None:
        raise refuse("text.verbosity", "the model's verbosity cannot be set", "remove text.verbosity")
    extra = sorted(set(text) - {"format", "verbosity"})
    if extra:
        raise refuse(f"text.{extra[0]}", "only text.format is read", f"remove text.{extra[0]}")
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {key: fmt[key] for key in ("name", "schema", "strict", "description") if key in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise refuse("text.format", f"text.format of type {kind!r} is not supported",
                 "send {'type': 'text'}, {'type': 'json_object'} or {'type': 'json_schema', 'name': ..., "
                 "'schema': {...}}")
