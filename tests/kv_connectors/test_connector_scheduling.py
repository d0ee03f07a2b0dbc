"""The scheduler with a KV connector (``PolicyScheduler.attach_kv_connector``): a prompt whose next blocks the
connector has waits beside the queue, holding a seat and its blocks, while the others run; it runs once the
ranks report its loads, from the blocks they loaded; blocks entering the prefix cache are offered for saving."""

from __future__ import annotations

import torch

from pagoda.interfaces import SchedulerConfig
from pagoda.interfaces.kv_connector import KVCacheLayout, KVConnector, KVConnectorContext
from pagoda.kv_cache.block_keys import BlockKeys
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.kv_transfer_config import KVTransferConfig
from pagoda.request import Request, RequestStatus
from pagoda.sampling_params import SamplingParams
from pagoda.scheduler import FcfsScheduler


class SetConnector(KVConnector):
    """Supplies the blocks whose keys are in ``held``; wants every other."""

    def __init__(self, held: set[bytes]) -> None:
        layout = KVCacheLayout(1, (2, 4, 1, 1), torch.float32, 4, 0, 1, "0" * 32)
        super().__init__(KVConnectorContext(KVTransferConfig("set"), layout, lambda n: torch.empty(n, 1, 2, 4, 1, 1)))
        self.held = held

    def lookup(self, keys):
        n = 0
        while n < len(keys) and keys[n] in self.held:
            n += 1
        return n

    def read(self, key):
        return None

    def write(self, key, block):
        pass


def request(i: int, tokens: list[int]) -> Request:
    return Request(f"r{i}", list(tokens), SamplingParams(max_tokens=4))


def scheduler(held: set[bytes], num_blocks: int = 32, **config) -> FcfsScheduler:
    sched = FcfsScheduler(SchedulerConfig(max_model_len=64, max_num_batched_tokens=64, **config),
                          KVCacheManager(num_blocks, 4))
    sched.attach_kv_connector(SetConnector(held))
    return sched


def keys_of(tokens: list[int], n: int) -> list[bytes]:
    return BlockKeys(4).first(Request("k", list(tokens), SamplingParams()), n)


PROMPT = list(range(10, 27))  # 17 tokens: 4 full blocks, the last token always computed


def test_a_request_waits_for_its_loads_while_others_run():
    sched = scheduler(set(keys_of(PROMPT, 3)), max_num_seqs=2)
    sched.add_request(request(0, PROMPT))
    sched.add_request(request(1, [1, 2, 3]))
    sched.add_request(request(2, [4, 5, 6]))
    out = sched.schedule()
    assert [r.request_id for r in out.requests] == ["r1"], "r0 loads, r1 runs, r2 waits: r0 holds a seat"
    loads = out.kv_transfers.loads["r0"]
    assert [t.key for t in loads] == keys_of(PROMPT, 3)
    assert [t.block_id for t in loads] == sched.kv_cache.block_ids("r0")[:3]
    assert sched.num_waiting == 2 and sched.num_running == 1
    sched.update_from_output(out, {"r1": 7})
    sched.kv_loads_finished({"r0": 3})
    out = sched.schedule()
    row = {r.request_id: (r.num_computed_tokens, n) for r, n in zip(out.requests, out.num_tokens)}
    assert row["r0"] == (12, 5), "r0 runs from its 12 loaded tokens"
    assert sched.get_request("r0").num_cached_tokens == 12


def test_blocks_that_could_not_be_loaded_are_recomputed():
    sched = scheduler(set(keys_of(PROMPT, 4)))
    sched.add_request(request(0, PROMPT))
    out = sched.schedule()
    assert len(out.kv_transfers.loads["r0"]) == 4 and not out.requests
    sched.kv_loads_finished({"r0": 1})  # a rank read only the first block
    out = sched.schedule()
    assert [(r.num_computed_tokens, n) for r, n in zip(out.requests, out.num_tokens)] == [(4, 13)]
    assert sched.kv_loads.counts.failed_blocks == 3


def test_an_aborted_load_keeps_its_blocks_until_the_ranks_are_done():
    sched = scheduler(set(keys_of(PROMPT, 3)), num_blocks=8)
    sched.add_request(request(0, PROMPT))
    sched.schedule()
    free = sched.kv_cache.num_free_blocks
    sched.finish("r0", RequestStatus.FINISHED_ABORTED)
    assert sched.kv_cache.num_free_blocks == free, "a rank may still be writing them"
    assert sched.schedule().kv_transfers is not None, "steps go on while the load is under way"
    sched.kv_loads_finished({"r0": 3})
    assert sched.kv_cache.num_free_blocks == 8 and sched.num_waiting == 0
    assert sched.schedule().kv_transfers is None


def test_blocks_entering_the_prefix_cache_are_offered():
    sched = scheduler(set())
    sched.add_request(request(0, PROMPT))
    out = sched.schedule()
    assert [t.key for t in out.kv_transfers.saves] == keys_of(PROMPT, 4)
    assert [t.block_id for t in out.kv_transfers.saves] == sched.kv_cache.block_ids("r0")[:4]
    assert not out.kv_transfers.loads


def test_without_a_connector_nothing_changes():
    sched = FcfsScheduler(SchedulerConfig(max_model_len=64, max_num_batched_tokens=64), KVCacheManager(32, 4))
    sched.add_request(request(0, PROMPT))
    out = sched.schedule()
    assert out.kv_transfers is None and out.num_tokens == [17]
    sched.update_from_output(out, {"r0": 3})
    sched.finish("r0", RequestStatus.FINISHED_STOPPED)
    assert sched.schedule().is_empty()
