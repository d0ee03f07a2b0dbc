"""Guided decoding inside the model runner: one grammar matcher per guided request, one bitmask per step.

Each step, once the runner has queued the forward pass and the logits on the device,
:meth:`GuidedSampling.start_masks` advances each guided request's matcher by the tokens the request
accepted since the last step, then hands the filling of the step's host bitmask to one
long-lived worker thread and returns. The fill is CPU work only (xgrammar: native code, outside
the GIL) and overlaps the forward pass and the engine core's scheduling of the next step: the
runner queues the step's sampling as late as it can, before the next step's forward pass or when
the step's tokens are read, and only then :meth:`GuidedSampling.apply_masks` waits for the fill and
queues the bitmask's copy to the device and the masking, on the engine's thread (so device work
stays in the order it was queued). An error in the fill is raised there, by the step that needs
the mask.

The matchers advance on the engine's thread, not the worker: in CPython a thread must win the GIL
back after each native call, and while the engine's thread runs Python (scheduling, preparing
inputs) that can take the whole switch interval (5 ms) per call; one native fill call per step
needs the GIL only to start (the engine's thread waits for that, :meth:`GuidedSampling._on_worker`)
and to finish (while the engine's thread waits for the mask).

With overlapped steps the previous step may still be in flight when this one is launched (its
last token is a placeholder on the host; the forward pass took it from the device): the matcher
then reads that step's tokens itself (``prev.result()``, which waits only for the previous step,
whose sampling the runner queued before this forward pass), so guided steps keep the cross-step
overlap.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from pagoda.errors import RequestError
from pagoda.guided.bitmask import apply_bitmask, bitmask_words
from pagoda.interfaces.guided import GrammarMatcher, GuidedDecodingBackend
from pagoda.loader import eos_token_ids
from pagoda.plugins.manager import get_plugin_manager
from pagoda.runner.features import StepFeature

if TYPE_CHECKING:
    from pagoda.runner.model_runner import PendingStep
    from pagoda.request import Request
    from pagoda.sampling_params import GuidedDecodingParams

logger = logging.getLogger("pagoda")

RowsToFill = dict[str, tuple[list[GrammarMatcher], list[int]]]  # backend name -> its live matchers, their rows


@dataclass
class MatcherState:
    matcher: GrammarMatcher
    backend: str = "auto"  # the name of the backend that made it
    consumed: int = 0  # output tokens fed to the matcher so far
    off_grammar: bool = False  # a token the grammar forbids was accepted (e.g. min_tokens masked its end)


@dataclass
class StagedMask:
    """A step's bitmask on the host, and the logits rows it masks (None: every row, in order)."""

    bitmask: torch.Tensor  # [num_rows, ceil(V / 32)] int32
    index: torch.Tensor | None  # [num_rows] int64


@dataclass
class GrammarJob:
    """A step's bitmask, being filled on the worker thread (``future``) or filled already (None)."""

    staged: StagedMask
    future: Future | None = None

    @property
    def running(self) -> bool:
        """Whether the fill was handed to the worker thread (it may still run)."""
        return self.future is not None

    def wait(self) -> StagedMask:
        """The filled bitmask, once the fill is done; raises what the fill raised."""
        if self.future is not None:
            self.future.result()
        return self.staged


