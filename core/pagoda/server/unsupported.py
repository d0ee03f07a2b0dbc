"""Request fields that ask for a guarantee Pagoda cannot give yet: answered with 400, never ignored.

Most unknown fields are harmless to ignore (``user``, ``metadata``, ``store``, ``prediction``, ...),
but a client that sends ``functions`` or ``suffix`` relies on the reply honouring them; ignoring
them would hand it text that silently breaks that contract. (``response_format`` and ``guided_*`` are implemented:
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
    # OpenAI's deprecated forms of tools / tool_choice: the replies would need the old message shape
    "functions": (_NONEMPTY, 'the deprecated functions field is not supported; send each function as tools: '
                             '[{"type": "function", "function": {"name": ..., "parameters": {...}}}] (docs/tools.md)'),
    "function_call": (_ANY, 'the deprecated function_call field is not supported; send tool_choice ("none", "auto", '
                            '"required" or {"type": "function", "function": {"name": ...}}) with tools (docs/tools.md)'),
    "structured_outputs": (_ANY, "vLLM's structured_outputs field is not implemented; send response_format or "
                                 "guided_json/guided_regex/guided_choice/guided_grammar"),
    "guided_whitespace_pattern": (_ANY, "vLLM's guided_whitespace_pattern is not implemented (the grammar engine "
                                        "chooses the whitespace between JSON tokens)"),
    "suffix": (_NONEMPTY, "completions with a suffix (insertion) are not supported"),
    # /v1/completions takes best_of (protocol.CompletionRequest); here it reaches chat completions
    "best_of": (lambda v: v not in (None, 1), "best_of is available on /v1/completions only; ask for n choices"),
    # /v1/completions takes echo (the prompt before the text); vLLM's chat echo is not implemented
    "echo": (_NONEMPTY, "echo is available on /v1/completions only"),
    # vLLM's extra fields that change the prompt or the reply
    "prompt_logprobs": (_ANY, "vLLM's prompt_logprobs field is not implemented; on /v1/completions send echo=true "
                              "with logprobs for the prompt's logprobs"),
    "continue_final_message": (_NONEMPTY, "vLLM's continue_final_message is not implemented (the prompt would end "
                                          "with a new assistant turn instead)"),
    "chat_template_kwargs": (_NONEMPTY, "vLLM's chat_template_kwargs is not implemented (the chat template would "
                                        "not see them); pass a chat_template instead"),
    "documents": (_NONEMPTY, "vLLM's documents field is not implemented (the chat template would not see them)"),
    "truncate_prompt_tokens": (_ANY, "prompt truncation is available on the pooling routes only; shorten the prompt"),
    "logits_processors": (_NONEMPTY, "vLLM's per-request logits_processors are not implemented; logit_bias, "
                                     "allowed_token_ids and bad_words are"),
    # OpenAI's output modalities and built-in tools
    "modalities": (lambda v: v not in (None, ["text"]), "this server answers text only"),
    "audio": (_ANY, "this server answers text only (no audio output)"),
    "web_search_options": (_ANY, "this server has no web search"),
}


def check_unsupported(extra: dict[str, Any] | None) -> None:
    """Raise a 400 naming the first field (of the request's unknown ones, in ``GUARANTEES`` order)
    that asks for a guarantee."""
    extra = extra or {}
    for name, rule in GUARANTEES.items():  # in the table's order, whatever the request's
        if name in extra and rule[0](extra[name]):
            raise APIError(400, f"'{name}' is not supported by this server: {rule[1]}, so the reply could not "
                                f"honour it; remove '{name}' from the request", param=name, code="unsupported_parameter")
