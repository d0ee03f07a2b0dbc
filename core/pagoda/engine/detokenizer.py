"""Incremental detokenization with stop strings, for one sequence.

Text is built with two offsets into the token ids (the scheme vLLM and TGI use): ``prefix``
marks the start of a small window decoded only for context, ``read`` the end of the text already
emitted. Each update decodes ``ids[prefix:]`` and ``ids[prefix:read]`` and appends the
difference, so the work per step is proportional to the new tokens, and tokenizers whose
pieces depend on their left neighbour (SentencePiece's leading space) come out right. While the
decoded window ends in U+FFFD (a multi-byte character whose remaining bytes are still to come)
nothing is committed; that wait is bounded by ``MAX_PENDING_TOKENS``, after which the bytes are
taken to be invalid and committed as U+FFFD, as ``tokenizer.decode`` would show them. The first
output token is decoded after the last few prompt tokens, as in vLLM.

Stop strings follow vLLM/OpenAI: generation ends at the first occurrence of any stop string in
the output text; the text is cut just before it, or just after it with
``include_stop_str_in_output``; as in vLLM, none is looked for while fewer than ``min_tokens``
tokens exist. Only the new text plus the ``longest stop - 1`` characters before
it are searched. For streaming, ``take_delta`` holds back ``longest stop - 1`` characters (none
when the stop string is kept in the output) until the sequence finishes, so a stop string that
later gets cut is never half-sent.
"""

from __future__ import annotations

from typing import Any

from pagoda.sampling_params import SamplingParams

PROMPT_CONTEXT_TOKENS = 5  # prompt tokens decoded as left context of the first output token
MAX_PENDING_TOKENS = 8  # longest wait for a multi-byte character to complete
REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns one sequence's generated token ids into text, a few tokens at a time."""

    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self.tokenizer = tokenizer
        self.params = params
        context = list(prompt_token_ids[-PROMPT_CONTEXT_TOKENS:])
        self._ids: list[int] = context  # context tokens followed by every output token
        self._prefix = 0
        self._num_outputs = 0
        self._read = len(context)
        self._text = ""
        self._sent = 0  # characters of _text already handed out by take_delta
        self._stops: list[str] = list(params.stop or [])
        longest = max((len(s) for s in self._stops), default=0)
        self._search_back = max(longest - 1, 0)
        self._hold_back = 0 if params.include_stop_str_in_output else self._search_back
        self.stop_reason: str | None = None  # the stop string that ended the sequence

    @property
    def output_text(self) -> str:
        """The text generated so far (cut at the stop string once one matched)."""
        return self._text

    @property
    def stopped(self) -> bool:
        return self.stop_reason is not None

    def update(self, new_token_ids: list[int]) -> str | None:
        """Append tokens; return the stop string that now ends the output, if one does."""
        if self.stopped or self.tokenizer is None:  # no tokenizer (skip_tokenizer_init): no text
            return None
        self._ids.extend(new_token_ids)
        self._num_outputs += len(new_token_ids)
        force = len(self._ids) - self._read > MAX_PENDING_TOKENS
        return self._commit(force)

    def flush(self) -> str | None:
        """Commit any bytes still waiting to complete a character (call when the sequence ends)."""
        if self.stopped or self.tokenizer is None or self._read == len(self._ids):
            return None
        return self._commit(force=True)

    def take_delta(self, finished: bool) -> str:
        """Text not yet handed out; until ``finished``, keeps back what a stop string could cut."""
        if finished:
            self.flush()
        end = len(self._text)
        if not finished and not self.stopped:
            end = max(end - self._hold_back, self._sent)
        delta = self._text[self._sent : end]
        self._sent = end
        return delta

    def _commit(self, force: bool) -> str | None:
        new_text = self._decode_new(force)
        if not new_text:
            return None
        start = len(self._text)
        self._text += new_text
        return self._check_stop(start)

    def _decode_new(self, force: bool) -> str:
        """Text of the tokens after ``read``; empty while a character is still incomplete."""
        if self._read == len(self._ids):
            return ""
        skip = self.params.skip_special_tokens
        before = self.tokenizer.decode(self._ids[self._prefix : self._read], skip_special_tokens=skip)
        full = self.tokenizer.decode(self._ids[self._prefix :], skip_special_tokens=skip)
        if not force and (len(full) <= len(before) or full.endswith(REPLACEMENT_CHAR)):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return full[len(before) :]

    def _check_stop(self, new_start: int) -> str | None:
        """Find the earliest stop string touching the new text; cut the output there."""
        if not self._stops or self._num_outputs < self.params.min_tokens:
            return None
        window_start = max(new_start - self._search_back, 0)
        best: tuple[int, str] | None = None
        for stop in self._stops:
            at = self._text.find(stop, window_start)
            if at != -1 and (best is None or at < best[0]):
                best = (at, stop)
        if best is None:
            return None
        at, stop = best
        self._text = self._text[: at + len(stop) if self.params.include_stop_str_in_output else at]
        self._sent = min(self._sent, len(self._text))
        self.stop_reason = stop
        return stop
