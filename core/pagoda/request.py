"""A request as the engine and scheduler see it: token ids, progress and status."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagoda.lora_request import LoRARequest
    from pagoda.multimodal_inputs import MultimodalItem
    from pagoda.pooling_params import PoolingParams
    from pagoda.sampling_params import SamplingParams


PLACEHOLDER = -1  # a sampled token still on the device (overlapped steps)


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"  # EOS, a stop token or a stop string
    FINISHED_LENGTH = "length"  # max_tokens or max_model_len
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED)

    @property
    def finish_reason(self) -> str | None:
        return self.value if self.finished else None


@dataclass(eq=False)
class Request:
    """One sequence to generate (a parent request with ``n > 1`` becomes n of these).

    ``token_ids`` holds the prompt followed by the generated tokens; the first
    ``num_computed_tokens`` of them have their KV in the cache.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: "SamplingParams"
    arrival_time: float = field(default_factory=time.monotonic)
    priority: int = 0  # lower runs first under the priority scheduler
    eos_token_id: int | None = None
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first schedule
    num_preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING
    block_hashes: list[int] = field(default_factory=list)  # of the full blocks of token_ids, chained
    num_pending_tokens: int = 0  # trailing PLACEHOLDERs: sampled by a step whose tokens are not read yet
    num_draft_tokens: int = 0  # trailing proposed tokens this step verifies (speculative decoding)
    draft_probs: object = None  # [num_draft_tokens, V] tensor: the proposer's q; None: certain drafts
    # drafts still on the device: (flat int64 tensor, positions of its drafts in it); their values in
    # token_ids are placeholders until the speculator reads them (after the verify step is queued)
    draft_source: object = None
    received_time: float | None = None  # when the engine core took it (time.monotonic)
    first_launch_time: float | None = None  # when its first step was launched
    pooling_params: "PoolingParams | None" = None  # a pooling request: one whole-prompt step, pooled, no tokens
    lora_request: "LoRARequest | None" = None  # the LoRA adapter it runs with (None: the base model)
    mm_items: "list[MultimodalItem]" = field(default_factory=list)  # images and their placeholder runs in the prompt
    whole_image_runs: bool = False  # a prefill chunk must not end inside an image's run (see chunk_size)

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_token_ids)

    def content_keys(self, start: int, end: int) -> tuple[str, ...]:
        """The content hashes of the images whose placeholder runs overlap tokens ``[start, end)`` (what the
        prefix cache keys a block by, beside its token ids)."""
        return tuple(item.content_hash for item in self.mm_items if item.offset < end and start < item.end)

    def chunk_size(self, start: int, count: int, step_tokens: int) -> int:
        """How many of ``count`` tokens from ``start`` a prefill chunk takes. With ``whole_image_runs`` (models
        whose image tokens attend to their whole image) a chunk does not end inside an image's placeholder
        run: it ends before the run, or (the run starting the chunk) takes nothing this step, to take the run
        whole in a later one; a run longer than a step's ``step_tokens`` is cut all the same."""
        end = start + count
        for item in self.mm_items if self.whole_image_runs else ():
            if item.offset < end < item.end and start < item.end:
                first = max(start, item.offset)
                if first > start:
                    return first - start
                return 0 if item.end - start <= step_tokens else count
        return count

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_known_tokens(self) -> int:
        """Tokens the host knows as generated (not the trailing placeholders or unverified drafts):
        only these are hashed into the prefix cache."""
        return self.num_tokens - self.num_pending_tokens - self.num_draft_tokens

    @property
    def draft_span(self) -> slice:
        """Where the drafts are in ``token_ids``: right after the known tokens, before the placeholder
        that the step verifying them appends once it is launched."""
        return slice(self.num_known_tokens, self.num_known_tokens + self.num_draft_tokens)

    def add_drafts(self, token_ids: list[int], probs: object = None) -> None:
        """Append proposed tokens, to be verified by the next step (``probs``: their ``[n, V]`` q)."""
        self.token_ids.extend(token_ids)
        self.num_draft_tokens += len(token_ids)
        self.draft_probs = probs

    def drop_drafts(self, keep: int = 0) -> None:
        """Remove the trailing drafts beyond the first ``keep`` (still drafts)."""
        cut = self.num_draft_tokens - keep
        if cut > 0:
            del self.token_ids[self.num_tokens - cut :]
            self.num_draft_tokens = keep
            self.draft_probs = self.draft_probs[:keep] if keep and self.draft_probs is not None else None
            if not keep:
                self.draft_source = None

    def append_token(self, token_id: int) -> None:
        """Append a sampled token (``PLACEHOLDER`` while it is still on the device)."""
        self.token_ids.append(token_id)
        if token_id == PLACEHOLDER:
            self.num_pending_tokens += 1

    def resolve_placeholder(self, index: int, token_id: int) -> None:
        """Put the token sampled for position ``index`` in place of its placeholder."""
        self.token_ids[index] = token_id
        self.num_pending_tokens -= 1
