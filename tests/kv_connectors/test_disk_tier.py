"""The offload connector's disk tier: blocks survive an engine restart; a torn file is ignored (its block and those
after it are recomputed, the tokens unchanged)."""

from __future__ import annotations

from pathlib import Path

from pagoda.kv_cache.block_keys import ROOT, block_key
from pagoda.kv_connectors import block_file

from connector_engines import BLOCK, StepLog, engine, generate, prompts


def two_prompts() -> tuple[list[int], list[int]]:
    prefix = prompts(1, 1, 64)[0]
    first, second = (prefix + tail for tail in prompts(2, 2, 5))
    return first, second


def fill_disk(path: str, folder: Path, first: list[int]) -> None:
    llm = engine(path, kv_offload_gib=0.001, kv_offload_dir=str(folder))
    try:
        generate(llm, first)
    finally:
        llm.shutdown()  # the disk writes finish first


def restarted_run(path: str, folder: Path, second: list[int]):
    """A fresh engine on ``folder``: ``second``'s output, its scheduled (first token, count) per step, the stats."""
    llm = engine(path, kv_offload_gib=0.001, kv_offload_dir=str(folder))
    log = StepLog(llm)
    try:
        out = generate(llm, second)
        return out.outputs[0].token_ids, log.computed()[out.request_id], llm.engine.core.snapshot_stats()
    finally:
        llm.shutdown()


def fresh_tokens(path: str, prompt: list[int]) -> list[int]:
    llm = engine(path)
    try:
        return generate(llm, prompt).outputs[0].token_ids
    finally:
        llm.shutdown()


def block_path(folder: Path, tokens: list[int], index: int) -> Path:
    """The file of block ``index`` of a prompt starting with ``tokens`` (the only namespace under ``folder``)."""
    (namespace,) = [p for p in folder.iterdir() if p.is_dir()]
    key = ROOT
    for i in range(index + 1):
        key = block_key(key, tokens[i * BLOCK : (i + 1) * BLOCK])
    return block_file.path_of(namespace, key)


def test_blocks_survive_a_restart(tiny_llama, tmp_path):
    first, second = two_prompts()
    fill_disk(tiny_llama, tmp_path, first)
    assert len(list(tmp_path.glob("*/*/*.kv"))) >= 64 // BLOCK
    tokens, steps, stats = restarted_run(tiny_llama, tmp_path, second)
    assert tokens == fresh_tokens(tiny_llama, second)
    assert steps[0] == (64, 5), "the restarted engine should load the 8 prefix blocks from disk"
    assert stats.kv_connector_loaded_blocks == 8 and stats.kv_connector_load_failed_blocks == 0


def test_a_torn_file_is_ignored(tiny_llama, tmp_path):
    first, second = two_prompts()
    fill_disk(tiny_llama, tmp_path, first)
    torn = block_path(tmp_path, first, 3)
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) // 2])  # as if the machine stopped mid-write without the atomic rename
    tokens, steps, stats = restarted_run(tiny_llama, tmp_path, second)
    assert tokens == fresh_tokens(tiny_llama, second)
    assert steps[0] == (3 * BLOCK, 69 - 3 * BLOCK), "blocks 0-2 load; block 3 and after are recomputed"
    assert (stats.kv_connector_loaded_blocks, stats.kv_connector_load_failed_blocks) == (3, 5)
    assert torn.stat().st_size == len(data), "the torn file was replaced by the recomputed block's"
