"""Prompt tokenization off the API server's event loop.

Tokenizing a long prompt takes the better part of a millisecond; on the event loop a burst of 500 such
requests held every stream and every other request behind it for that long each, and the engine core sat idle
until the burst was parsed. :class:`AsyncTokenizer` encodes on one worker thread instead: the texts asked for
while that thread is busy are encoded together in one batch call when it frees (a fast tokenizer encodes a batch
in parallel, without the GIL). The worker has its own copy of the tokenizer, since the event loop keeps using
the original to detokenize (a fast tokenizer's Rust object refuses concurrent use).
"""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pagoda.entrypoints.pooling import encode_pairs, ids_only_args


Options = tuple[bool, int | None]  # add_special_tokens, max_length (truncation; None: none)


class AsyncTokenizer:
    """``await encode(text)``: the ids ``tokenizer(text)`` gives, computed on a worker thread in batches."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = copy.deepcopy(tokenizer)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pagoda-tokenize")
        self._pending: list[tuple[str, Options, asyncio.Future]] = []
        self._busy = False

    async def encode(self, text: str, add_special_tokens: bool = True, max_length: int | None = None) -> list[int]:
        """The ids of ``text``; with ``max_length``, cut to that many (the tokenizer's truncation)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((text, (add_special_tokens, max_length), future))
        if not self._busy:
            self._start_batch()
        return await future

    async def encode_pairs(self, pairs: list[tuple[str, str]], max_length: int | None) -> list[tuple[list[int], int | None]]:
        """A cross-encoder's ids of each (text, text) pair and where its second text starts
        (:func:`pagoda.entrypoints.pooling.encode_pairs`), in one call on the worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, encode_pairs, self._tokenizer, pairs, max_length)

    def _start_batch(self) -> None:
        batch, self._pending = self._pending, []
        self._busy = True
        job = asyncio.get_running_loop().run_in_executor(self._executor, self._encode_all, batch)
        job.add_done_callback(lambda done: self._finish(batch, done))

    def _finish(self, batch: list, done: asyncio.Future) -> None:
        self._busy = False
        if done.cancelled():  # the executor shut down
            results: list = [None] * len(batch)
        else:
            results = done.result() if done.exception() is None else [done.exception()] * len(batch)
        for (_, _, future), result in zip(batch, results):
            if future.done():  # the request was cancelled meanwhile
                continue
            if result is None:
                future.cancel()
            elif isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        if self._pending:
            self._start_batch()

    def _encode_all(self, batch: list[tuple[str, Options, asyncio.Future]]) -> list[list[int] | BaseException]:
        """Each text's ids (or the exception encoding it raised): one call for each set of options."""
        results: list[list[int] | BaseException] = [[] for _ in batch]
        for options in {o for _, o, _ in batch}:
            indices = [i for i, (_, o, _) in enumerate(batch) if o == options]
            for i, ids in zip(indices, self._encode_group([batch[i][0] for i in indices], options)):
                results[i] = ids
        return results

    def _encode_group(self, texts: list[str], options: Options) -> list[list[int] | BaseException]:
        try:
            return list(self._call(texts, options))
        except Exception:  # one text the tokenizer rejects: encode each alone, so only that request fails
            return [self._encode_one(text, options) for text in texts]

    def _encode_one(self, text: str, options: Options) -> list[int] | BaseException:
        try:
            return self._call(text, options)
        except Exception as exc:
            return exc

    def _call(self, texts: str | list[str], options: Options):
        special, max_length = options
        return self._tokenizer(texts, add_special_tokens=special, **ids_only_args(max_length))["input_ids"]

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
