"""One parsed chat choice as OpenAI's stream chunks (:class:`pagoda.tools.choice.ChoiceParser`
reads the choice: reasoning, content, tool calls; the offline ``LLM.chat`` uses it too).

Streamed tool calls take OpenAI's shape: the first delta of a call carries ``index``, ``id``,
``type: "function"``, ``function.name`` and ``function.arguments: ""``; later deltas carry
``index`` and fragments of ``function.arguments``; the last chunk has ``finish_reason:
"tool_calls"``.
"""

from __future__ import annotations

from typing import Optional

from pagoda.tools.choice import ChoiceParser, ParsedCall  # noqa: F401 - the parser lives with the tools


def stream_choices(parser: ChoiceParser, index: int, text: str, finish_reason: Optional[str],
                   logprobs: Optional[dict]) -> list[dict]:
    """The chunk ``choices`` entries of one engine delta of a parsed choice: one per message delta
    (``logprobs`` on the first), then, when the choice ends, ``{"delta": {}, "finish_reason": ...}``."""
    deltas = parser.feed(text) if text else []
    if finish_reason is not None:
        deltas += parser.finish()
    choices = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None} for delta in deltas]
    if finish_reason is not None:
        reason = parser.finish_reason(finish_reason, bool(parser.calls))
        choices.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})
    if logprobs is not None:
        if not choices:
            choices.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": None})
        choices[0]["logprobs"] = logprobs
    return choices
