"""Tensor parallelism on CPU: two ranks over gloo (the driver plus one spawned worker process).

Greedy tokens at tensor_parallel_size=2 equal those at 1 on tiny random models (GQA split, and
replicated KV heads for Mistral's single KV head), through chunked prefill, prefix-cache hits
and preemptions; a killed rank fails the engine fast with a clear error; bad sizes and
platforms are refused before any process starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import torch

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.config import EngineConfig
from pagoda.errors import ConfigError
from pagoda.executor.workers import check_platform
from pagoda.platforms.cpu import CpuPlatform

KV_BYTES_TP1 = 24 * 2 * 8 * 2 * 32 * 4  # 24 blocks of 8 tokens (2 layers, 2 KV heads of <= 32 floats, K and V)


def shared_prefix_prompts() -> list[list[int]]:
    """Prompts sharing a 16-token prefix (two blocks of 8), then different tails."""
    prefix = random_prompts(1, range(16, 17), seed=11)[0]
    return [prefix + tail for tail in random_prompts(8, range(4, 24), seed=12)]


def run(path: str, tp: int, prompts, **kwargs):
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_batched_tokens=40, max_num_seqs=8,
              kv_cache_memory=KV_BYTES_TP1 // tp, tensor_parallel_size=tp, **kwargs)
    try:
        params = SamplingParams(temperature=0, max_tokens=28, logprobs=0)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        return outputs, llm.engine.core.snapshot_stats()
    finally:
        llm.shutdown()


# DeepSeek: heads split over the ranks, the latent cached whole on each (its ranks hold half the blocks here)
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v2",
                                    "deepseek_v3"])
def test_tp2_greedy_equals_tp1(tiny_models, family):
    path, _ = tiny_models[family]
    prompts = shared_prefix_prompts()
    expected, _ = run(path, 1, prompts)
    got, stats = run(path, 2, prompts)
    assert stats.num_preemptions > 0, "the small KV cache should force preemptions"
    assert stats.prefix_cache_hit_rate > 0, "the shared prefix should hit the prefix cache"
    for a, b in zip(expected, got):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        lp_a = [next(iter(d.values())).logprob for d in a.outputs[0].logprobs]
        lp_b = [next(iter(d.values())).logprob for d in b.outputs[0].logprobs]
        assert torch.allclose(torch.tensor(lp_a), torch.tensor(lp_b), atol=1e-4)


def test_tp2_mixes_steps_that_skip_and_take_rank_0s_tokens(tiny_models):
    """Greedy steps skip rank 0's token broadcast (``Sampler.picks_alike``); steps with a seeded draw or a
    penalty take it. Every rank must decide alike (else a collective is missing): a batch where the
    sampled requests end early runs both kinds of step, and its tokens equal TP=1's."""
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()[:6]
    params = [SamplingParams(temperature=0, max_tokens=20)] * 4 + [
        SamplingParams(temperature=0.8, seed=7, max_tokens=5), SamplingParams(temperature=0, max_tokens=8,
                                                                             repetition_penalty=1.5)]
    tokens = {}
    for tp in (1, 2):
        llm = LLM(model=path, dtype="float32", block_size=8, max_num_seqs=8, tensor_parallel_size=tp)
        try:
            tokens[tp] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        finally:
            llm.shutdown()
    assert tokens[2] == tokens[1]
    assert [len(t) for t in tokens[2]] == [20] * 4 + [5, 8]


NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tp2_with_ngram_speculation_equals_tp1(tiny_models, family):
    """Rank 0 proposes and verifies; both ranks run the verify steps (the vocab-parallel LM head over the
    drafted positions), and the worker follows the trims of rejected drafts' tokens and blocks."""
    path, _ = tiny_models[family]
    prompts = [p * 3 for p in random_prompts(4, range(6, 14), seed=3)] + shared_prefix_prompts()[:4]
    expected, _ = run(path, 1, prompts)
    got, stats = run(path, 2, prompts, speculative_config=NGRAM)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert stats.spec_num_draft_tokens > stats.spec_num_accepted_tokens > 0, "drafts accepted and rejected"
    assert stats.kv_cache_usage == 0.0  # every block free again


def test_tp2_with_a_draft_model_on_rank_0_equals_tp1(tiny_models):
    """The draft model runs whole on rank 0 (its own runner and cache, no collectives) beside the sharded
    target; here the target itself as its draft, so most drafts are accepted."""
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()[:4]
    expected, _ = run(path, 1, prompts)
    draft = f'{{"method": "draft", "model": "{path}", "num_speculative_tokens": 3}}'
    got, stats = run(path, 2, prompts, speculative_config=draft)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert stats.spec_num_accepted_tokens > 0