class GuidedSampling(StepFeature):
    """Grammar matchers of one engine's guided requests; masks a step's logits (the runner's step feature
    for guided decoding, on the rank that samples)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int], default_backend: str = "auto",
                 host_buffer: Callable[[int], torch.Tensor] | None = None, worker: bool = True) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = stop_token_ids
        self.default_backend = default_backend
        self.backends: dict[str, GuidedDecodingBackend] = {}  # built on first use
        self.states: dict[str, MatcherState] = {}  # request id -> its matcher
        self._words = bitmask_words(vocab_size)
        # bytes -> a host uint8 buffer per step (Platform.host_buffer: pinned on GPUs, so the bitmask's
        # copy neither stages nor waits for the device; torch recycles it once the copy has run)
        self.host_buffer = host_buffer or _pageable_buffer
        self._pageable: torch.Tensor | None = None  # the host buffer reused while host_buffer gives pageable memory
        self._unapplied: GrammarJob | None = None  # the last job started, until apply_masks() masked with it
        self.worker = worker  # False: start_masks() fills the bitmask itself (the serial path)
        self._executor: ThreadPoolExecutor | None = None  # the worker thread, started by the first fill

    def start_masks(self, requests: list["Request"], prev: "PendingStep | None" = None) -> GrammarJob | None:
        """Advance the guided requests' matchers and start filling the bitmask for ``requests``' logits
        (``[len(requests), V]``, queued) on the worker thread. ``prev``: the step still in flight,
        whose tokens are placeholders on the host (its sampling queued already). None when no
        request is guided."""
        rows = [i for i, req in enumerate(requests) if req.sampling_params.guided_decoding is not None]
        if not rows:
            return None
        if self._unapplied is not None and self._unapplied.running:  # never applied: may still read the matchers
            wait([self._unapplied.future])
        states = self._advance_all([requests[i] for i in rows], prev)
        staged = self._stage(len(rows), None if len(rows) == len(requests) else rows)
        to_fill = self._live_rows(states)
        if not self.worker or not to_fill:
            self._fill(to_fill, staged.bitmask)
            self._unapplied = GrammarJob(staged)
        else:
            self._unapplied = GrammarJob(staged, self._on_worker(lambda: self._fill(to_fill, staged.bitmask)))
        return self._unapplied

    def apply_masks(self, logits: torch.Tensor, job: GrammarJob) -> None:
        """Wait for ``job``'s fill, then queue its bitmask's copy to the logits' device and the masking
        of ``logits`` (one kernel on GPUs). Raises the fill's error, if it had one."""
        staged = job.wait()
        if self._unapplied is job:
            self._unapplied = None
        self._apply(logits, staged)

    def mask(self, logits: torch.Tensor, requests: list["Request"], prev: "PendingStep | None" = None) -> None:
        """Forbid, in ``logits`` (``[len(requests), V]``), the tokens each guided request's grammar
        forbids, before returning: :meth:`start_masks` and :meth:`apply_masks` in one."""
        job = self.start_masks(requests, prev)
        if job is not None:
            self.apply_masks(logits, job)

    def mask_rows(self, logits: torch.Tensor, requests: list["Request"], counts: list[int]) -> None:
        """:meth:`mask` for a speculative verify step: ``counts[i]`` rows of ``logits`` belong to
        ``requests[i]`` in order; row ``j`` of a request verifying drafts is masked by its grammar
        after its first ``j`` drafts. The matcher accepts the drafts to fill those rows, then rolls
        them back (the tokens the target keeps are fed later, as any output). All on the calling
        thread (the runner has queued the step before, and waited for its fill, first)."""
        starts = [sum(counts[:i]) for i in range(len(counts))]
        guided = [i for i, req in enumerate(requests) if req.sampling_params.guided_decoding is not None]
        if not guided:
            return
        rows = [starts[i] + j for i in guided for j in range(counts[i])]
        staged = self._stage(len(rows), rows)
        slot = 0
        for i in guided:
            state = self._advance(requests[i])
            if not (state.off_grammar or state.matcher.is_terminated()):
                drafts = requests[i].token_ids[requests[i].num_tokens - counts[i] + 1:] if counts[i] > 1 else []
                self._fill_through_drafts(state.matcher, drafts, staged.bitmask, slot)
            slot += counts[i]
        self._apply(logits, staged)

    def can_roll_back(self, request_id: str) -> bool:
        """Whether the request's matcher exists and can undo accepted tokens (needed to verify drafts)."""
        state = self.states.get(request_id)
        return state is not None and type(state.matcher).rollback is not GrammarMatcher.rollback

    def release(self, request_id: str) -> None:
        self.states.pop(request_id, None)

    @staticmethod
    def _fill_through_drafts(matcher: GrammarMatcher, drafts: list[int], bitmask: torch.Tensor, slot: int) -> None:
        """Rows ``slot + j``: the tokens allowed after the first ``j`` drafts. A draft the grammar
        forbids cannot be sampled (its row masks it), so the rows after it stay all-allowed."""
        accepted = 0
        for j in range(len(drafts) + 1):
            if matcher.is_terminated():
                break
            matcher.fill_bitmask(bitmask, slot + j)
            if j == len(drafts) or not matcher.accept(drafts[j]):
                break
            accepted += 1
        if accepted:
            matcher.rollback(accepted)

    def _advance(self, req: "Request", prev: "PendingStep | None" = None) -> MatcherState:
        """The request's matcher, fed every output token it has not seen yet (a trailing placeholder
        read from ``prev``, the step in flight that samples it)."""
        state = self.states.get(req.request_id)
        if state is None:
            params = req.sampling_params.guided_decoding
            state = MatcherState(self._backend(params).new_matcher(params), backend=self._backend_name(params))
            self.states[req.request_id] = state
        new = req.token_ids[req.num_prompt_tokens + state.consumed : req.num_tokens - req.num_draft_tokens]  # no drafts
        if new and new[-1] < 0 and prev is not None and req.request_id in prev.rows:
            new[-1] = in_flight_token(prev, req.request_id)
        for token in new:
            if token < 0:
                raise RuntimeError("guided decoding needs the previous step's tokens: the step that samples "
                                   f"request {req.request_id}'s last token was not passed to mask()")
            if not state.off_grammar and not state.matcher.accept(token):
                state.off_grammar = True
                logger.warning("request %s: token %d is outside its grammar; the rest of it is unguided",
                               req.request_id, token)
        state.consumed += len(new)
        return state

    def _advance_all(self, guided: list["Request"], prev: "PendingStep | None") -> list[MatcherState]:
        """:meth:`_advance` for each request (xgrammar's batched accept measured no faster: the
        matcher's own work per token dominates the Python call)."""
        return [self._advance(req, prev) for req in guided]

    def _stage(self, num_rows: int, rows: list[int] | None) -> StagedMask:
        """A host bitmask of ``num_rows`` (every token allowed) for ``rows`` of the logits (None:
        all of them), with those row numbers beside it, in one buffer from ``host_buffer``."""
        index_bytes = 0 if rows is None else 8 * num_rows
        host = self._host(index_bytes + 4 * num_rows * self._words)
        index = None
        if rows is not None:
            index = host[:index_bytes].view(torch.int64)
            index.numpy()[:] = rows
        bitmask = host[index_bytes:].view(torch.int32).view(num_rows, self._words)
        # one thread: torch's fill_ would run 1 MB on its intra-op pool (a thread per CPU), whose
        # threads then compete with the grammar thread and the engine's for the host's cores
        bitmask.numpy().fill(-1)
        return StagedMask(bitmask, index)

    def _host(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of host memory for this step. A pageable buffer is reused once the last job's
        mask was applied (its copy to a device, if any, has read it before returning); a pinned one
        comes fresh from ``host_buffer`` (torch's caching host allocator hands it out again once its
        asynchronous copy has run)."""
        if self._pageable is not None and self._pageable.numel() >= nbytes and self._unapplied is None:
            return self._pageable[:nbytes]
        host = self.host_buffer(nbytes)
        if not host.is_pinned():
            self._pageable = host  # fresh pages each step would cost a page fault per 4 KiB
        return host

    @staticmethod
    def _live_rows(states: list[MatcherState]) -> RowsToFill:
        """Per backend, the matchers that constrain their row (terminated or off-grammar ones: the row
        stays all-allowed) and those rows."""
        to_fill: RowsToFill = {}
        for slot, state in enumerate(states):
            if state.off_grammar or state.matcher.is_terminated():
                continue
            matchers, slots = to_fill.setdefault(state.backend, ([], []))
            matchers.append(state.matcher)
            slots.append(slot)
        return to_fill

    def _fill(self, to_fill: RowsToFill, bitmask: torch.Tensor) -> None:
        """Each backend fills its rows (all at once; CPU work only). In inference mode even on the worker
        thread: the host buffer was made in it, on the engine's thread."""
        with torch.inference_mode():
            for name, (matchers, slots) in to_fill.items():
                self.backends[name].fill_bitmasks(matchers, bitmask, slots)

    def _on_worker(self, fill: Callable[[], None]) -> Future:
        """Run ``fill`` on the worker thread; return once it runs there. The worker needs the GIL to
        start: this thread waits for it rather than keep the GIL through its next Python work."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pagoda-grammar")
        running = threading.Event()

        def job() -> None:
            running.set()
            fill()

        future = self._executor.submit(job)
        running.wait()
        return future

    @staticmethod
    def _apply(logits: torch.Tensor, staged: StagedMask) -> None:
        """Queue the bitmask's copy to the logits' device and the masking (one kernel on GPUs)."""
        apply_bitmask(logits, staged.bitmask, staged.index)

    def _backend_name(self, params: "GuidedDecodingParams") -> str:
        return params.backend or self.default_backend

    def _backend(self, params: "GuidedDecodingParams") -> GuidedDecodingBackend:
        name = self._backend_name(params)
        if name not in self.backends:  # its construction's errors name the plugin that registered it
            registered, _ = _select(name)
            self.backends[name] = get_plugin_manager().registry("guided_decoding").create(
                registered, self.tokenizer, self.vocab_size, self.stop_token_ids)
        return self.backends[name]


def backend_class(name: str | None) -> type[GuidedDecodingBackend]:
    """The registered backend class for ``name`` (``auto``/None: the best usable one)."""
    return _select(name)[1]


def _select(name: str | None) -> tuple[str, type[GuidedDecodingBackend]]:
    try:
        return get_plugin_manager().registry("guided_decoding").select(name)
    except (LookupError, ValueError) as exc:
        raise RequestError(str(exc)) from exc


def validate_guided(params: "GuidedDecodingParams", default_backend: str = "auto") -> None:
    """The front end's check of a request's grammar: RequestError naming what is wrong."""
    backend_class(params.backend or default_backend).validate(params)


def guided_sampling_for(parts: Any) -> GuidedSampling | None:
    """The engine's GuidedSampling (``parts``: EngineParts); None without a tokenizer (no grammar can apply)."""
    return guided_sampling(parts.tokenizer, parts.hf_config, parts.config.guided_decoding_backend,
                           parts.platform.host_buffer)


def guided_sampling(tokenizer: Any, hf_config: Any, default_backend: str,
                    host_buffer: Callable[[int], torch.Tensor]) -> GuidedSampling | None:
    """GuidedSampling over ``tokenizer``, stopping at the tokenizer's (else the model's) EOS ids; None without
    a tokenizer."""
    if tokenizer is None:
        return None
    return GuidedSampling(tokenizer, hf_config.vocab_size, eos_token_ids(tokenizer, hf_config), default_backend,
                          host_buffer=host_buffer)


def _pageable_buffer(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def in_flight_token(prev: "PendingStep", request_id: str) -> int:
    """The token the in-flight step ``prev`` samples for a request (waits for that step only)."""
    return prev.result().sampled[request_id]
