"""The KV connector's step feature (:mod:`pagoda.runner.features`): each rank moves its own heads' blocks.

- ``begin_step``: loads the scheduler started (``SchedulerOutput.kv_transfers.loads``) are read by the
  connector on this rank's transfer thread; once read, they are copied to the device beside the compute
  stream (:class:`~pagoda.kv_connectors.mover.BlockMover`); once copied, the ranks agree (over a gloo group
  of their own) on how many blocks of each request every rank loaded, and rank 0's engine hands those to
  the scheduler. The requests that wait for a load are not in any step meanwhile; the others run.
- ``after_forward``: the blocks the step completes (``kv_transfers.saves``) are copied to pinned host
  buffers behind the forward pass, and written by the connector on the transfer thread; the next step
  does not wait for them, unless it writes one of those blocks before its copy ran (a block freed and
  reused at once), or the connector's role asks for saves before output (producers).

Failures never reach the KV cache: a block a rank cannot read is recomputed (by every rank, from the
first such block on), a write that raises is counted and dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.distributed as dist

from pagoda.interfaces.kv_connector import BlockTransfer, KVConnector, KVTransferPlan
from pagoda.interfaces.platform import SideWork
from pagoda.kv_connectors.mover import BlockMover
from pagoda.runner.features import StepFeature

if TYPE_CHECKING:
    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.runner.model_runner import ModelRunner

logger = logging.getLogger("pagoda")
SAVE_BUFFER_BYTES = 256 << 20  # pinned host memory blocks wait in for the transfer thread
IDLE_POLL_S = 0.001  # a step that only waits for loads sleeps this long for them


@dataclass
class LoadJob:
    """One request's loads on this rank: read (transfer thread), then copied to the device (side stream)."""

    transfers: list[BlockTransfer]
    reading: Future  # -> the host blocks read, from the first (stops at the first it could not read)
    sources: list[torch.Tensor] | None = None
    copying: SideWork | None = None

    def result(self) -> int:
        """Blocks loaded on this rank; -1 while under way."""
        if self.sources is None or (self.copying is not None and not self.copying.done()):
            return -1
        return len(self.sources)


@dataclass
class TransferCounts:
    """This rank's save counters (rank 0's go to the engine's stats)."""

    loaded_blocks: int = 0  # loaded on every rank
    load_failed_blocks: int = 0  # planned but not loaded on some rank: recomputed
    saved_blocks: int = 0  # written by the connector
    save_failures: int = 0  # writes that raised
    dropped_saves: int = 0  # not saved: every host buffer was waiting for the transfer thread


@dataclass
class PendingCopy:
    """Device blocks being copied to the host: a step that writes one of them waits for the copy first."""

    block_ids: set[int]
    work: SideWork


