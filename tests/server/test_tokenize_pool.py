"""pagoda.server.tokenize_pool: prompts are tokenized on a worker thread, in batches, with exactly the ids the
tokenizer gives one text at a time; the event loop keeps running meanwhile; a text the tokenizer rejects fails
only its own request."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from pagoda.server.errors import APIError
from pagoda.server.state import ServerState
from pagoda.server.tokenize_pool import AsyncTokenizer
from smollm import hf_tokenizer


class Recording:
    """A tokenizer that counts the texts of each call and can hold the worker (``gate``) or reject a text."""

    def __init__(self, gate: threading.Event | None = None, seconds: float = 0.0) -> None:
        self.calls: list[int] = []
        self.gate, self.seconds = gate, seconds

    def __call__(self, texts, add_special_tokens=True, **ids_only):
        batch = texts if isinstance(texts, list) else [texts]
        self.calls.append(len(batch))
        if self.gate is not None:
            self.gate.wait(5)
        time.sleep(self.seconds)
        if any("bad" in t for t in batch):
            raise ValueError("this tokenizer rejects 'bad'")
        ids = [[len(t), int(add_special_tokens)] for t in batch]
        return {"input_ids": ids if isinstance(texts, list) else ids[0]}

    def __deepcopy__(self, memo):
        return self  # the test reads its calls


def test_concurrent_prompts_get_the_ids_of_one_at_a_time():
    tokenizer = hf_tokenizer()
    texts = [f"Prompt {i}: " + "the quick brown fox jumps over the lazy dog " * (i % 7 + 1) for i in range(40)]

    async def run():
        pool = AsyncTokenizer(tokenizer)
        try:
            return await asyncio.gather(*(pool.encode(t, add_special_tokens=i % 2 == 0) for i, t in enumerate(texts)))
        finally:
            pool.close()

    expected = [tokenizer(t, add_special_tokens=i % 2 == 0)["input_ids"] for i, t in enumerate(texts)]
    assert asyncio.run(run()) == expected


def test_truncated_prompts_keep_the_tokenizers_first_tokens():
    tokenizer = hf_tokenizer()
    texts = ["the quick brown fox jumps over the lazy dog " * n for n in (1, 5, 9)]

    async def run():
        pool = AsyncTokenizer(tokenizer)
        try:
            return await asyncio.gather(*(pool.encode(t, max_length=m) for t in texts for m in (None, 12)))
        finally:
            pool.close()

    out = asyncio.run(run())
    expected = [tokenizer(t, **({"truncation": True, "max_length": m} if m else {}))["input_ids"]
                for t in texts for m in (None, 12)]
    assert out == expected and all(len(ids) <= 12 for ids in out[1::2]) and len(out[4]) > 12


def test_texts_asked_for_while_the_worker_is_busy_go_in_one_batch():
    gate = threading.Event()
    tokenizer = Recording(gate)

    async def run():
        pool = AsyncTokenizer(tokenizer)
        first = asyncio.ensure_future(pool.encode("first"))
        await asyncio.sleep(0.05)  # the worker holds "first"
        rest = [asyncio.ensure_future(pool.encode("x" * i)) for i in range(1, 11)]
        await asyncio.sleep(0.05)
        gate.set()
        out = await asyncio.gather(first, *rest)
        pool.close()
        return out

    out = asyncio.run(run())
    assert tokenizer.calls == [1, 10]
    assert out == [[5, 1]] + [[i, 1] for i in range(1, 11)]


def test_a_rejected_text_fails_only_its_request():
    async def run():
        pool = AsyncTokenizer(Recording())
        out = await asyncio.gather(pool.encode("good"), pool.encode("bad one"), pool.encode("fine"),
                                   return_exceptions=True)
        pool.close()
        return out

    good, bad, fine = asyncio.run(run())
    assert good == [4, 1] and fine == [4, 1]
    assert isinstance(bad, ValueError) and "rejects 'bad'" in str(bad)


def test_the_event_loop_runs_while_a_long_prompt_is_tokenized():
    async def run():
        pool = AsyncTokenizer(Recording(seconds=0.3))
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await pool.encode("long")
        ticker.cancel()
        pool.close()
        return ticks

    assert asyncio.run(run()) >= 10  # ~30 ticks of 10 ms in 0.3 s; on the loop itself there would be none


def test_a_cross_encoders_text_pairs_on_the_worker(tmp_path, monkeypatch):
    """/score and /rerank on a cross-encoder: each pair's ids and where its second text starts equal the
    tokenizer's own pair encoding (truncated too), computed on the worker thread."""
    from pagoda.entrypoints.pooling import encode_pairs
    from pagoda.server import tokenize_pool
    from pooling_models import save_bert_tokenizer

    tokenizer = save_bert_tokenizer(tmp_path)
    pairs = [("t1 t2 t3", "t4 t5"), ("t9", "t8 t7 t6 t5 t4 t3 t2 t1"), ("t3 " * 20, "t4")]
    threads = []
    monkeypatch.setattr(tokenize_pool, "encode_pairs",
                        lambda *a: threads.append(threading.current_thread().name) or encode_pairs(*a))

    async def run(limit):
        pool = AsyncTokenizer(tokenizer)
        try:
            return await pool.encode_pairs(pairs, limit)
        finally:
            pool.close()

    for limit in (None, 8):
        got = asyncio.run(run(limit))
        assert got == encode_pairs(tokenizer, pairs, limit)
        ids, second = got[0]
        assert ids == tokenizer("t1 t2 t3", "t4 t5")["input_ids"] and second == 5  # [CLS] t1 t2 t3 [SEP] | t4 t5 [SEP]
    assert all(len(ids) <= 8 for ids, _ in got)
    assert len(threads) == 2 and all(name.startswith("pagoda-tokenize") for name in threads)


def test_text_prompts_without_a_tokenizer_are_refused_naming_the_fix():
    state = ServerState.__new__(ServerState)
    state.engine = SimpleNamespace(encoder=None)
    with pytest.raises(APIError) as err:
        asyncio.run(state.encode("hello"))
    assert err.value.status == 400 and "--skip-tokenizer-init" in str(err.value) and "token ids" in str(err.value)
