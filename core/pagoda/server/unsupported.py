"""Request fields that ask for a guarantee Pagoda cannot give yet: answered with 400, never ignored.

Most unknown fields are harmless to ignore (``user``, ``metadata``, ...), but a client that sends
``functions`` or ``suffix`` relies on the reply honouring them; ignoring them would hand it text
that silently breaks that contract. (``response_format`` and ``guided_*`` are implemented:
``pagoda.server.guided_fields``; ``tools`` on chat completions: ``pagoda.server.chat_tools``.)
"""

from __future__ import annotations

from typing import Any, Callable

from pagoda.server.errors import APIError

_ANY = lambda v: v is not None  # noqa: E731 - any value asks for something
_NONEMPTY = bool


# field -> (does this value ask for something unsupported?, what it would need)
GUARANTEES: dict[str, tuple[Callable[[Any], bool], str]] = {
    # chat completions take tools (pagoda.server.chat_tools); here they reach /v1/completions
    "tools": (_NONEMPTY, "tool calling is available on /v1/chat/completions only"),
    "tool_choice": (lambda v: v not in (None, "none", "auto"), "tool calling is available on /v1/chat/completions only"),
    "functions": (_NONEMPTY, "the deprecated functions field is not supported; send tools (docs/tools.md)"),
    "function_call": (lambda v: v not in (None, "none", "auto"), "the deprecated function_call field is not "
                                                                  "supported; send tool_choice (docs/tools.md)"),
    "structured_outputs": (_ANY, "vLLM's structured_outputs field is not implemented; send response_format or "
                                 "guided_json/guided_regex/guided_choice/guided_grammar"),
    "suffix": (_NONEMPTY, "completions with a suffix (insertion) are not supported"),
    # /v1/completions takes best_of (protocol.CompletionRequest); here it reaches chat completions
    "best_of": (lambda v: v not in (None, 1), "best_of is available on /v1/completions only; ask for n choices"),
}


def check_unsupported(extra: dict[str, Any] | None) -> None:
    """Raise a 400 naming the first field (of the request's unknown ones) that asks for a guarantee."""
    for name, value in (extra or {}).items():
        rule = GUARANTEES.get(name)
        if rule is not None and rule[0](value):
            raise APIError(400, f"'{name}' is not supported by this server: {rule[1]}, so the reply could not "
                                f"honour it; remove '{name}' from the request", param=name, code="unsupported_parameter")
