"""Bitmasks filled on the grammar worker thread (pagoda.guided.runtime): a guided step's bitmask is
filled off the engine's thread and its sampling is queued later, before the next forward pass or
when its tokens are read. Same outputs as the serial path, fill errors surface in the caller,
finished and aborted requests leave no matcher behind."""

from __future__ import annotations

import threading

import pytest
import torch

from guided_models import make_tiny_smollm_vocab_model
from pagoda import LLM, SamplingParams
from pagoda.runner.model_runner import ModelRunner
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.runtime import GuidedSampling
from pagoda.guided.xgrammar_backend import XgrammarBackend
from schemas import SCHEMAS


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return make_tiny_smollm_vocab_model(tmp_path_factory.mktemp("tiny-smollm-vocab"))


def make_llm(model_path: str) -> LLM:
    """Overlapped steps (the GPU platforms' default; the CPU platform's is steps in turn), which the guided
    worker must keep."""
    return LLM(model=model_path, max_model_len=512, kv_cache_memory=64 << 20, max_num_seqs=16, overlap_steps=True)


@pytest.fixture(scope="module")
def llm(model_path) -> LLM:
    return make_llm(model_path)


def mixed_batch() -> list[SamplingParams]:
    """Guided (JSON schemas, a regex with a penalty; greedy and seeded sampling) and unguided rows, all
    with logprobs."""
    params = [SamplingParams(temperature=1.0 if i % 2 else 0.0, seed=i, max_tokens=48, logprobs=2,
                             guided_decoding=GuidedDecodingParams(json=SCHEMAS[name]))
              for i, name in enumerate(sorted(SCHEMAS)[:5])]
    params.append(SamplingParams(temperature=1.0, seed=11, max_tokens=16, logprobs=1, frequency_penalty=0.5,
                                 guided_decoding=GuidedDecodingParams(regex=r"[a-z]{2,5}-\d{2}")))
    params.append(SamplingParams(temperature=1.0, seed=12, max_tokens=30, logprobs=2))  # unguided
    params.append(SamplingParams(temperature=0.0, max_tokens=20, logprobs=0, ignore_eos=True))  # unguided
    return params


def outputs(llm: LLM, params: list[SamplingParams]) -> list[tuple]:
    """Tokens, logprobs and finish reasons; the engine core then finishes a step left in flight."""
    results = llm.generate(["Describe it:"] * len(params), params, use_tqdm=False)
    core = llm.engine.core
    while core.has_unfinished():  # a step launched after the last token (its output is dropped)
        core.step()
    return [(o.outputs[0].token_ids, o.outputs[0].logprobs, o.outputs[0].finish_reason) for o in results]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "serial-steps"])
def test_fills_on_the_worker_give_exactly_the_serial_outputs(llm, overlap, monkeypatch) -> None:
    core, guided = llm.engine.core, llm.engine.core.runner.feature(GuidedSampling)
    threads, later = [], []
    fill = GuidedSampling._fill

    def fill_noting_the_thread(self, to_fill, bitmask) -> None:
        if to_fill:  # (a step whose matchers all terminated fills nothing, in start())
            threads.append(threading.current_thread().name)
        fill(self, to_fill, bitmask)

    monkeypatch.setattr(GuidedSampling, "_fill", fill_noting_the_thread)
    sample_later = ModelRunner._sample_later
    monkeypatch.setattr(ModelRunner, "_sample_later", lambda self, *a: later.append(1) or sample_later(self, *a))
    monkeypatch.setattr(core, "overlap", overlap)
    params = mixed_batch()
    try:
        guided.worker = False  # the serial path: start() fills the bitmask, sampling is queued in the launch
        serial = outputs(llm, params)
        assert threads and set(threads) == {threading.current_thread().name} and not later
        threads.clear()
        guided.worker = True
        threaded = outputs(llm, params)
    finally:
        guided.worker = True
    assert all(name.startswith("pagoda-grammar") for name in threads) and len(later) == len(threads) > 20
    assert threaded == serial
    assert any(o[2] == "stop" for o in serial[:6]) and all(o[1] for o in serial)  # grammars completed; logprobs


