"""Two gloo ranks in spawned processes: for the tests of what ranks agree on, without a GPU."""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def _rank_main(rank: int, store_file: str, fn: Callable, args: tuple, out) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    try:
        out.put((rank, fn(rank, *args)))
    finally:
        dist.destroy_process_group()


def on_two_ranks(fn: Callable, store_file: str, *args) -> dict[int, object]:
    """``fn(rank, *args)`` (a module-level function) on ranks 0 and 1 of a gloo group (the world), each in a
    process of its own: the results by rank."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(rank, store_file, fn, args, out)) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return results
