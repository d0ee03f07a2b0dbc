"""Data parallelism on CPU: two engine cores behind one front end (offline ``LLM(data_parallel_size=2)``).

Greedy tokens equal one core's; requests spread over both cores; a prompt whose prefix one core holds goes
to that core (and hits its prefix cache) unless it is much busier; a core that dies aborts only its own
requests while the other finishes its own.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.engine.engine import LLMEngine
from pagoda.engine_core.dp_client import DataParallelClient, merge_stats, start_cores
from pagoda.engine_core.router import CoreRouter, block_hashes
from pagoda.loader import load_tokenizer, resolve_model
from pagoda.messages import StepStats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_helpers import build_test_core, engine_config  # noqa: E402


def test_router_spreads_load_and_follows_prefixes():
    router = CoreRouter(2, block_size=4)
    prefix = list(range(8))  # two full blocks
    first = router.choose(prefix + [100, 101])
    router.load[first] += 1
    other = router.choose([50, 51, 52, 53, 54])
    assert other != first, "the least loaded core takes a new prefix"
    router.load[other] += 1
    assert router.choose(prefix + [7, 7, 7]) == first, "a known prefix goes to its core"
    router.load[first] += 5  # now much busier (6 against 1)
    assert router.choose(prefix + [9]) == other, "unless that core is much busier"
    router.died(other)
    assert router.choose([1, 2, 3]) == first, "a dead core is never chosen"
    router.died(first)
    with pytest.raises(RuntimeError, match="every data-parallel engine core has died"):
        router.choose([1])
    assert block_hashes([1, 2, 3, 4, 5], 4) == block_hashes([1, 2, 3, 4], 4) != block_hashes([1, 2, 3, 5], 4)


def test_merged_stats_sum_counts_and_average_fractions():
    merged = merge_stats([StepStats(num_running=2, kv_cache_usage=0.5, num_preemptions=1),
                          StepStats(num_running=3, kv_cache_usage=0.25, num_preemptions=4)])
    assert (merged.num_running, merged.kv_cache_usage, merged.num_preemptions) == (5, 0.375, 5)


def tokens(path: str, prompts, **kwargs):
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_seqs=8, **kwargs)
    try:
        out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
        client = llm.engine.client
        return [o.outputs[0].token_ids for o in out], client, llm
    except BaseException:
        llm.shutdown()
        raise


def test_dp2_spreads_requests_follows_prefixes_and_equals_dp1(tiny_models):
    path, _ = tiny_models["llama"]
    prompts = random_prompts(8, range(18, 30), seed=21)  # different prompts: spread by load
    expected, _, llm = tokens(path, prompts)
    llm.shutdown()
    got, client, llm = tokens(path, prompts, data_parallel_size=2)
    try:
        assert isinstance(client, DataParallelClient)
        assert got == expected
        assert client.replicas.router.routed == [4, 4]
        # a prompt repeating prompt 3's first 16 tokens (two blocks): the core that served prompt 3, and a hit there
        repeat = prompts[3][:16] + [5, 6, 7]
        routed = list(client.replicas.router.routed)
        llm.generate([repeat], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
        holder = next(d for d in (0, 1) if client.replicas.router.routed[d] > routed[d])
        assert holder == 3 % 2, "prompts alternate over the cores: prompt 3 went to core 1"
        hits = [client.clients[d].call_utility("snapshot_stats")["prefix_cache_hit_rate"] for d in (0, 1)]
        assert hits[holder] > 0 and hits[1 - holder] == 0
    finally:
        llm.shutdown()


def test_a_dead_core_aborts_only_its_requests(tiny_models):
    """Core 1 killed while both run requests (steps slowed down): core 1's requests end aborted, core 0's get all
    their tokens, and new requests go to core 0."""
    path, _ = tiny_models["llama"]
    config = engine_config(path, dtype="float32", data_parallel_size=2)
    client = DataParallelClient(start_cores(config, build_test_core, "WARNING"))
    engine = LLMEngine(client, load_tokenizer(resolve_model(path)), config)
    try:
        for c in client.clients:
            c.call_utility("set_step_delay", 0.05)
        params = SamplingParams(temperature=0, max_tokens=40)
        for i, prompt in enumerate(random_prompts(4, range(8, 12), seed=2)):
            engine.add_request(str(i), prompt, params)
        on_core = {i: client.replicas.owner[str(i)] for i in range(4)}
        assert sorted(on_core.values()) == [0, 0, 1, 1]
        finished = {}
        for _ in range(3):
            engine.step()
        os.kill(client.clients[1].owner.pid, signal.SIGKILL)
        while engine.has_unfinished_requests():
            finished.update({o.request_id: o for o in engine.step() if o.finished})
        for i, core in on_core.items():
            out = finished[str(i)].outputs[0]
            assert (out.finish_reason, len(out.token_ids) == 40) == (("abort", False) if core == 1 else ("length", True))
        engine.add_request("after", [1, 2, 3], SamplingParams(temperature=0, max_tokens=3))
        done = []
        while engine.has_unfinished_requests():
            done += [o for o in engine.step() if o.finished]
        assert done[0].outputs[0].finish_reason == "length" and client.replicas.owner == {}
    finally:
        engine.shutdown()
