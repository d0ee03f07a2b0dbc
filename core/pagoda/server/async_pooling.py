"""Pooling requests in the API server's AsyncEngine (mixed in): one awaited result per request.

A pooling request (runner "pooling") goes to the engine core like a generation request and comes
back as one :class:`PoolingRequestOutput` (its pooled values), put on the request's queue by the
reader task. Cancelling :meth:`AsyncPooling.encode` (a client gone, a sibling request failed)
aborts the request in the core.
"""

from __future__ import annotations

import asyncio
import time

from pagoda.engine_core.client import EngineDeadError
from pagoda.engine_core.core import check_runner, validate_prompt
from pagoda.messages import AddRequest, EngineCoreOutput
from pagoda.pooling.outputs import PoolingRequestOutput
from pagoda.pooling_params import PoolingParams
from pagoda.engine.pooling_tracker import POOLING_SAMPLING, PoolingTracker


class AsyncPooling:
    """Needs the AsyncEngine's ``client``, ``info``, ``_streams``, ``abort`` and
    ``unavailable_reason``; owns ``pooling`` (a PoolingTracker, created by AsyncEngine)."""

    pooling: PoolingTracker

    def validate_pooling_prompt(self, token_ids: list[int]) -> None:
        check_runner(self.info.runner, PoolingParams())
        validate_prompt(token_ids, self.max_model_len, self.info.vocab_size, pooling=True)

    async def encode(self, request_id: str, prompt_token_ids: list[int], params: PoolingParams,
                     prompt: str | None = None, priority: int = 0) -> PoolingRequestOutput:
        """The pooled output of one prompt; aborts the request if the caller is cancelled first."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise EngineDeadError(reason)
        queue: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = queue
        self.pooling.add(request_id, prompt, prompt_token_ids)
        finished = False
        try:
            await self.client.add_requests([AddRequest(request_id, list(prompt_token_ids), POOLING_SAMPLING,
                                                       time.monotonic(), priority, pooling_params=params)])
            item = await queue.get()
            finished = True
            if isinstance(item, BaseException):
                raise item
            return item
        finally:
            if not finished:
                await self.abort(request_id)

    def _deliver_pooled(self, outputs: list[EngineCoreOutput]) -> None:
        """Hand finished pooling requests their outputs (called by the reader task)."""
        for output in self.pooling.process(outputs):
            queue = self._streams.pop(output.request_id, None)
            if queue is not None:
                queue.put_nowait(output)
