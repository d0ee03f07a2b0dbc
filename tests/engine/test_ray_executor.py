"""``distributed_executor_backend="ray"`` on a local Ray cluster started by the test (CPU, 4 logical CPUs):
tensor- and pipeline-parallel ranks as Ray actors give the mp executor's greedy tokens, release their
placement group at shutdown, and a cluster without the devices is refused naming what it has."""

from __future__ import annotations

import time

import pytest

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.testing import import_or_skip

ray = import_or_skip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def tokens(path: str, backend: str, **sizes) -> list[list[int]]:
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_batched_tokens=40,
              distributed_executor_backend=backend, **sizes)
    try:
        prompts = random_prompts(6, range(5, 40), seed=3)
        return [o.outputs[0].token_ids for o in llm.generate(prompts, SamplingParams(temperature=0, max_tokens=10),
                                                             use_tqdm=False)]
    finally:
        llm.shutdown()


def cpus_free_within(seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    return ray.available_resources().get("CPU", 0)


@pytest.mark.parametrize("sizes", [{"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}], ids=["tp2", "pp2"])
def test_ray_ranks_equal_mp_ranks(tiny_models, ray_cluster, sizes):
    path, _ = tiny_models["qwen3"]
    assert tokens(path, "ray", **sizes) == tokens(path, "mp", **sizes)
    assert cpus_free_within(10) == 4, "the placement group and the actors are released at shutdown"


def test_a_cluster_without_the_devices_is_refused(tiny_models, ray_cluster):
    path, _ = tiny_models["llama"]
    with pytest.raises(ValueError, match=r"tensor_parallel_size 4 x pipeline_parallel_size 2 needs 8 CPU \(one per "
                                         r"rank\), but the Ray cluster has 4 over 1 node\(s\)"):
        LLM(model=path, dtype="float32", tensor_parallel_size=4, pipeline_parallel_size=2,
            distributed_executor_backend="ray")
