"""Piecewise graphs of prefill and mixed steps (``piecewise_graph_tokens``) on CPU.

The platform's "graph pieces" rerun the recorded forward pass in a thread that pauses at each cut, so a
replay runs exactly what a piece holds (the ops between two attention layers, on the static buffers) and
the eager attention between replays must find its q/k/v in the static buffers and leave its output where
the next piece reads it. The CUDA pieces are tested in plugins/platform_cuda/tests/test_cuda_graphs.py and
with flash attention in plugins/attention_flash/tests/test_flash_end_to_end.py.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.layers.attention import Attention
from pagoda.runner import piecewise
from graph_replay import ReplayPlatform
from test_decode_graphs import graph_test_plugins
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


@pytest.mark.parametrize("family, overlap", [("llama", False), ("llama", True), ("gemma3", False), ("qwen3_moe", False)])
def test_steps_replayed_in_pieces_equal_eager(piece_plugins, tiny_models, family, overlap):
    """Chunked prompts (96-token budget), prefills joining running decodes, a shared prefix: the tokens
    equal an eager engine's, and prefill and mixed steps went through the pieces (with overlapped steps too:
    a decode's input id is the step before's token, filled in on the device before the pieces copy it)."""
    path = tiny_models[family][0]
    shared = random_prompts(1, range(40, 41), seed=5)[0]
    prompts = random_prompts(7, range(3, 150), seed=11) + [shared + [7, 8], shared + [9]]
    params = [SamplingParams(temperature=0, max_tokens=6 + 2 * i) for i in range(len(prompts))]
    eager = LLM(model=path, **ARGS, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    llm = LLM(model=path, **ARGS, piecewise_graph_tokens=4096, overlap_steps=overlap)  # capped at the 96-token budget
    assert llm.engine.core.overlap is overlap
    graphs = llm.engine.core.runner.piecewise
    assert sorted(graphs.graphs) == [32, 64, 96]
    layers = [m for m in llm.engine.core.runner.model.modules() if isinstance(m, Attention)]
    assert graphs.layers == layers and all(len(p.replays) == len(layers) + 1 for p in graphs.graphs.values())
    REPLAYS["pieces"] = 0
    graphed = llm.generate(prompts, params, use_tqdm=False)
    assert REPLAYS["pieces"] >= 5 * (len(layers) + 1)  # several steps went through the pieces
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_steps_past_the_limit_run_eagerly(piece_plugins, tiny_models, monkeypatch):
    """With 32 tokens of pieces, a step of more runs eagerly; the tokens still equal an eager engine's."""
    path = tiny_models["llama"][0]
    prompts = random_prompts(6, range(20, 90), seed=3)
    params = [SamplingParams(temperature=0, max_tokens=5 + i) for i in range(len(prompts))]
    eager = LLM(model=path, **ARGS, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    llm = LLM(model=path, **ARGS, piecewise_graph_tokens=32)
    graphs, sizes = llm.engine.core.runner.piecewise, []
    assert sorted(graphs.graphs) == [32]
    monkeypatch.setattr(graphs, "size_for", lambda out, _real=graphs.size_for: sizes.append(_real(out)) or sizes[-1])
    graphed = llm.generate(prompts, params, use_tqdm=False)
    assert 32 in sizes and None in sizes
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_verify_steps_in_pieces_equal_eager(piece_plugins, tiny_models, monkeypatch):
    """n-gram speculation: verify steps that the verify graphs do not take (a prefill beside them) go through
    the pieces; the tokens equal an eager engine's with the same speculation."""
    path = tiny_models["llama"][0]
    prompts = [p * 4 for p in random_prompts(24, range(4, 12), seed=21)]  # repeats: drafts; 24 > 8 seqs: later prefills
    params = [SamplingParams(temperature=0, max_tokens=8 + 3 * i, ignore_eos=True) for i in range(len(prompts))]
    spec = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}
    eager = LLM(model=path, **ARGS, **spec, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    llm = LLM(model=path, **ARGS, **spec, piecewise_graph_tokens=96)
    graphs, drafted = llm.engine.core.runner.piecewise, []

    def size_for(out, _real=graphs.size_for):
        size = _real(out)
        drafted.append(size is not None and any(req.num_draft_tokens for req in out.requests))
        return size

    monkeypatch.setattr(graphs, "size_for", size_for)
    graphed = llm.generate(prompts, params, use_tqdm=False)
    assert any(drafted)  # some steps with drafts to verify went through the pieces
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


@pytest.mark.parametrize("family, reason", [
    ("phi3", "it reads the attention layout"),  # LongRoPE picks rotary rows by sequence length
    ("deepseek_v3", "it reads the attention layout"),  # MLA attends in its own layers
])
def test_models_that_cannot_be_cut_run_eagerly(piece_plugins, tiny_models, caplog, family, reason):
    """No pieces and a log line naming why; generation still works."""
    with caplog.at_level(logging.INFO, logger="pagoda"):
        llm = LLM(model=tiny_models[family][0], **ARGS, piecewise_graph_tokens=96)
    assert llm.engine.core.runner.piecewise is None
    assert f"cannot be cut at attention ({reason}" in caplog.text
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3


def test_sizes_and_setting():
    assert piecewise.piecewise_graph_sizes(100) == [32, 64, 96]
    assert piecewise.piecewise_graph_sizes(512) == list(range(32, 513, 32))
    sizes = piecewise.piecewise_graph_sizes(4096)
    assert sizes[15:18] == [512, 576, 640] and {1024, 1152, 2048, 2304, 4096} <= set(sizes)
    assert all(b - a <= max(32, a // 8) for a, b in zip(sizes[8:], sizes[9:]))  # past 256 tokens, at most 1/8 padding
    with pytest.raises(ValueError, match="piecewise_graph_tokens must be an integer >= 0"):
        LLM(model="unused", piecewise_graph_tokens=-1)


class FailingPiecePlatform(PieceReplayPlatform):
    def capture_graph_pieces(self, fn):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_failed_capture_runs_eagerly(tiny_models, caplog):
    """Recording the pieces fails (a kernel the graph cannot hold): a warning naming the error and the flag,
    steps run eagerly and generation works."""
    with graph_test_plugins("failing-pieces-cpu", FailingPiecePlatform), caplog.at_level(logging.WARNING, logger="pagoda"):
        llm = LLM(model=tiny_models["llama"][0], **{**ARGS, "platform": "failing-pieces-cpu"})
        assert llm.engine.core.runner.piecewise is None
        out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert "recording them as graph pieces failed (operation not permitted" in caplog.text
    assert "--piecewise-graph-tokens 0" in caplog.text and len(out[0].outputs[0].token_ids) == 3
