"""The front end's half of pooling requests: remember each prompt until its pooled output arrives."""

from __future__ import annotations

from pagoda.messages import EngineCoreOutput
from pagoda.pooling.outputs import PoolingOutput, PoolingRequestOutput, pooled_tensor
from pagoda.sampling_params import SamplingParams

POOLING_SAMPLING = SamplingParams(max_tokens=1)  # what the core's Request of a pooling request carries (unused)


class PoolingTracker:
    """Pooling requests in flight, by request id (one core request each: no ``n > 1`` fan-out)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str | None, list[int]]] = {}  # request id -> (prompt text, token ids)

    def add(self, request_id: str, prompt: str | None, prompt_token_ids: list[int]) -> None:
        self.pending[request_id] = (prompt, list(prompt_token_ids))

    def discard(self, request_id: str) -> bool:
        """Forget a request; True if it was pending (the core may still have it)."""
        return self.pending.pop(request_id, None) is not None

    def process(self, outputs: list[EngineCoreOutput]) -> list[PoolingRequestOutput[PoolingOutput]]:
        """The finished pooling requests among one batch of core outputs."""
        results = []
        for out in outputs:
            if out.pooled is None:
                continue
            entry = self.pending.pop(out.request_id, None)
            if entry is None:  # aborted while its output was on the way
                continue
            prompt, ids = entry
            data = PoolingOutput(pooled_tensor(out.pooled, out.pooled_shape or [len(out.pooled) // 4]))
            results.append(PoolingRequestOutput(out.request_id, data, ids, True, prompt))
        return results