def test_a_fill_error_on_the_worker_is_raised_by_the_step_that_needs_the_mask(model_path, monkeypatch) -> None:
    """The same exception as the serial path, raised from generate() (the engine core's step)."""
    fill = XgrammarBackend.fill_bitmasks
    raised_on: list[str] = []

    def failing_fill(self, matchers, bitmask, rows) -> None:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 4:
            raised_on.append(threading.current_thread().name)
            raise ValueError(f"grammar state corrupted in row {rows[0]}")
        fill(self, matchers, bitmask, rows)

    monkeypatch.setattr(XgrammarBackend, "fill_bitmasks", failing_fill)
    params = SamplingParams(temperature=0.0, max_tokens=30, guided_decoding=GuidedDecodingParams(json=SCHEMAS["enum"]))
    errors = []
    for worker in (False, True):
        llm = make_llm(model_path)  # a failed step ends its engine core
        llm.engine.core.runner.feature(GuidedSampling).worker = worker
        with pytest.raises(ValueError, match="grammar state corrupted") as info:
            llm.generate(["Describe it:", "Hello"], [params, SamplingParams(max_tokens=30)], use_tqdm=False)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert raised_on[0] == threading.current_thread().name and raised_on[1].startswith("pagoda-grammar")


def test_finished_and_aborted_guided_requests_leave_no_matcher_behind(llm) -> None:
    engine, runner = llm.engine, llm.engine.core.runner
    schema = GuidedDecodingParams(json=SCHEMAS["enum"])
    tokens = engine.tokenizer.encode("Describe it:")
    for i in range(4):  # logit_bias: the sampler caches tensors per request too
        params = SamplingParams(temperature=1.0, seed=i, max_tokens=40, guided_decoding=schema, logit_bias={5: 1.0})
        engine.add_request(f"g{i}", tokens, params)
    for _ in range(5):
        engine.step()
    assert set(runner.feature(GuidedSampling).states) == {f"g{i}" for i in range(4)}
    assert runner._unsampled is not None  # a guided step's sampling waits: releases wait with it
    engine.abort(["g1", "g2"])
    while engine.has_unfinished_requests() or engine.core.has_unfinished():
        engine.step()
    assert runner._unsampled is None and not runner._late_releases
    assert not runner.feature(GuidedSampling).states and not runner.sampler.controls._cache and not runner._generators


def test_apply_raises_the_fill_error_and_the_next_step_fills(monkeypatch) -> None:
    """GuidedSampling alone: start() returns while the fill runs, apply() raises what the fill raised."""
    from pagoda.request import Request
    from pagoda.guided.runtime import MatcherState

    returned = threading.Event()

    class Matcher:
        def is_terminated(self) -> bool:
            return False

    class Backend:
        def fill_bitmasks(self, matchers, bitmask, rows) -> None:
            assert returned.wait(5)  # the fill goes on after start() has returned
            raise KeyError("no such state")

    guided = GuidedSampling(tokenizer=None, vocab_size=64, stop_token_ids=[0])
    guided.backends["auto"] = Backend()  # type: ignore[assignment]
    monkeypatch.setattr(guided, "_advance_all", lambda requests, prev: [MatcherState(Matcher()) for _ in requests])
    request = Request("r", [1], SamplingParams(guided_decoding=GuidedDecodingParams(regex="x")))
    job = guided.start_masks([request])
    returned.set()
    assert job.running
    with pytest.raises(KeyError, match="no such state"):
        guided.apply_masks(torch.zeros(1, 64), job)
    guided.backends["auto"].fill_bitmasks = lambda matchers, bitmask, rows: bitmask[rows[0], 0].fill_(0)
    logits = torch.zeros(1, 64)
    guided.mask(logits, [request])
    assert torch.isinf(logits[0, :32]).all() and torch.isfinite(logits[0, 32:]).all()