class SaveRing:
    """Pinned host blocks that saves wait in for the transfer thread. The thread writes saves in the order they
    were made, so the buffers go back in the order they were taken: a ring, each take a contiguous run."""

    def __init__(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks  # [size, *block_shape]
        self.size = len(blocks)
        self.head = 0  # the next block to hand out
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> tuple[int, int]:
        """``(start, count)``: up to ``n`` blocks from ``start`` on (fewer at the ring's end, or when it is full)."""
        with self._lock:
            count = min(n, self.size - self.used, self.size - self.head)
            start = self.head
            self.head = (self.head + count) % self.size
            self.used += count
            return start, count

    def give(self, count: int) -> None:
        """The oldest ``count`` blocks taken are free again."""
        with self._lock:
            self.used -= count


class Parts(NamedTuple):
    """What the feature works with once bound to its runner."""

    connector: KVConnector
    mover: BlockMover
    save_buffers: torch.Tensor  # [n, *block_shape] pinned host blocks (the save ring)


class KVTransferStep(StepFeature):
    """Moves this rank's blocks for a KV connector (module docstring). ``build(runner)`` makes its parts when it
    binds to its runner: :meth:`bind` (rank 0's engine, at start) or its first step."""

    def __init__(self, build: Callable[["ModelRunner"], Parts]) -> None:
        self._build = build
        self.connector: KVConnector | None = None
        self._closed = False
        self.group = None  # gloo group of the engine's ranks (None alone), formed at the first step
        self._grouped = False
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="pagoda-kv-transfer")
        self.jobs: dict[str, LoadJob] = {}  # in the order the scheduler started them (alike on every rank)
        self.finished: dict[str, int] = {}  # agreed: request id -> blocks loaded (read by rank 0's engine)
        self.copies: list[PendingCopy] = []
        self.counts = TransferCounts()

    def bind(self, runner: "ModelRunner") -> None:
        """Build the connector for ``runner``'s KV cache (once)."""
        if self.connector is None:
            self.connector, self.mover, blocks = self._build(runner)
            self.ring = SaveRing(blocks)
            self.block_size = self.connector.layout.block_size

    # -- the step hooks ----------------------------------------------------------------------
    def begin_step(self, runner: "ModelRunner", out: "SchedulerOutput", block_tables: list[list[int]]) -> None:
        self.bind(runner)
        if not self._grouped:  # every rank's first step: a collective of them all
            self.group = dist.new_group(backend="gloo") if runner.tp.size > 1 else None
            self._grouped = True
        self._guard_copies(out, block_tables)
        with runner.platform.inference_context():  # the copies write the KV cache, as the steps do
            reported = self._report()
            plan: KVTransferPlan | None = out.kv_transfers
            if plan is not None:
                for request_id, transfers in plan.loads.items():
                    self.jobs[request_id] = LoadJob(transfers, self.thread.submit(self._read, transfers))
                if plan.saves and not out.requests:  # no forward pass: the blocks are complete already
                    self._save(plan.saves)
        if not out.requests and self.jobs and not reported:
            time.sleep(IDLE_POLL_S)  # nothing else to run: give the transfer thread the time

    def after_forward(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor,
                      query_starts: list[int]) -> None:
        plan = out.kv_transfers
        if plan is not None and plan.saves:
            self._save(plan.saves)

    def take_finished(self) -> dict[str, int]:
        """The loads every rank finished since the last call (request id -> blocks loaded)."""
        finished, self.finished = self.finished, {}
        return finished

    def close(self) -> None:
        """Finish the queued transfers, then close the connector (once)."""
        self.thread.shutdown(wait=True)
        if self.connector is not None and not self._closed:
            self._closed = True
            self.connector.close()

    # -- loads -------------------------------------------------------------------------------
    def _read(self, transfers: list[BlockTransfer]) -> list[torch.Tensor]:
        """On the transfer thread: the connector's blocks, from the first, up to the first it cannot supply."""
        layout, blocks = self.connector.layout, []
        for transfer in transfers:
            try:
                block = self.connector.read(transfer.key)
            except Exception as exc:  # noqa: BLE001 - a connector's failure: recompute
                logger.warning("KV connector '%s': read raised %s: %s", self.connector.config.kv_connector,
                               type(exc).__name__, exc)
                block = None
            if block is not None and (tuple(block.shape) != layout.block_shape or block.dtype != layout.dtype
                                      or block.device.type != "cpu"):
                logger.warning("KV connector '%s': read gave a %s %s block on %s; %s %s on the host expected",
                               self.connector.config.kv_connector, block.dtype, tuple(block.shape), block.device,
                               layout.dtype, layout.block_shape)
                self._release_keys([transfer.key])
                block = None
            if block is None:
                break
            blocks.append(block)
        return blocks

    def _report(self) -> bool:
        """Advance this rank's loads; move those every rank finished to ``finished``. Whether any did."""
        for job in self.jobs.values():
            if job.sources is None and job.reading.done():
                job.sources = job.reading.result()
                if job.sources:
                    ids = [t.block_id for t in job.transfers[: len(job.sources)]]
                    job.copying = self.mover.to_device(ids, job.sources)
        if not self.jobs:
            return False
        agreed = self._agree([job.result() for job in self.jobs.values()])
        done = [(request_id, n) for request_id, n in zip(list(self.jobs), agreed) if n >= 0]
        for request_id, n in done:
            job = self.jobs.pop(request_id)
            self.finished[request_id] = n
            self.counts.loaded_blocks += n
            self.counts.load_failed_blocks += len(job.transfers) - n
            self.thread.submit(self._release_keys, [t.key for t in job.transfers[: len(job.sources)]])
        return bool(done)

    def _agree(self, results: list[int]) -> list[int]:
        """Each load's result over the ranks: -1 while any rank is still at it, else the fewest blocks loaded."""
        if self.group is None:
            return results
        values = torch.tensor(results, dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MIN, group=self.group)
        return values.tolist()

    def _release_keys(self, keys: list[bytes]) -> None:
        for key in keys:
            try:
                self.connector.release(key)
            except Exception as exc:  # noqa: BLE001
                logger.warning("KV connector '%s': release raised %s: %s", self.connector.config.kv_connector,
                               type(exc).__name__, exc)

    # -- saves -------------------------------------------------------------------------------
    def _save(self, transfers: list[BlockTransfer]) -> None:
        """Copy the blocks to host buffers behind the queued compute work; the transfer thread writes them."""
        written: list[Future] = []
        while transfers:
            start, count = self.ring.take(len(transfers))
            if not count:  # every buffer waits for the transfer thread: these blocks are not saved
                self.counts.dropped_saves += len(transfers)
                break
            batch, transfers = transfers[:count], transfers[count:]
            ids = [t.block_id for t in batch]
            work = self.mover.to_host(ids, self.ring.blocks[start : start + count])
            self.copies.append(PendingCopy(set(ids), work))
            written.append(self.thread.submit(self._write, batch, start, work))
        if self.connector.saves_before_output():
            for done in written:
                done.result()

    def _write(self, transfers: list[BlockTransfer], start: int, work: SideWork) -> None:
        """On the transfer thread: once the copies ran, hand each block to the connector's write."""
        work.wait()
        try:
            for i, transfer in enumerate(transfers):
                try:
                    self.connector.write(transfer.key, self.ring.blocks[start + i])
                    self.counts.saved_blocks += 1
                except Exception as exc:  # noqa: BLE001 - a failed save is counted; the engine goes on
                    self.counts.save_failures += 1
                    logger.warning("KV connector '%s': write raised %s: %s", self.connector.config.kv_connector,
                                   type(exc).__name__, exc)
            try:
                self.connector.flush()
            except Exception as exc:  # noqa: BLE001
                self.counts.save_failures += len(transfers)
                logger.warning("KV connector '%s': flush raised %s: %s", self.connector.config.kv_connector,
                               type(exc).__name__, exc)
        finally:
            self.ring.give(len(transfers))

    def _guard_copies(self, out: "SchedulerOutput", block_tables: list[list[int]]) -> None:
        """Make this step's compute wait for the copies to the host of blocks it is about to overwrite."""
        self.copies = [c for c in self.copies if not c.work.done()]
        if not self.copies or not out.requests:
            return
        written = set()
        bs = self.block_size
        for req, n, table in zip(out.requests, out.num_tokens, block_tables):
            written.update(table[req.num_computed_tokens // bs : (req.num_computed_tokens + n - 1) // bs + 1])
        for copy in self.copies:
            if not copy.block_ids.isdisjoint(written):
                copy.work.order_before_compute()
