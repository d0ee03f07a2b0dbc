"""What the output processor tells its listener (the server's /metrics): one gap between tokens per token of a
request's longest sequence after its first, however its sequences' outputs arrive."""

from __future__ import annotations

import transformers

from pagoda.engine.output_processor import OutputProcessor
from pagoda.messages import EngineCoreOutput
from pagoda.sampling_params import SamplingParams
from tiny_models import save_word_tokenizer


class Gaps:
    def __init__(self) -> None:
        self.tokens, self.gaps, self.first = 0, 0, 0

    def on_tokens(self, state, num_tokens, previous, now) -> None:
        self.tokens += num_tokens
        self.first += previous is None
        self.gaps += previous is not None and previous != now

    def on_finished(self, state) -> None:
        pass


def test_sequences_a_step_apart_count_the_longest_ones_gaps(tmp_path):
    """n = 2 with the second sequence a step behind the first (it reached the core a step later): outputs at 4
    times for 3 tokens each. The request's tokens form one stream: 2 gaps (3 tokens of its longest sequence), not 3."""
    save_word_tokenizer(tmp_path)
    listener = Gaps()
    processor = OutputProcessor(transformers.AutoTokenizer.from_pretrained(tmp_path), listener)
    (a, _), (b, _) = processor.add("r", None, [5, 6], SamplingParams(n=2, max_tokens=3, seed=1), arrival_time=0.0)
    steps = [[(a, 7)], [(a, 8), (b, 7)], [(a, 9), (b, 8)], [(b, 9)]]
    for step, outputs in enumerate(steps, start=1):
        processor.process([EngineCoreOutput(rid, [token], finish_reason="length" if token == 9 else None)
                           for rid, token in outputs], now=float(step))
    assert (listener.tokens, listener.first, listener.gaps) == (6, 1, 2)


def test_one_sequence_counts_a_gap_per_output(tmp_path):
    save_word_tokenizer(tmp_path)
    listener = Gaps()
    processor = OutputProcessor(transformers.AutoTokenizer.from_pretrained(tmp_path), listener)
    ((a, _),) = processor.add("r", None, [5, 6], SamplingParams(max_tokens=4), arrival_time=0.0)
    for step, token in enumerate([7, 8, 9, 10], start=1):
        processor.process([EngineCoreOutput(a, [token], finish_reason="length" if step == 4 else None)], now=float(step))
    assert (listener.tokens, listener.first, listener.gaps) == (4, 1, 3)
