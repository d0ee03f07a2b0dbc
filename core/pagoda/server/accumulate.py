"""Collect the delta outputs of a request's choices into whole ones (non-streaming responses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator

from pagoda.outputs import CompletionOutput, Logprob, RequestOutput


@dataclass
class Choice:
    """One whole choice built from deltas."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None  # of the request's prompt, when asked for

    def add(self, delta: CompletionOutput) -> None:
        self.text += delta.text
        self.token_ids += delta.token_ids
        if delta.logprobs is not None:
            self.logprobs = (self.logprobs or []) + delta.logprobs
        if delta.finish_reason is not None:
            self.finish_reason, self.stop_reason = delta.finish_reason, delta.stop_reason


async def collect(merged: AsyncIterator[tuple[int, RequestOutput]], n: int) -> dict[int, Choice]:
    """Choice index ``prompt_index * n + output.index`` -> the whole choice."""
    choices: dict[int, Choice] = {}
    async for prompt_index, out in merged:
        for delta in out.outputs:
            index = prompt_index * n + delta.index
            choice = choices.setdefault(index, Choice(index))
            choice.add(delta)
            if out.prompt_logprobs is not None:
                choice.prompt_logprobs = out.prompt_logprobs
    return dict(sorted(choices.items()))


def choice_index(prompt_index: int, n: int, delta: CompletionOutput) -> int:
    return prompt_index * n + delta.index
