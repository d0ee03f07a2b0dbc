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
from pagoda.engine.torch_profiler import ENV


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
        with pytest.raises(RuntimeError, match=f"profiling needs {ENV} set to the folder the traces go to"):
            llm.start_profile()
        monkeypatch.setenv(ENV, str(tmp_path / "traces"))
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
            assert {"aten::mm", "aten::addmm", "aten::linear"} & ops, sorted(ops)[:20]  # the ranks' matmuls
            assert any("all_reduce" in op for op in ops), "each rank's sums over gloo"
        assert greedy(llm, prompts) == expected  # and the engine goes on as before
    finally:
        llm.shutdown()
