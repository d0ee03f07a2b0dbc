"""LLM.start_profile() / stop_profile(): a torch profiler trace of the engine's steps from every
tensor-parallel rank (two ranks over gloo on CPU here), written before stop_profile() returns; misuse
is a clear error that leaves the engine serving."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.envs import TORCH_PROFILER_DIR


def trace_ops(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


def greedy(llm: LLM, prompts) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=6)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


def test_every_rank_writes_a_trace_of_the_steps_it_ran(tiny_models, tmp_path, monkeypatch):
    path, _ = tiny_models["llama"]
    prompts = random_prompts(2, range(5, 9), seed=3)
    llm = LLM(model=path, dtype="float32", block_size=8, tensor_parallel_size=2)
    try:
        expected = greedy(llm, prompts)
        with pytest.raises(RuntimeError, match=f"profiling needs {TORCH_PROFILER_DIR.name} set to the folder the traces go to"):
            llm.start_profile()
        monkeypatch.setenv(TORCH_PROFILER_DIR.name, str(tmp_path / "traces"))
        llm.start_profile()
        with pytest.raises(RuntimeError, match="the profiler is already running"):
            llm.start_profile()
        assert greedy(llm, prompts) == expected
        llm.stop_profile()
        with pytest.raises(RuntimeError, match="the profiler is not running"):
            llm.stop_profile()
        traces = {rank: sorted((tmp_path / "traces").glob(f"rank{rank}.*.pt.trace.json.gz")) for rank in (0, 1)}
        assert [len(found) for found in traces.values()] == [1, 1], traces
        for found in traces.values():
            ops = trace_ops(found[0])
            assert {"aten::mm", "aten::addmm", "aten::linear", "mkldnn::_linear_pointwise"} & ops, sorted(ops)[:20]  # the ranks' matmuls
            assert any("all_reduce" in op for op in ops), "each rank's sums over gloo"
        assert greedy(llm, prompts) == expected  # and the engine goes on as before
    finally:
        llm.shutdown()


def test_a_start_that_fails_on_one_rank_leaves_no_rank_profiling(tiny_models, tmp_path, monkeypatch):
    """Rank 1 already profiling (started behind the engine's back) refuses the start: the error names it,
    rank 0's profiler is stopped without a trace, and rank 1's too; the next start and stop work on both
    ranks and write one trace each."""
    from pagoda.executor import messages

    path, _ = tiny_models["llama"]
    monkeypatch.setenv(TORCH_PROFILER_DIR.name, str(tmp_path / "traces"))
    llm = LLM(model=path, dtype="float32", block_size=8, tensor_parallel_size=2)
    try:
        executor = llm.engine.core.executor
        assert executor._tell_workers(messages.Profile(str(tmp_path / "traces"))) == []
        with pytest.raises(RuntimeError, match="profiling failed on a worker rank: rank 1: .*already running"):
            llm.start_profile()
        assert not list((tmp_path / "traces").glob("*.pt.trace.json.gz"))  # both rolled back, no trace
        llm.start_profile()
        greedy(llm, random_prompts(1, range(5, 7), seed=1))
        llm.stop_profile()
        traces = sorted(p.name.split(".")[0] for p in (tmp_path / "traces").glob("*.pt.trace.json.gz"))
        assert traces == ["rank0", "rank1"]
    finally:
        llm.shutdown()


def test_an_engine_that_stops_while_profiling_writes_every_rank_s_trace(tiny_models, tmp_path, monkeypatch):
    path, _ = tiny_models["llama"]
    monkeypatch.setenv(TORCH_PROFILER_DIR.name, str(tmp_path / "traces"))
    llm = LLM(model=path, dtype="float32", block_size=8, tensor_parallel_size=2)
    try:
        llm.start_profile()
        greedy(llm, random_prompts(1, range(5, 7), seed=2))
    finally:
        llm.shutdown()
    traces = sorted(p.name.split(".")[0] for p in (tmp_path / "traces").glob("*.pt.trace.json.gz"))
    assert traces == ["rank0", "rank1"]
