"""PAGODA_TRACE_DIR: the core writes one line per step and one per first token, in order, and its
garbage-collection pauses; benchmarks/trace_report.py reads them."""

from __future__ import annotations

import gc
import itertools
import json
import sys
from pathlib import Path

import pytest

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.bench.step_floor import read_steps
from pagoda.engine_core.trace import CountDeltas
from pagoda.platforms.cpu import CpuPlatform

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.trace_report import report  # noqa: E402


def test_core_trace_records_steps_and_first_tokens(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("PAGODA_TRACE_DIR", str(tmp_path))
    llm = LLM(model=tiny_models["llama"][0], block_size=8)
    prompts = random_prompts(5, range(5, 12), seed=3)
    llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                 use_tqdm=False)
    gc.collect()  # a full collection is always recorded
    llm.engine.core.trace.close()
    lines = [json.loads(line) for line in (tmp_path / "core.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "step" in r]
    firsts = [r for r in lines if "request" in r]
    assert sum(r["outputs"] for r in steps) == 5 * 4  # every output token came out of a traced step
    assert all(r["seconds"] >= 0 and r["tokens"] >= r["seqs"] for r in steps if r["seqs"])
    assert len(firsts) == 5 and len({r["request"] for r in firsts}) == 5
    for r in firsts:
        assert r["arrival"] <= r["received"] <= r["launched"] <= r["first_token"]
    pauses = [r for r in lines if "gc" in r]
    assert any(r["gc"] == 2 for r in pauses) and all(r["seconds"] >= 0 and r["start"] > 0 for r in pauses)
    read = report(tmp_path)
    assert read["steps"]["all"]["count"] == sum(1 for r in steps if r["seqs"])
    assert read["steps"]["mixed"]["count"] >= 1 and read["steps"]["decode"]["count"] >= 3  # 5 prompts, 4 tokens each
    assert read["first_tokens"]["prefill"]["count"] == 5 and read["first_tokens"]["ttft"]["count"] == 0  # no server
    assert read["gc"]["core"]["full"] >= 1
    gc.collect()  # after close: nothing is written to the closed file


def test_count_deltas_report_what_grew():
    counts = iter([{"a": 1, "b": 5}, {"a": 1, "b": 7}, {"a": 4, "b": 7}, {"a": 4, "b": 7, "c": 2}])
    deltas = CountDeltas(lambda: next(counts))
    assert [deltas(), deltas(), deltas()] == [{"b": 2}, {"a": 3}, {"c": 2}]


def test_steps_carry_the_allocator_events_of_the_platform(tiny_models, tmp_path, monkeypatch):
    """A step's line holds the growth of Platform.allocator_counts during it (CUDA: cudaMalloc calls, retries)."""
    calls = itertools.count()
    monkeypatch.setattr(CpuPlatform, "allocator_counts", lambda self: {"device_allocs": next(calls) // 3, "alloc_retries": 0})
    monkeypatch.setenv("PAGODA_TRACE_DIR", str(tmp_path))
    llm = LLM(model=tiny_models["llama"][0], block_size=8)
    llm.generate([{"prompt_token_ids": [5, 6, 7]}], SamplingParams(temperature=0, max_tokens=9, ignore_eos=True),
                 use_tqdm=False)
    llm.engine.core.trace.close()
    steps = [r for r in map(json.loads, (tmp_path / "core.jsonl").read_text().splitlines()) if "step" in r]
    assert [r.get("device_allocs", 0) for r in steps].count(1) == len(steps) // 3
    assert not any("alloc_retries" in r for r in steps)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_trace_counts_keys_read_and_causal_pairs(tiny_models, tmp_path, monkeypatch, overlap):
    """Two prompts of 3 and 5 tokens, 4 new tokens each: the prefill reads 8 keys over 3*4/2 + 5*6/2 causal pairs,
    then each decode step reads every earlier token and its own."""
    monkeypatch.setenv("PAGODA_TRACE_DIR", str(tmp_path))
    llm = LLM(model=tiny_models["llama"][0], block_size=8, overlap_steps=overlap)
    llm.generate([{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [1, 2, 3, 4, 5]}],
                 SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    llm.engine.core.trace.flush()
    steps = [s for s in read_steps(tmp_path, since=0.0) if s["seqs"]]
    assert [(s["tokens"], s["kv"], s["pairs"]) for s in steps] == [(8, 8, 21), (2, 10, 10), (2, 12, 12), (2, 14, 14)]
    llm.engine.core.trace.close()
