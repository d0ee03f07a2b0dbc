"""The multimodal step feature: runs the vision encoder for the images a step reaches and hands the model
the rows to merge (:class:`~pagoda.interfaces.multimodal.MultimodalEmbeddings`).

Before each forward pass (``prepare_inputs``) it finds the placeholder tokens among the step's tokens,
encodes in one batch the items not in the encoder cache, and gives the model, for each placeholder
token, its row of its item's encoder output. Chunked prefill may cut a placeholder run anywhere: the
item is encoded whole once and each chunk takes its slice. For M-RoPE models it also sets the rotary
positions of the requests with images: ``[3, num_tokens]`` in steps with image tokens, else the
requests' shifted positions written in place (decode steps keep one axis and may replay a graph).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from pagoda.interfaces.multimodal import ImageSpan, MultimodalEmbeddings, MultimodalModel
from pagoda.multimodal.encoder_cache import EncoderCache
from pagoda.runner.features import StepFeature

if TYPE_CHECKING:
    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.multimodal_inputs import MultimodalItem
    from pagoda.request import Request
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner

logger = logging.getLogger("pagoda")

STEP_HOLDER = "\0step"  # pins the items of the step being built (no request id is empty-prefixed)


@dataclass(frozen=True)
class Reached:
    """Placeholder tokens ``[lo, hi)`` (in its sequence) of one item, computed by sequence ``seq`` this step."""

    seq: int
    item: "MultimodalItem"
    lo: int
    hi: int


@dataclass
class RopeState:
    """A request's M-RoPE positions: its prompt's ``[3, P]``, then ``n + offset`` for token ``n >= P``."""

    prompt: torch.Tensor
    offset: int

    def rows(self, start: int, count: int) -> torch.Tensor:
        """``[3, count]`` positions of its tokens ``[start, start + count)``."""
        index = torch.arange(start, start + count, device=self.prompt.device)
        inside = index < self.prompt.shape[1]
        from_prompt = self.prompt[:, index.clamp(max=self.prompt.shape[1] - 1)]
        return torch.where(inside, from_prompt, (index + self.offset).expand(3, -1))


class MultimodalStep(StepFeature):
    """See the module docstring; one per runner (every tensor-parallel rank encodes the same items)."""

    def __init__(self, model: MultimodalModel, budget_rows: int) -> None:
        self.model = model
        self.cache = EncoderCache(budget_rows)
        self.mrope = type(model).mrope_positions is not MultimodalModel.mrope_positions
        self.rope: dict[str, RopeState] = {}  # request id -> its positions (M-RoPE requests with images)
        self.pins: dict[str, set[str]] = {}  # request id -> content hashes it still needs
        self._warned_split = False

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        inputs.multimodal = self.step_embeddings(out, inputs.query_starts, inputs.positions)

    def release(self, request_id: str) -> None:
        self.rope.pop(request_id, None)
        for key in self.pins.pop(request_id, ()):
            self.cache.unpin(key, request_id)

    def step_embeddings(self, out: "SchedulerOutput", query_starts: list[int],
                        positions: torch.Tensor) -> MultimodalEmbeddings | None:
        """The step's rows to merge (None when it reaches no placeholder); M-RoPE positions on the way."""
        reached = list(self.reached(out))
        rope = self.step_positions(out, query_starts, positions, with_images=bool(reached)) if self.mrope else None
        if not reached:
            return None
        keys = {r.item.content_hash for r in reached}
        for key in keys:  # held for this step: encoding the others must not evict them
            self.cache.pin(key, STEP_HOLDER)
        self.encode_missing([r.item for r in reached])
        index, rows, spans = [], [], []
        for r in reached:
            req = out.requests[r.seq]
            start = query_starts[r.seq] + r.lo - req.num_computed_tokens  # packed index of token lo
            index.append(torch.arange(start, start + r.hi - r.lo))
            rows.append(self.cache.get(r.item.content_hash)[r.lo - r.item.offset : r.hi - r.item.offset])
            spans.append(ImageSpan(r.seq, start, start + r.hi - r.lo, r.item.offset, r.item.end))
            self.track(req.request_id, r)
        embeds = torch.cat(rows)
        for key in keys:
            self.cache.unpin(key, STEP_HOLDER)
        return MultimodalEmbeddings(torch.cat(index).to(positions.device), embeds, rope, spans)

    def reached(self, out: "SchedulerOutput"):
        """Each item whose placeholder run overlaps the tokens a request computes this step."""
        for seq, (req, n) in enumerate(zip(out.requests, out.num_tokens)):
            first = req.num_computed_tokens
            for item in req.mm_items:
                lo, hi = max(item.offset, first), min(item.end, first + n)
                if lo < hi:
                    yield Reached(seq, item, lo, hi)

    def encode_missing(self, items: list["MultimodalItem"]) -> None:
        """Encode, in one batch, the items (each once) whose rows are not cached."""
        todo = list({item.content_hash: item for item in items if item.content_hash not in self.cache}.values())
        self.cache.hits += len({item.content_hash for item in items}) - len(todo)
        if not todo:
            return
        device = next(self.model.parameters()).device
        inputs = [{name: t.to(device) for name, t in item.inputs().items()} for item in todo]
        for item, rows in zip(todo, self.model.encode_images(inputs)):
            self.cache.misses += 1
            self.cache.put(item.content_hash, rows)

    def track(self, request_id: str, r: Reached) -> None:
        """Keep the item's rows while the request has more of its run to compute; warn once where a model
        whose image tokens see their whole image gets a run cut by chunked prefill."""
        key = r.item.content_hash
        if r.hi < r.item.end:
            self.cache.pin(key, request_id)
            self.pins.setdefault(request_id, set()).add(key)
        elif key in self.pins.get(request_id, ()):
            self.pins[request_id].discard(key)
            self.cache.unpin(key, request_id)
        if self.model.bidirectional_image_attention and r.hi < r.item.end and not self._warned_split:
            self._warned_split = True
            logger.warning("An image's %d placeholder tokens are more than a step computes (max_num_batched_tokens): "
                           "split over steps, they attend to the part in each step only (transformers attends over "
                           "the whole image). Raise max_num_batched_tokens above it.", r.item.length)

    def step_positions(self, out: "SchedulerOutput", query_starts: list[int], positions: torch.Tensor,
                       with_images: bool) -> torch.Tensor | None:
        """M-RoPE: ``[3, num_tokens]`` positions for a step with image tokens; otherwise the shifted positions
        of requests with images are written into ``positions`` (one axis) and None is returned."""
        index, rows = [], []
        for seq, (req, n) in enumerate(zip(out.requests, out.num_tokens)):
            state = self.rope_state(req)
            if state is not None:
                index.append(torch.arange(query_starts[seq], query_starts[seq] + n))
                rows.append(state.rows(req.num_computed_tokens, n))  # [3, n]
        if not index:
            return positions.expand(3, -1) if with_images else None
        index_t, rows_t = torch.cat(index).to(positions.device), torch.cat(rows, dim=1)
        if not with_images:
            positions.index_copy_(0, index_t, rows_t[0])  # text tokens: the three axes agree
            return None
        return positions.expand(3, -1).clone().index_copy_(1, index_t, rows_t)

    def rope_state(self, req: "Request") -> RopeState | None:
        """The request's M-RoPE positions (computed once), or None for a request without images."""
        if not req.mm_items:
            return None
        state = self.rope.get(req.request_id)
        if state is None:
            placed = [(item.offset, item.inputs()) for item in req.mm_items]
            prompt, offset = self.model.mrope_positions(req.prompt_token_ids, placed)
            device = next(self.model.parameters()).device
            state = self.rope[req.request_id] = RopeState(prompt.to(device), offset)
        return state
