"""Piecewise graphs of prefill and mixed steps (PAGODA_MIXED_GRAPHS) on CPU.

The platform's "graph pieces" rerun the recorded forward pass in a thread that pauses at each cut, so a
replay runs exactly what a piece holds (the ops between two attention layers, on the static buffers) and
the eager attention between replays must find its q/k/v in the static buffers and leave its output where
the next piece reads it. The CUDA pieces are tested in plugins/platform_cuda/tests/test_cuda_graphs.py.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.engine import piecewise
from pagoda.errors import ConfigError
from pagoda.layers.attention import Attention
from test_decode_graphs import ReplayPlatform, graph_test_plugins
from tiny_models import random_prompts

REPLAYS = {"pieces": 0}


class _Rerun:
    """The pieces of one recorded pass: piece 0 starts ``fn`` again in a thread, each cut pauses it until
    the next piece's replay, and the last piece lets it finish and refills the recorded outputs."""

    def __init__(self, fn, outputs: torch.Tensor, context) -> None:
        self.fn, self.outputs, self.context = fn, outputs, context
        self.resume, self.paused = threading.Semaphore(0), threading.Semaphore(0)

    def replay(self, index: int) -> None:
        if index == 0:
            threading.Thread(target=self._run, daemon=True).start()
        else:
            self.resume.release()
        assert self.paused.acquire(timeout=60), "the rerun did not reach the next cut"
        REPLAYS["pieces"] += 1

    def _run(self) -> None:
        with self.context():
            self.outputs.copy_(self.fn(self._cut))
        self.paused.release()

    def _cut(self) -> None:
        self.paused.release()
        self.resume.acquire()


class PieceReplayPlatform(ReplayPlatform):
    def capture_graph_pieces(self, fn):
        cuts = []
        outputs = fn(lambda: cuts.append(1))
        rerun = _Rerun(fn, outputs, self.inference_context)
        return [lambda i=i: rerun.replay(i) for i in range(len(cuts) + 1)], outputs


@pytest.fixture
def piece_plugins():
    with graph_test_plugins("pieces-cpu", PieceReplayPlatform):
        yield


ARGS = dict(block_size=8, platform="pieces-cpu", attention_backend="torch-graphs", max_num_seqs=8,
            max_num_batched_tokens=96)


@pytest.mark.parametrize("family", ["llama", "gemma3", "qwen3_moe"])
def test_steps_replayed_in_pieces_equal_eager(piece_plugins, tiny_models, monkeypatch, family):
    """Chunked prompts (96-token budget), prefills joining running decodes, a shared prefix: the tokens
    equal an eager engine's, and prefill and mixed steps went through the pieces."""
    path = tiny_models[family][0]
    shared = random_prompts(1, range(40, 41), seed=5)[0]
    prompts = random_prompts(7, range(3, 150), seed=11) + [shared + [7, 8], shared + [9]]
    params = [SamplingParams(temperature=0, max_tokens=6 + 2 * i) for i in range(len(prompts))]
    eager = LLM(model=path, **ARGS, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    monkeypatch.setenv(piecewise.ENV, "4096")  # capped at the step budget, 96 tokens
    llm = LLM(model=path, **ARGS)
    graphs = llm.engine.core.runner.mixed_graphs
    assert sorted(graphs.graphs) == [32, 64, 96]
    layers = [m for m in llm.engine.core.runner.model.modules() if isinstance(m, Attention)]
    assert graphs.layers == layers and all(len(p.replays) == len(layers) + 1 for p in graphs.graphs.values())
    REPLAYS["pieces"] = 0
    graphed = llm.generate(prompts, params, use_tqdm=False)
    assert REPLAYS["pieces"] >= 5 * (len(layers) + 1)  # several steps went through the pieces
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_verify_steps_in_pieces_equal_eager(piece_plugins, tiny_models, monkeypatch):
    """n-gram speculation: verify steps that the verify graphs do not take (a prefill beside them) go through
    the pieces; the tokens equal an eager engine's with the same speculation."""
    path = tiny_models["llama"][0]
    prompts = [p * 4 for p in random_prompts(24, range(4, 12), seed=21)]  # repeats: drafts; 24 > 8 seqs: later prefills
    params = [SamplingParams(temperature=0, max_tokens=8 + 3 * i, ignore_eos=True) for i in range(len(prompts))]
    spec = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}
    eager = LLM(model=path, **ARGS, **spec, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    monkeypatch.setenv(piecewise.ENV, "96")
    llm = LLM(model=path, **ARGS, **spec)
    graphs, drafted = llm.engine.core.runner.mixed_graphs, []

    def size_for(out, _real=graphs.size_for):
        size = _real(out)
        drafted.append(size is not None and any(req.num_draft_tokens for req in out.requests))
        return size

    monkeypatch.setattr(graphs, "size_for", size_for)
    graphed = llm.generate(prompts, params, use_tqdm=False)
    assert any(drafted)  # some steps with drafts to verify went through the pieces
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_longrope_model_runs_eagerly(piece_plugins, tiny_models, monkeypatch, caplog):
    """Phi-3's LongRoPE picks rotary rows by sequence length outside attention: no pieces, a log line."""
    monkeypatch.setenv(piecewise.ENV, "96")
    with caplog.at_level(logging.INFO, logger="pagoda"):
        llm = LLM(model=tiny_models["phi3"][0], **ARGS)
    assert llm.engine.core.runner.mixed_graphs is None
    assert "cannot be cut at attention (it reads the attention layout" in caplog.text
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3


def test_sizes_and_switch(monkeypatch):
    assert piecewise.mixed_graph_sizes(100) == [32, 64, 96]
    sizes = piecewise.mixed_graph_sizes(4096)
    assert sizes[15:18] == [512, 576, 640] and {1024, 1152, 2048, 2304, 4096} <= set(sizes)
    assert all(b - a <= max(32, a // 8) for a, b in zip(sizes[8:], sizes[9:]))  # past 256 tokens, at most 1/8 padding
    monkeypatch.delenv(piecewise.ENV, raising=False)
    assert piecewise.mixed_graph_limit() == 0
    monkeypatch.setenv(piecewise.ENV, "yes")
    with pytest.raises(ConfigError, match="PAGODA_MIXED_GRAPHS='yes'.*e.g. 2048"):
        piecewise.mixed_graph_limit()
