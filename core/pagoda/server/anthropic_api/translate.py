"""A Messages API request -> the chat request it runs as (``pagoda.server.chat_pipeline``).

- ``system`` (a string, or text blocks joined by a blank line) -> a first ``system`` message;
- ``messages``: ``text`` and ``image`` blocks -> content parts; an assistant's ``tool_use`` blocks -> its
  ``tool_calls``; a user's ``tool_result`` blocks -> ``tool`` messages (before the rest of that user turn;
  ``is_error`` results read ``Error: ...``); ``thinking`` blocks of earlier turns are left out of the
  prompt, as chat templates leave out earlier turns' reasoning;
- ``tools`` (``input_schema``) / ``tool_choice`` (``auto``, ``any``, ``tool``, ``none``;
  ``disable_parallel_tool_use``), ``stop_sequences`` -> ``stop``, ``output_config.format`` (a JSON schema)
  -> ``response_format``.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from pagoda.server.anthropic_api.protocol import CountTokensRequest, MessagesRequest
from pagoda.server.errors import APIError
from pagoda.server.translation import Translated, refuse, refuse_options, text_of

FIELDS = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens", "response_format": "output_config.format"}
_TOOL_KEYS = {"name", "description", "input_schema", "type", "cache_control", "strict"}
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def translate(body: CountTokensRequest) -> Translated:
    """The chat request of ``body`` (a count_tokens request: the same prompt, nothing to generate)."""
    messages, paths = [], []
    if body.system:
        system = body.system if isinstance(body.system, str) else _system(body.system)
        messages.append({"role": "system", "content": system})
        paths.append("system")
    for number, message in enumerate(body.messages):
        before = len(messages)
        _add_message(messages, message, f"messages.{number}")
        paths += [f"messages.{number}"] * (len(messages) - before)
    chat: dict[str, Any] = {"model": body.model, "messages": messages}
    if isinstance(body, MessagesRequest):
        chat.update(max_completion_tokens=body.max_tokens, stop=body.stop_sequences, temperature=body.temperature,
                    top_p=body.top_p, top_k=body.top_k)
    if body.tools:
        chat["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat.update(_tool_choice(body.tool_choice))
    schema = _output_format(body.output_config)
    if schema is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    return Translated.build({k: v for k, v in chat.items() if v is not None}, paths, FIELDS)


def _system(blocks: list[dict]) -> str:
    return "\n\n".join(text_of([block], ("text",), f"system.{i}") for i, block in enumerate(blocks))


def _add_message(messages: list[dict], message: Any, path: str) -> None:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise APIError(400, f"{path}.role must be 'user' or 'assistant', got {role!r}", param=f"{path}.role")
    content = message.get("content")
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise APIError(400, f"{path}.content must be a string or a list of content blocks", param=f"{path}.content")
    if role == "assistant":
        messages.append(_assistant(content, f"{path}.content"))
        return
    parts: list[dict] = []
    for number, block in enumerate(content):
        where = f"{path}.content.{number}"
        if _kind(block) == "tool_result":
            _flush(messages, parts)
            messages.append(_tool_result(block, where))
        else:
            parts.append(_part(block, where))
    _flush(messages, parts)


def _kind(block: Any) -> Optional[str]:
    return block.get("type") if isinstance(block, dict) else None


def _flush(messages: list[dict], parts: list[dict]) -> None:
    """One user message of the parts gathered so far (text joined when there is no image)."""
    if not parts:
        return
    if all(part["type"] == "text" for part in parts):
        messages.append({"role": "user", "content": "".join(part["text"] for part in parts)})
    else:
        messages.append({"role": "user", "content": list(parts)})
    parts.clear()


def _part(block: Any, path: str) -> dict:
    kind = _kind(block)
    if kind == "text":
        return {"type": "text", "text": text_of([block], ("text",), path)}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(block.get("source"), f"{path}.source")}}
    raise refuse(f"{path}.type", f"content blocks of type {kind!r} are not supported in a user turn (text, image "
                                 "and tool_result are)", "send those block types")


def _image_url(source: Any, path: str) -> str:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
    if kind == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise refuse(f"{path}.type", f"image sources of type {kind!r} are not available (no file store)",
                 "send a base64 or url source")


def _tool_result(block: dict, path: str) -> dict:
    content = block.get("content", "")
    if isinstance(content, list) and any(_kind(part) != "text" for part in content):
        raise refuse(f"{path}.content", "a tool_result's content may hold text blocks only here",
                     "send the result as text")
    text = text_of(content, ("text",), f"{path}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise APIError(400, f"{path}.tool_use_id must be a string", param=f"{path}.tool_use_id")
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}


def _assistant(blocks: list, path: str) -> dict:
    texts, calls = [], []
    for number, block in enumerate(blocks):
        kind, where = _kind(block), f"{path}.{number}"
        if kind == "text":
            texts.append(text_of([block], ("text",), where))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise APIError(400, f"{where} needs an id and a name", param=where)
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
        elif kind not in ("thinking", "redacted_thinking"):  # earlier thinking is left out, as chat templates do
            raise refuse(f"{where}.type", f"content blocks of type {kind!r} are not supported in an assistant turn "
                                          "(text, tool_use and thinking are)", "send those block types")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool(tool: Any, path: str) -> dict:
    if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise refuse(f"{path}.type", f"tools of type {kind!r} are not available here (no server tools)",
                     "send custom tools: {'name': ..., 'input_schema': {...}}")
    refuse_options(tool, _TOOL_KEYS, path)
    if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
        raise APIError(400, f"{path} needs a name and an input_schema object", param=path)
    function = {"name": tool["name"], "description": tool.get("description"), "parameters": tool["input_schema"],
                "strict": tool.get("strict")}
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _tool_choice(choice: dict) -> dict:
    kind = choice.get("type")
    parallel = {"parallel_tool_calls": False} if choice.get("disable_parallel_tool_use") else {}
    if kind in _CHOICES:
        return {"tool_choice": _CHOICES[kind], **parallel}
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}, **parallel}
    raise APIError(400, f"tool_choice must be {{'type': 'auto' | 'any' | 'none'}} or {{'type': 'tool', 'name': ...}}, "
                        f"got {choice!r}", param="tool_choice")


def _output_format(config: Optional[dict]) -> Optional[dict]:
    fmt = (config or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise APIError(400, "output_config.format must be {'type': 'json_schema', 'schema': {...}}",
                       param="output_config.format")
    return fmt["schema"]
