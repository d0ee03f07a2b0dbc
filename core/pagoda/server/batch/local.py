"""A batch file run against a model of this machine: the engine core process, the API front end and the
app ``pagoda serve`` would serve, with no socket (``pagoda run-batch``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Optional

from pagoda.config import EngineConfig
from pagoda.server.batch.records import plan, read_done
from pagoda.server.batch.runner import BatchSummary, run_batch


@dataclass
class BatchJob:
    """What ``pagoda run-batch`` runs."""

    input_path: str
    output_path: str
    served_model_names: list[str]
    window: int  # most lines in flight (or finished, waiting for an earlier one to be written)
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    max_n_per_request: int = 16
    progress: Optional[bool] = None  # None: a progress bar on a terminal
    log_level: str = "info"
    core_factory: Optional[Callable] = None  # builds the engine core (default: EngineCore.from_config)


def read_lines(path: str) -> list[tuple[int, str]]:
    """The input file's lines, numbered from 1."""
    with open(path, encoding="utf-8", errors="replace") as source:
        return [(number, line) for number, line in enumerate(source, 1)]


def run_batch_file(config: EngineConfig, job: BatchJob) -> BatchSummary:
    """Run the lines of ``job.input_path`` not yet answered in ``job.output_path``; the engine starts
    only when there is something to run."""
    from pagoda.engine_core.client import CoreProcess
    from pagoda.engine_core.core import EngineCore

    done, done_lines = read_done(job.output_path)
    work, skipped = plan(read_lines(job.input_path), done, done_lines)
    if not work:
        return BatchSummary(skipped=skipped)
    core = CoreProcess(config, job.core_factory or EngineCore.from_config, log_level=job.log_level)
    try:
        summary = asyncio.run(_serve_lines(core, config, job, work))
    finally:
        core.shutdown()
    summary.skipped = skipped
    return summary


async def _serve_lines(core, config: EngineConfig, job: BatchJob, work) -> BatchSummary:
    from pagoda.engine_core.client import AsyncMPClient
    from pagoda.loader import load_tokenizer, resolve_model
    from pagoda.multimodal.media import MediaConfig
    from pagoda.server.app import LoRAServing, build_app
    from pagoda.server.async_engine import AsyncEngine
    from pagoda.server.images import ServerImages
    from pagoda.server.metrics import ServerMetrics
    from pagoda.server.responses_api.store import ResponseStore

    tokenizer = None if config.skip_tokenizer_init else load_tokenizer(resolve_model(config.model), config.tokenizer)
    engine = AsyncEngine(AsyncMPClient(core.address, core.info, core.alive), tokenizer,
                         ServerMetrics(job.served_model_names[0]))
    app = build_app(engine, job.served_model_names, None, job.max_n_per_request, job.tool_call_parser,
                    job.reasoning_parser, LoRAServing(config.enable_lora),
                    ServerImages(config.model, tokenizer, MediaConfig.from_engine(config)),
                    ResponseStore(max_entries=0))  # nothing to continue later: no response is stored
    engine.start()
    try:
        return await run_batch(app, work, job.output_path, job.window, job.progress)
    finally:
        await engine.stop()
