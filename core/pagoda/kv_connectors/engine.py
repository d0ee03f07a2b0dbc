"""The engine core's side of a KV connector: the scheduler asks rank 0's connector, and hears of finished loads.

Rank 0's :class:`~pagoda.kv_connectors.step.KVTransferStep` holds the connector instance the scheduler asks
(``Scheduler.attach_kv_connector``); before each schedule the loads every rank finished are handed to the
scheduler (``Scheduler.kv_loads_finished``), whose requests then run.
"""

from __future__ import annotations

import logging

from pagoda.errors import ConfigError
from pagoda.interfaces.scheduler import Scheduler
from pagoda.kv_connectors.step import KVTransferStep
from pagoda.messages import StepStats

logger = logging.getLogger("pagoda")


class KVTransfers:
    """Links the scheduler to rank 0's KV connector step."""

    def __init__(self, scheduler: Scheduler, step: KVTransferStep) -> None:
        try:
            scheduler.attach_kv_connector(step.connector)
        except NotImplementedError as exc:
            raise ConfigError(str(exc)) from None
        self.scheduler = scheduler
        self.step = step
        config, layout = step.connector.config, step.connector.layout
        logger.info("KV connector %s (%s): blocks of %d bytes per rank, namespace %s", config.kv_connector,
                    config.kv_role, layout.block_bytes, layout.namespace)

    def before_schedule(self) -> None:
        """Requests whose loads every rank finished join the running ones."""
        finished = self.step.take_finished()
        if finished:
            self.scheduler.kv_loads_finished(finished)

    def fill_stats(self, stats: StepStats) -> None:
        counts = self.step.counts
        stats.kv_connector_loaded_blocks = counts.loaded_blocks
        stats.kv_connector_load_failed_blocks = counts.load_failed_blocks
        stats.kv_connector_saved_blocks = counts.saved_blocks
        stats.kv_connector_save_failures = counts.save_failures
        stats.kv_connector_dropped_saves = counts.dropped_saves

    def close(self) -> None:
        self.step.close()


def attach_kv_transfers(scheduler: Scheduler, runner) -> KVTransfers | None:
    """The link for an engine whose runner has a KV connector step (bound to it now), else None."""
    step = runner.feature(KVTransferStep)
    if step is None:
        return None
    step.bind(runner)
    return KVTransfers(scheduler, step)
