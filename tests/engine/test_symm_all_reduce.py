"""The one-shot symmetric-memory all-reduce's set-up rules that hold without a GPU: which messages it
takes, and the agreement that keeps a second engine of one process off it (torch's rendezvous keys
come from one counter per process: a driver that set it up before would wait forever for fresh
workers). Two gloo ranks in spawned processes."""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from gloo_ranks import on_two_ranks
from pagoda.distributed import symm_all_reduce
from pagoda.distributed.symm_all_reduce import SymmetricAllReduce


def _agree(rank: int, earlier_calls: list[int]) -> tuple[list[bool], int]:
    """Ask twice, as the LL path and its one-shot fallback do; report the answers and the warnings."""
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("pagoda").addHandler(handler)
    symm_all_reduce._rendezvous_calls = earlier_calls[rank]
    answers = [symm_all_reduce.same_history(dist.group.WORLD, torch.device("cpu"), what)
               for what in ("the test path", "its fallback")]
    return answers, len(warnings)


def agreement(tmp_path, earlier_calls: list[int]) -> dict[int, tuple[list[bool], int]]:
    """Per rank: both answers of same_history and how many warnings it logged."""
    return on_two_ranks(_agree, str(tmp_path / "store"), earlier_calls)


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
