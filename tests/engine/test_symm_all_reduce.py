"""The one-shot symmetric-memory all-reduce's set-up rules that hold without a GPU: which messages it
takes, and the agreement that keeps a second engine of one process off it (torch's rendezvous keys
come from one counter per process: a driver that set it up before would wait forever for fresh
workers). Two gloo ranks in spawned processes."""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pagoda.distributed import symm_all_reduce
from pagoda.distributed.symm_all_reduce import SymmetricAllReduce


def _agree(rank: int, store_file: str, earlier_calls: list[int], out) -> None:
    """Ask twice, as the LL path and its one-shot fallback do; report the answers and the warnings."""
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("pagoda").addHandler(handler)
    try:
        symm_all_reduce._rendezvous_calls = earlier_calls[rank]
        answers = [symm_all_reduce.same_history(dist.group.WORLD, torch.device("cpu"), what)
                   for what in ("the test path", "its fallback")]
        out.put((rank, (answers, len(warnings))))
    finally:
        dist.destroy_process_group()


def agreement(tmp_path, earlier_calls: list[int]) -> dict[int, tuple[list[bool], int]]:
    """Per rank: both answers of same_history and how many warnings it logged."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_agree, args=(rank, str(tmp_path / "store"), earlier_calls, out)) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return results


def test_ranks_with_the_same_rendezvous_history_agree(tmp_path) -> None:
    assert agreement(tmp_path, [2, 2]) == {0: ([True, True], 0), 1: ([True, True], 0)}


def test_a_driver_that_set_up_an_earlier_engine_keeps_every_rank_off(tmp_path) -> None:
    """Rank 0 (the driver process) made a rendezvous for an engine before; its new worker did not.
    Every rank says no to both paths, with one warning."""
    assert agreement(tmp_path, [1, 0]) == {0: ([False, False], 1), 1: ([False, False], 1)}


def test_messages_taken() -> None:
    op = SymmetricAllReduce(torch.empty(0, dtype=torch.uint8), "0", max_bytes=1024)
    assert op.fits(torch.zeros(8, dtype=torch.bfloat16)) and op.fits(torch.zeros(256))
    assert not op.fits(torch.zeros(1, dtype=torch.bfloat16))  # 2 bytes: torch's kernel refuses it
    assert not op.fits(torch.zeros(257))  # over max_bytes
    assert not op.fits(torch.zeros(16, 4).t())  # not contiguous
