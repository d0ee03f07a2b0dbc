"""``echo`` on /v1/completions: the prompt before the completion, and with ``logprobs`` its tokens'
logprobs before the generated ones (the first prompt token has none: null, as in OpenAI's API).

``echo`` with ``max_tokens: 0`` scores a prompt without generating (what evaluation harnesses
send): the engine generates one token, which the reply leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagoda.outputs import Logprob
from pagoda.server.streaming import completion_logprobs


@dataclass(frozen=True)
class Echo:
    """What a completions request echoes."""

    enabled: bool
    logprobs: int | None  # top logprobs per prompt token (None: no logprobs)
    scoring_only: bool  # max_tokens 0: no generated tokens in the reply

    @classmethod
    def of(cls, echo: bool, logprobs: int | None, max_tokens: int | None) -> "Echo":
        return cls(echo, logprobs if echo else None, echo and max_tokens == 0)

    @property
    def max_tokens_to_run(self) -> int | None:
        """The max_tokens the engine runs with (1 when only scoring)."""
        return 1 if self.scoring_only else None

    def prompt_text(self, tokenizer: Any, ids: list[int], text: str | None) -> str:
        """The prompt as echoed: its text, or its token ids decoded."""
        if not self.enabled:
            return ""
        if text is not None:
            return text
        return tokenizer.decode(ids) if tokenizer is not None else ""

    def prompt_logprobs(self, tokenizer: Any, ids: list[int],
                        entries: list[dict[int, Logprob] | None] | None) -> dict | None:
        """The logprobs object of the prompt tokens (offsets from 0), or None when not asked for."""
        if self.logprobs is None:
            return None
        entries = list(entries or [])
        tokens, lps, tops, offsets, offset = [], [], [], [], 0
        for position, token in enumerate(ids):
            entry = entries[position] if position < len(entries) else None
            own = entry.get(token) if entry else None
            piece = own.decoded_token if own is not None and own.decoded_token is not None else _decode(tokenizer, token)
            tokens.append(piece)
            lps.append(own.logprob if own is not None else None)
            tops.append(None if entry is None else _top(entry))
            offsets.append(offset)
            offset += len(piece)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def generated_logprobs(logprobs, token_ids: list[int], text_offset: int, echo: Echo) -> dict | None:
    """The generated tokens' logprobs object (empty when only scoring)."""
    if echo.scoring_only:
        return None if logprobs is None else completion_logprobs([], [], text_offset)
    return completion_logprobs(logprobs, token_ids, text_offset)


def join_logprobs(first: dict | None, second: dict | None) -> dict | None:
    """Two logprobs objects as one (either may be None)."""
    if first is None or second is None:
        return first if second is None else second
    return {key: first[key] + second[key] for key in first}


def _top(entry: dict[int, Logprob]) -> dict[str, float]:
    """The ranked entries of one position, most likely first, as ``{token text: logprob}``."""
    ranked = sorted((lp for lp in entry.values() if lp.rank is not None), key=lambda lp: lp.rank)
    return {lp.decoded_token or "": lp.logprob for lp in ranked}


def _decode(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([token]) if tokenizer is not None else ""
