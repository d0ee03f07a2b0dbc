"""Pipeline parallelism on CPU: stages in processes of their own, activations over gloo point-to-point.

Greedy tokens with two stages (and two stages of two tensor-parallel ranks each) equal one stage's on tiny
random Llama, Qwen3 and Mixtral models, through chunked prefill, prefix-cache hits and preemptions, with
several requests in flight; two micro-batches run in different stages at once; uneven layer splits; sizes
that do not split and stages that die are named in the errors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import transformers

from tiny_models import VOCAB, make_tiny_model, random_prompts
from test_tensor_parallel import KV_BYTES_TP1, shared_prefix_prompts, tp1_tokens, tp2_engines
from pagoda import LLM, SamplingParams
from pagoda.errors import ConfigError
from pagoda.platforms.cpu import CpuPlatform


def run(path: str, prompts, max_tokens: int = 28, **kwargs):
    """Greedy tokens and the engine's stats; the KV cache holds as many blocks whatever the split (a stage
    caches only its layers), few enough to preempt."""
    ranks = kwargs.get("pipeline_parallel_size", 1) * kwargs.get("tensor_parallel_size", 1)
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_batched_tokens=40, max_num_seqs=8,
              kv_cache_memory=KV_BYTES_TP1 // ranks, **kwargs)
    try:
        outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)
        core = llm.engine.core
        in_flight = core.pipeline.most_in_flight if core.pipeline is not None else 1
        return [o.outputs[0].token_ids for o in outputs], core.snapshot_stats(), in_flight
    finally:
        llm.shutdown()


@pytest.mark.parametrize("family", ["llama", "qwen3", "mixtral"])
def test_pp2_greedy_equals_pp1(tiny_models, family):
    path, _ = tiny_models[family]
    prompts = shared_prefix_prompts()
    expected, _, _ = run(path, prompts)
    got, stats, in_flight = run(path, prompts, pipeline_parallel_size=2)
    assert got == expected
    assert stats.num_preemptions > 0, "the small KV cache should force preemptions"
    assert stats.prefix_cache_hit_rate > 0, "the shared prefix should hit the prefix cache"
    assert in_flight == 2, "two micro-batches should be in flight"
    assert stats.kv_cache_usage == 0.0


def test_pp2_by_tp2_greedy_equals_pp1(tiny_models, monkeypatch):
    """Four ranks: stage 0 (ranks 0, 1) and stage 1 (ranks 2, 3), each stage's pair summing over gloo. CPU ranks
    are processes: allow four of them on a smaller test machine."""
    monkeypatch.setattr(CpuPlatform, "device_count", lambda self: 4)
    path, _ = tiny_models["qwen3"]
    prompts = shared_prefix_prompts()
    expected, _, _ = run(path, prompts)
    got, stats, _ = run(path, prompts, pipeline_parallel_size=2, tensor_parallel_size=2)
    assert got == expected
    assert stats.num_preemptions > 0 and stats.prefix_cache_hit_rate > 0


@pytest.fixture(scope="module")
def three_layer_llama(tmp_path_factory):
    """A tiny Llama of 3 layers with tied embeddings (the last stage loads the LM head from the embedding)."""
    path = tmp_path_factory.mktemp("tiny-llama-3")
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    make_tiny_model(path, "llama", config=config)
    return str(path)


def test_uneven_layer_partition_equals_pp1(three_layer_llama):
    prompts = random_prompts(4, range(6, 30), seed=4)
    expected, _, _ = run(three_layer_llama, prompts, max_tokens=12)
    for partition in ("2,1", [1, 2]):
        got, _, _ = run(three_layer_llama, prompts, max_tokens=12, pipeline_parallel_size=2,
                        pp_layer_partition=partition)
        assert got == expected, partition


def test_sizes_that_do_not_split_are_refused_before_start(three_layer_llama, tiny_models):
    with pytest.raises(ValueError, match=r"pipeline_parallel_size 2 does not divide num_hidden_layers \(3\); .*"
                                         r"--pp-layer-partition 2,1"):
        LLM(model=three_layer_llama, dtype="float32", pipeline_parallel_size=2)
    with pytest.raises(ValueError, match=r"pp_layer_partition 2,2 must give each of the 2 pipeline stages at least "
                                         r"one layer and sum to num_hidden_layers \(3\)"):
        LLM(model=three_layer_llama, dtype="float32", pipeline_parallel_size=2, pp_layer_partition="2,2")
    with pytest.raises(ValueError, match="pp_layer_partition gives 3 stages but pipeline_parallel_size is 2"):
        LLM(model=three_layer_llama, dtype="float32", pipeline_parallel_size=2, pp_layer_partition="1,1,1")
    with pytest.raises(ValueError, match=r"pipeline_parallel_size 4 exceeds num_hidden_layers \(3\)"):
        LLM(model=three_layer_llama, dtype="float32", pipeline_parallel_size=4)
    path, _ = tiny_models["gemma3"]
    with pytest.raises(ConfigError, match="Gemma3ForCausalLM does not run under pipeline parallelism"):
        LLM(model=path, dtype="float32", pipeline_parallel_size=3)
    with pytest.raises(ValueError, match=r"tensor_parallel_size 2 x pipeline_parallel_size 2 puts 4 ranks on this "
                                         r"host, but it has only 2 cpu device"):
        from unittest import mock

        with mock.patch.object(CpuPlatform, "device_count", lambda self: 2):
            LLM(model=tiny_models["llama"][0], dtype="float32", pipeline_parallel_size=2, tensor_parallel_size=2)


def test_two_micro_batches_run_in_different_stages_at_once(tmp_path, monkeypatch):
    """Each rank traces when its stage starts and ends each forward pass (PAGODA_TRACE_DIR): the first stage runs
    step k+1 while the last still runs step k. A model large enough for a step to take milliseconds."""
    path = tmp_path / "model"
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=512,
                                      eos_token_id=None, bos_token_id=None, pad_token_id=None)
    make_tiny_model(path, "llama", config=config)
    monkeypatch.setenv("PAGODA_TRACE_DIR", str(tmp_path / "trace"))
    llm = LLM(model=str(path), dtype="float32", pipeline_parallel_size=2, max_num_batched_tokens=256)
    try:
        llm.generate(random_prompts(8, range(100, 120), seed=5), SamplingParams(temperature=0, max_tokens=6),
                     use_tqdm=False)
    finally:
        llm.shutdown()
    first, last = ([json.loads(line) for line in open(tmp_path / "trace" / f"stage{s}_tp0.jsonl")] for s in (0, 1))
    assert len(first) == len(last) > 4
    overlaps = [k for k in range(len(last) - 1)
                if first[k + 1]["start"] < last[k]["end"] and last[k]["start"] < first[k + 1]["end"]]
    assert overlaps, "stage 0 never ran a step while stage 1 ran the one before"


def test_killed_stage_fails_fast_naming_it(tiny_models):
    """The last stage killed mid-generation: the engine raises, naming the rank and its stage; nothing hangs."""
    path, _ = tiny_models["llama"]
    script = os.path.join(os.path.dirname(__file__), "killed_rank_check.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, script, path, "pipeline_parallel_size=2"], capture_output=True, text=True,
                         env=env, timeout=180)
    raised = re.search(r"raised after ([\d.]+) s: rank 1 \(pipeline stage 1, tensor-parallel rank 0\) \(pid \d+\) "
                       r"exited killed by signal SIGKILL", run.stdout)
    assert raised and float(raised.group(1)) < 15, run.stdout[-1000:] + run.stderr[-3000:]
    assert "workers left: 0" in run.stdout, run.stdout[-1000:]


def test_pp2_with_replayed_decode_graphs_equals_eager(tiny_models, tmp_path, monkeypatch):
    """Every stage replays its decode steps from static buffers (the stage after the first receives into the
    graph's static inputs; the one before the last sends the graph's static outputs), through a plugin platform
    installed for this test (tests/engine/graph_replay.py, an entry point every rank's process finds on PYTHONPATH)."""
    import graph_replay

    graph_replay.install_for_every_rank(tmp_path, monkeypatch)
    path, _ = tiny_models["llama"]
    prompts = random_prompts(6, range(4, 20), seed=9)
    args = dict(platform="replay-pp", attention_backend="torch-graphs-pp", max_tokens=10)
    expected, _, _ = run(path, prompts, enforce_eager=True, **args)
    replays = graph_replay.REPLAYS
    replays[0] = 0
    got, _, in_flight = run(path, prompts, pipeline_parallel_size=2, **args)
    assert replays[0] > 5, "the first stage's decode steps should replay its graphs"
    assert got == expected and in_flight == 2


@pytest.mark.gpu
def test_pp2_on_two_gpus_with_graphs_equals_pp1(tiny_models):
    """Two stages on two GPUs, NCCL sends between them, each stage's decode steps replayed as CUDA graphs
    (float32): the greedy tokens of one GPU."""
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()
    (pp2,) = tp2_engines(path, prompts, [{"tensor_parallel_size": 1, "pipeline_parallel_size": 2}])
    assert pp2["graphs"], "decode steps should be captured"
    assert pp2["tokens"] == tp1_tokens(path, prompts)
