"""A KV connector that fails degrades to recompute: reads that raise or give a block of the wrong shape, writes that
raise. Tokens stay those of the engine without a connector; the counters say what failed. A class that is no
KVConnector is refused when its plugin loads; bad settings are refused with the fix."""

from __future__ import annotations

import pytest
import torch

from pagoda.config import EngineConfig
from pagoda.errors import ConfigError
from pagoda.hookspecs import hookimpl
from pagoda.kv_connectors.offload import OffloadConnector
from pagoda.plugins import manager as plugin_manager
from pagoda.plugins.manager import PluginManager

from connector_engines import StepLog, engine, generate, prompts


class FailingReads(OffloadConnector):
    """The offload connector, whose third read raises and whose sixth gives a block of the wrong shape."""

    reads = 0

    def read(self, key):
        FailingReads.reads += 1
        if FailingReads.reads == 3:
            raise OSError("the store went away")
        if FailingReads.reads == 6:
            return torch.zeros(3)
        return super().read(key)


class FailingWrites(OffloadConnector):
    """The offload connector, whose writes raise every other time."""

    writes = 0

    def write(self, key, block):
        FailingWrites.writes += 1
        if FailingWrites.writes % 2:
            raise OSError("disk full")
        super().write(key, block)


class NotAConnector:
    pass


class Plugin:
    @hookimpl
    def register_kv_connectors(self, register) -> None:
        register("failing-reads", FailingReads)
        register("failing-writes", FailingWrites)


class BadPlugin:
    @hookimpl
    def register_kv_connectors(self, register) -> None:
        register("nothing", NotAConnector)


@pytest.fixture
def flaky(monkeypatch):
    monkeypatch.setattr(plugin_manager, "_MANAGER", PluginManager(modules={"failing": Plugin()}, entry_points=False))


def run(path: str, **kwargs):
    prefix = prompts(1, 1, 64)[0]
    a, b, c = (prefix + tail for tail in prompts(2, 3, 5))
    batch = [a, *prompts(3, 3, 60), b, *prompts(4, 3, 60), c]  # each prefix evicted from the device by the next three
    llm = engine(path, **kwargs)
    log = StepLog(llm)
    try:
        outputs = [generate(llm, p) for p in batch]
        return [o.outputs[0].token_ids for o in outputs], llm.engine.core.snapshot_stats(), log
    finally:
        llm.shutdown()


def test_failed_reads_degrade_to_recompute(tiny_llama, flaky):
    expected, _, _ = run(tiny_llama)
    config = {"kv_connector": "failing-reads", "kv_connector_extra_config": {"cpu_gib": 0.001}}
    got, stats, log = run(tiny_llama, kv_transfer_config=config)
    assert got == expected
    assert FailingReads.reads == 6
    assert (stats.kv_connector_loaded_blocks, stats.kv_connector_load_failed_blocks) == (4, 12)
    computed = log.computed()
    b, c = sorted(computed, key=int)[4], sorted(computed, key=int)[8]
    assert computed[b][0] == computed[c][0] == (16, 53), "two blocks load, the rest is recomputed"


def test_failed_writes_are_counted_and_dropped(tiny_llama, flaky):
    expected, _, _ = run(tiny_llama)
    config = {"kv_connector": "failing-writes", "kv_connector_extra_config": {"cpu_gib": 0.001}}
    got, stats, _ = run(tiny_llama, kv_transfer_config=config)
    assert got == expected
    assert stats.kv_connector_save_failures > 0 and stats.kv_connector_saved_blocks > 0


def test_a_class_that_is_no_connector_is_refused_at_load():
    manager = PluginManager(modules={"bad": BadPlugin()}, entry_points=False)
    info = manager.plugins["bad"]
    assert info.status == "failed"
    assert "must be a subclass of pagoda.interfaces.KVConnector" in " ".join(info.errors)


@pytest.mark.parametrize(("settings", "problem"), [
    ({"kv_offload_gib": 1, "kv_transfer_config": '{"kv_connector": "zmq"}'}, "each choose a KV connector"),
    ({"kv_offload_dir": "/tmp"}, "set --kv-offload-gib too"),
    ({"kv_offload_gib": 1, "enable_prefix_caching": False}, "prefix-cache hashes"),
    ({"kv_transfer_config": '{"kv_connector": "offload", "kv_role": "kv_sender"}'}, "kv_role must be one of"),
    ({"kv_transfer_config": '{"connector": "offload"}'}, "unknown key(s) 'connector'"),
])
def test_bad_settings_name_the_fix(settings, problem):
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        EngineConfig(**settings)


def test_an_unknown_connector_names_the_registered_ones(tiny_llama):
    with pytest.raises(ValueError, match="Unknown KV connector 'lmcache'. Available: offload, shared_storage, zmq"):
        engine(tiny_llama, kv_transfer_config='{"kv_connector": "lmcache"}')


def test_a_role_the_connector_does_not_serve_is_refused(tiny_llama):
    with pytest.raises(ConfigError, match="serves kv_role kv_both, not kv_producer"):
        engine(tiny_llama, kv_transfer_config='{"kv_connector": "offload", "kv_role": "kv_producer"}')