def test_proposers_without_tp_support_are_refused_before_start(tiny_models, monkeypatch):
    """A (plugin) proposer that does not declare ``supports_tensor_parallel``: refused before any worker starts."""
    from pagoda.spec_decode.ngram import NgramProposer

    monkeypatch.setattr(NgramProposer, "supports_tensor_parallel", False)
    path, _ = tiny_models["llama"]
    with pytest.raises(ConfigError, match="the ngram proposer does not run with tensor parallelism"):
        LLM(model=path, dtype="float32", tensor_parallel_size=2, speculative_config=NGRAM)


def test_killed_rank_fails_fast_with_a_clear_error(tiny_models):
    """In a process of its own: on gloo the engine raises; a driver stuck in an NCCL collective exits 1."""
    path, _ = tiny_models["llama"]
    script = os.path.join(os.path.dirname(__file__), "killed_rank_check.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, script, path], capture_output=True, text=True, env=env, timeout=180)
    reason = r"rank 1 \(pid \d+\) exited killed by signal SIGKILL"
    raised = re.search(r"raised after ([\d.]+) s: tensor-parallel " + reason, run.stdout)
    if raised is None and torch.cuda.device_count() >= 2:  # a driver stuck in an NCCL collective: the grace exit
        assert run.returncode == 1 and re.search(reason + r".*stuck in a collective", run.stderr), run.stderr[-3000:]
    else:
        assert raised and float(raised.group(1)) < 15, run.stdout[-1000:] + run.stderr[-3000:]


def test_leaving_a_group_a_rank_never_leaves_gives_up_after_leave_s(monkeypatch, caplog):
    """NCCL's destroy waits for every rank: one that never comes costs the driver LEAVE_S, not a hang."""
    from pagoda.executor import workers

    never = threading.Event()
    monkeypatch.setattr(workers.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(workers.dist, "destroy_process_group", never.wait)
    monkeypatch.setattr(workers, "LEAVE_S", 0.3)
    start = time.monotonic()
    workers._leave_group()
    assert 0.3 <= time.monotonic() - start < 5
    assert "a rank did not leave with this one" in caplog.text
    never.set()


def test_sizes_that_do_not_split_are_refused_before_start(tiny_models):
    path, _ = tiny_models["llama"]  # 4 heads, 2 KV heads, intermediate 128
    with pytest.raises(ValueError, match="tensor_parallel_size 3 does not divide num_attention_heads"):
        LLM(model=path, dtype="float32", tensor_parallel_size=3)
    with pytest.raises(ValueError, match="tensor_parallel_size 8 does not divide num_attention_heads"):
        LLM(model=path, dtype="float32", tensor_parallel_size=8)


def test_platform_without_backend_or_devices_is_refused():
    class NoCollectives(CpuPlatform):
        def dist_backend(self):
            return None

    class OneDevice(CpuPlatform):
        def device_count(self):
            return 1

    config = EngineConfig(tensor_parallel_size=2)
    with pytest.raises(ValueError, match="has no torch.distributed backend"):
        check_platform(config, NoCollectives(), 2)
    with pytest.raises(ValueError, match="has only 1 cpu device"):
        check_platform(config, OneDevice(), 2)
    assert check_platform(config, CpuPlatform(), 2) == "gloo"
    with pytest.raises(ValueError, match="tensor_parallel_size must be an integer >= 1"):
        EngineConfig(tensor_parallel_size=0)


def test_disable_custom_all_reduce_leaves_every_sum_to_the_backend(tiny_models):
    """--disable-custom-all-reduce reaches EngineConfig, and ranks then never ask the platform for its fast
    all-reduce (ranks of several hosts never do); at TP=2 the tokens stay those of TP=1."""
    import argparse

    from pagoda.entrypoints.engine_args import add_engine_args, engine_config
    from pagoda.executor.workers import fast_sums
    from pagoda.plugins import get_plugin_manager

    parser = argparse.ArgumentParser()
    add_engine_args(parser, get_plugin_manager())
    assert engine_config(parser.parse_args(["--disable-custom-all-reduce"]), None).disable_custom_all_reduce
    assert not engine_config(parser.parse_args([]), None).disable_custom_all_reduce
    assert fast_sums(EngineConfig(), one_host=True) and not fast_sums(EngineConfig(), one_host=False)
    assert not fast_sums(EngineConfig(disable_custom_all_reduce=True), one_host=True)
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()
    expected, _ = run(path, 1, prompts)
    got, _ = run(path, 2, prompts, disable_custom_all_reduce=True)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]


def test_torchrun_two_processes_match_one(tiny_models, tmp_path):
    """`torchrun --nproc-per-node 2 -m pagoda.cli.main generate ... -tp 2`: the multi-node path, on one host."""
    path, _ = tiny_models["qwen3"]
    prompt = " ".join(f"t{i}" for i in random_prompts(1, range(12, 13), seed=5)[0])
    flags = ["generate", "--model", path, prompt, "--temperature", "0", "--max-tokens", "12", "--json",
             "--dtype", "float32", "--kv-cache-memory", str(1 << 22), "--log-level", "warning"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run([sys.executable, "-m", "pagoda.cli.main", *flags], capture_output=True, text=True,
                            env=env, timeout=120)
    assert single.returncode == 0, single.stderr
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "pagoda.cli.main", *flags, "--tensor-parallel-size", "2"]
    pair = subprocess.run(torchrun, capture_output=True, text=True, env=env, timeout=180)
    assert pair.returncode == 0, pair.stderr[-3000:]
    assert pair.stdout.strip() and pair.stdout.strip() == single.stdout.strip()


def tp1_tokens(path: str, prompts, max_tokens: int = 40) -> list[list[int]]:
    llm = LLM(model=path, dtype="float32", block_size=16, max_num_seqs=16, gpu_memory_utilization=0.3)
    try:
        assert llm.engine.core.runner.graphs is not None, "decode steps should be captured"
        return [o.outputs[0].token_ids for o in llm.generate(
            prompts, SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)]
    finally:
        llm.shutdown()


def tp2_engines(path: str, prompts, engines: list[dict]) -> list[dict]:
    """The engines (LLM keyword arguments, TP=2 added) one after another in a fresh process
    (tp_engines_check.py): one result each."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    script = os.path.join(os.path.dirname(__file__), "tp_engines_check.py")
    spec = {"model": path, "prompts": prompts, "max_tokens": 40,
            "engines": [{"tensor_parallel_size": 2, **engine} for engine in engines]}
    run = subprocess.run([sys.executable, script, json.dumps(spec)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


@pytest.mark.gpu
@pytest.mark.parametrize("disable_custom_all_reduce", [False, True])  # the csrc LL kernel (default), NCCL alone
def test_tp2_on_two_gpus_with_graphs_equals_tp1(tiny_models, disable_custom_all_reduce):
    """CUDA graphs capturing the all-reduces: greedy tokens at TP=2 equal TP=1 (float32)."""
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()
    (tp2,) = tp2_engines(path, prompts, [{"disable_custom_all_reduce": disable_custom_all_reduce}])
    assert tp2["graphs"], "decode steps should be captured"
    assert tp2["fast"] == (None if disable_custom_all_reduce else "LLAllReduce")
    assert tp2["tokens"] == tp1_tokens(path, prompts)


@pytest.mark.gpu
def test_a_second_tp2_engine_in_one_process_sums_over_nccl(tiny_models):
    """Torch's rendezvous cannot set symmetric memory up again in a process that did it for an engine
    before (it waited forever): the second engine sums over NCCL, with the same tokens."""
    path, _ = tiny_models["llama"]
    prompts = shared_prefix_prompts()
    first, second = tp2_engines(path, prompts, [{}, {}])
    assert (first["fast"], second["fast"]) == ("LLAllReduce", None)  # the default, then NCCL
    assert first["tokens"] == second["tokens"] == tp1_tokens(path, prompts)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_tp2_speculation_on_two_gpus_with_verify_graphs_equals_tp1(tiny_models, method):
    """Both ranks capture verify graphs and pad each verify step to the same size (their collectives
    meet); greedy tokens with speculation at TP=2 (ngram, or the target as its own draft model on
    rank 0 with its own graphs) equal TP=1 without it (float32)."""
    path, _ = tiny_models["llama"]
    prompts = [p * 3 for p in random_prompts(4, range(6, 14), seed=3)] + shared_prefix_prompts()[:4]  # the latter
    spec = NGRAM  # accept drafts (on CPU: none of the former's, 27 of the latter's) if method == "ngram" else f'{{"method": "draft", "model": "{path}", "num_speculative_tokens": 3}}'
    (tp2,) = tp2_engines(path, prompts, [{"speculative_config": spec}])
    assert tp2["verify_graphs"], "verify steps should be captured"
    assert tp2["accepted"] > 0
    assert tp2["tokens"] == tp1_tokens(path, prompts)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["oneshot", "platform"])  # torch's one-shot path; the platform's (the LL kernel)
def test_symmetric_all_reduce_sums_like_nccl_on_two_gpus(mode):
    """The fast path against NCCL on random bf16/fp32 tensors of every size it takes, eager and graph-replayed,
    and a graph of 64 dependent sums between matmuls."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    script = os.path.join(os.path.dirname(__file__), "symm_all_reduce_check.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          script, mode], capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert run.stdout.count("symm all-reduce ok") == 2
