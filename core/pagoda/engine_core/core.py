"""EngineCore: the engine loop without the front end's work (no tokenizer, no text).

It owns the scheduler, the KV cache and the model runner. ``step()`` schedules, launches a step
on the device and returns the new tokens of finished steps as :class:`EngineCoreOutput`s; it
checks the stop conditions a token decides (EOS, stop tokens, ``max_tokens``, the context
length). Stop strings, detokenization and ``n > 1`` fan-out belong to the front end. A beam search
runs here as a group of requests that fork by sharing KV blocks (``pagoda.beam.groups``).

Overlapped steps (``EngineConfig.overlap_steps``): step N+1 is scheduled and launched while
step N still runs on the device; N's sampled tokens stay on the device as placeholders in the
requests (``Request.append_token(PLACEHOLDER)``) and step N+1 reads them there. Only then does
the host wait for N's tokens, check them and hand them out, while the device runs N+1. A
request that stops at N (EOS, say) was already launched in N+1: that row's token is dropped.
Requests that reach ``max_tokens`` or the context length are finished when their last step is
launched, so batches match the non-overlapped schedule exactly where no EOS intervenes.

A guided step returns from the launch before its sampling is queued: its grammar bitmask is
filled on a worker thread while this loop reads the step before and schedules the next, and the
runner queues the sampling before the next forward pass, or when the step's tokens are read
(``ModelRunner.launch``, ``pagoda.guided.runtime``). Nothing here changes for it.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass

import msgspec

from pagoda.config import EngineConfig
from pagoda.beam.groups import BeamGroups
from pagoda.engine_core.parts import EngineParts, build_engine_parts
from pagoda.engine_core.pipeline import PipelineLoop
from pagoda.runner.model_runner import PendingStep, RunnerOutput
from pagoda.request import PLACEHOLDER, Request, RequestStatus
from pagoda.sampling.sampler import needs_tokens_before_launch
from pagoda.runner.torch_profiler import profiler_dir
from pagoda.messages import ITERATION_TOKENS_BUCKETS, AddRequest, EngineCoreOutput, EngineInfo, PoolingInfo, StepStats
from pagoda.engine_core.trace import CountDeltas, Trace
from pagoda.errors import RequestError
from pagoda.executor import make_executor
from pagoda.kv_connectors.engine import attach_kv_transfers
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.lora.engine import engine_adapters, refuse_without_lora
from pagoda.loader import eos_token_ids
from pagoda.lora_request import LoRARequest
from pagoda.multimodal.checks import check_images
from pagoda.spec_decode.engine import build_speculator

logger = logging.getLogger("pagoda")


@dataclass
class InflightStep:
    """A launched step whose tokens are not read yet."""

    pending: PendingStep
    positions: list[int]  # per sampling request (pending.requests order): its placeholder's index


class EngineCore:
    """Schedules and runs steps; see the module docstring."""

    UTILITIES = frozenset({"snapshot_stats", "kv_cache_state", "reset_prefix_cache", "info", "start_profile",
                           "stop_profile", "add_lora", "remove_lora", "list_loras"})

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.config = parts.config
        self.max_model_len = parts.max_model_len
        self.vocab_size = parts.hf_config.vocab_size  # read per request: HF configs' attribute access is slow
        self.scheduler = parts.scheduler
        self.kv_cache = parts.kv_cache
        try:
            self.executor = make_executor(parts)  # this rank's runner (+ the other ranks under TP)
        except BaseException:
            if parts.workers is not None:
                parts.workers.shutdown()
            raise
        self.runner = self.executor.runner
        self.adapters = engine_adapters(self.runner, self.scheduler)  # LoRA (None without --enable-lora)
        self.kv_transfers = attach_kv_transfers(self.scheduler, self.runner)  # None without a KV connector
        self.speculator = build_speculator(self.config.speculative_config, parts, self.runner)
        overlap = self.config.overlap_steps
        self.overlap = parts.platform.overlaps_steps() if overlap is None else overlap  # drafts: read at once (step())
        self.eos_token_id = next(iter(eos_token_ids(parts.tokenizer, parts.hf_config)), None)  # the first
        self.requests: dict[str, Request] = {}  # added and not yet reported finished
        self.beams = BeamGroups(self.scheduler, self._release, self.max_model_len, parts.hf_config.vocab_size)
        self.stats = StepStats()
        self._inflight: InflightStep | None = None
        self.pipeline = PipelineLoop(self, parts.pp.size) if parts.pp.size > 1 else None  # P steps in flight
        self.trace = Trace.from_env("core")  # PAGODA_TRACE_DIR: step and first-token timings
        self._allocator_events = CountDeltas(parts.platform.allocator_counts) if self.trace is not None else None

    @classmethod
    def from_config(cls, config: EngineConfig) -> "EngineCore":
        return cls(build_engine_parts(config))

    def info(self) -> EngineInfo:
        return EngineInfo(max_model_len=self.max_model_len, vocab_size=self.parts.hf_config.vocab_size,
                          eos_token_id=self.eos_token_id, num_kv_blocks=self.kv_cache.num_blocks,
                          block_size=self.config.block_size, description=self.parts.platform.describe(),
                          runner=self.config.runner, pooling=pooling_info(self.parts.pooler_config))

    # -- requests --------------------------------------------------------------------------
    def add_request(self, add: AddRequest) -> None:
        """Queue one sequence. Raises RequestError for a prompt the engine cannot take."""
        validate_prompt(add.prompt_token_ids, self.max_model_len, self.vocab_size,
                        pooling=add.pooling_params is not None)
        check_runner(self.config.runner, add.pooling_params)
        if add.request_id in self.requests or self.beams.owns(add.request_id):
            raise RequestError(f"request id {add.request_id!r} is already in use")
        add.params.check_vocab(self.vocab_size)
        self._check_adapter(add)
        whole_image_runs = check_images(add, self.parts.model) if add.mm_items else False
        if add.beam is not None:  # beam search: its beams are requests of their own (pagoda.beam.groups)
            self.beams.add(add, self.eos_token_id)
            return
        req = Request(add.request_id, list(add.prompt_token_ids), add.params, arrival_time=add.arrival_time,
                      priority=add.priority, eos_token_id=self.eos_token_id, pooling_params=add.pooling_params,
                      lora_request=add.lora_request, mm_items=list(add.mm_items), whole_image_runs=whole_image_runs)
        req.received_time = time.monotonic()
        self.requests[add.request_id] = req
        self.scheduler.add_request(req)

    def _check_adapter(self, add: AddRequest) -> None:
        """RequestError unless the request's LoRA adapter (if any) can run: loaded now if it was not."""
        if add.lora_request is None:
            return
        if self.adapters is None:
            refuse_without_lora(add.lora_request)
        self.adapters.check(add.lora_request)

    def abort(self, request_ids: list[str]) -> None:
        """Stop requests (waiting, running or in flight) and free their KV blocks."""
        for request_id in request_ids:
            req = self.requests.pop(request_id, None)
            if req is None:
                self.beams.abort(request_id)
                continue
            if not req.status.finished:
                self.scheduler.finish(request_id, RequestStatus.FINISHED_ABORTED)
            self._release(request_id)

    def has_unfinished(self) -> bool:
        return (bool(self.requests) or self._inflight is not None or self.beams.active
                or (self.pipeline is not None and self.pipeline.busy))

    # -- the loop ----------------------------------------------------------------------------
    def step(self) -> list[EngineCoreOutput]:
        """Schedule and launch one step; return the outputs of the step(s) whose tokens were read."""
        if self.pipeline is not None:
            return self.pipeline.step()
        start = time.monotonic()
        outputs: list[EngineCoreOutput] = []
        if self.speculator is not None:
            outputs += self._propose()
        if self.kv_transfers is not None:  # requests whose KV blocks every rank loaded may run now
            self.kv_transfers.before_schedule()
        scheduled = self.scheduler.schedule()
        if scheduled.is_empty() and self._inflight is None and self.beams.requeue_waiting():
            scheduled = self.scheduler.schedule()  # waiting beams gave their blocks to a preempted sibling
        if self.speculator is not None:
            self.speculator.fit(scheduled)
        if self._inflight is not None and _needs_tokens(scheduled):  # e.g. penalties count every output token
            outputs += self._resolve(self._inflight)
            self._inflight = None
            scheduled = _without_finished(scheduled)
        sizes = _attention_sizes(scheduled) if self.trace is not None else {}
        launched = self._launch(scheduled) if not scheduled.is_empty() else None
        if self.speculator is not None:  # the verify step is queued: the drafts it took on the device are read
            self.speculator.read_drafts()
        if self._inflight is not None:
            outputs += self._resolve(self._inflight)
        self._inflight = launched
        if launched is not None and self._verifies(scheduled):
            self.speculator.prelaunch(launched.pending)  # the next drafts, queued behind the verify step
        if launched is not None and (not self.overlap or self._verifies(scheduled) or self.beams.any_in(scheduled)):
            outputs += self._resolve(launched)
            self._inflight = None
        if self.speculator is not None:  # the goodput controller times steps start to start while busy
            self.speculator.end_step(busy=self.has_unfinished())
        if self.trace is not None:
            self.trace.record(step=start, seconds=time.monotonic() - start, tokens=scheduled.total_tokens,
                              seqs=len(scheduled.requests), outputs=len(outputs), **sizes, **self._allocator_events())
        return outputs

    def _propose(self) -> list[EngineCoreOutput]:
        """Drafts for the requests that speculate this step (none while the goodput controller has
        suspended speculation); the tokens of an in-flight step are read first when a request needs
        its last token to propose."""
        outputs: list[EngineCoreOutput] = []
        self.speculator.begin_step()
        if self._inflight is not None and self.speculator.wants_tokens(self.requests.values()):
            outputs = self._resolve(self._inflight)
            self._inflight = None
        self.speculator.propose(self.requests.values())
        return outputs

    def _verifies(self, scheduled: SchedulerOutput) -> bool:
        """Whether the step verifies drafts: its tokens are read before the next step proposes."""
        return self.speculator is not None and self.speculator.has_drafts(scheduled)

    def _launch(self, scheduled: SchedulerOutput) -> InflightStep:
        block_tables = [self.kv_cache.block_ids(req.request_id) for req in scheduled.requests]
        self.stats.prompt_tokens += _num_prompt_tokens(scheduled)
        self.stats.num_preemptions += len(scheduled.preempted)
        _count_iteration(self.stats, scheduled.total_tokens)
        now = time.monotonic()
        for req in scheduled.requests:  # the queue time of /metrics and traces ends here
            if req.first_launch_time is None:
                req.first_launch_time = now
        prev = self._inflight.pending if self._inflight is not None else None
        pending = self.executor.launch(scheduled, block_tables, prev)
        self.scheduler.update_from_output(scheduled, dict.fromkeys(pending.rows, PLACEHOLDER))
        positions = [req.num_tokens - 1 for req in pending.requests]
        for request_id in pending.pooled_request_ids:  # pooled: nothing more to compute, free seats and blocks
            self.scheduler.finish(request_id, RequestStatus.FINISHED_STOPPED)
        for req in pending.requests:  # their last token is in flight: free their seats and blocks now
            if req.status is RequestStatus.RUNNING and self._reaches_length(req, req.num_tokens - 1):
                self.scheduler.finish(req.request_id, RequestStatus.FINISHED_LENGTH)
        return InflightStep(pending, positions)

    def _resolve(self, step: InflightStep) -> list[EngineCoreOutput]:
        """Read a step's tokens, put them in place of the placeholders, check stops, make outputs."""
        result = step.pending.result()
        outputs = {request_id: EngineCoreOutput(request_id, [], prompt_logprobs=chunk)
                   for request_id, chunk in result.prompt_logprobs.items() if request_id in self.requests}
        for req, index in zip(step.pending.requests, step.positions):
            token = result.sampled[req.request_id]
            if req.num_draft_tokens:  # speculative: the verified drafts, then the target's token
                index, tokens = self.speculator.settle(req, index, result.verified[req.request_id])
            else:
                req.resolve_placeholder(index, token)
                tokens = [token]
            if req.request_id in self.requests:
                out = outputs.setdefault(req.request_id, EngineCoreOutput(req.request_id, []))
                for offset, tok in enumerate(tokens):
                    self._add_token(out, req, tok, index + offset, result, offset)
                    if req.request_id not in self.requests:  # a stop among the accepted drafts
                        break
            elif self.beams.owns(req.request_id):  # a beam: it waits until every beam of its prompt sampled
                self.beams.on_sampled(req, result.top_logprobs.get(req.request_id, []))
        for request_id, (data, shape) in result.pooled.items():  # pooling requests end with their values
            req = self.requests.get(request_id)
            if req is not None:
                outputs[request_id] = EngineCoreOutput(request_id, [], "stop", pooled=data, pooled_shape=shape)
                self._finish_reported(req, RequestStatus.FINISHED_STOPPED)
        self.stats.generation_tokens += sum(len(o.new_token_ids) for o in outputs.values())
        return list(outputs.values()) + self.beams.advance()

    def _add_token(self, out: EngineCoreOutput, req: Request, token: int, index: int, result: RunnerOutput,
                   offset: int = 0) -> None:
        if self.trace is not None and index == req.num_prompt_tokens:
            self.trace.record(request=req.request_id, arrival=req.arrival_time, received=req.received_time,
                              launched=req.first_launch_time, first_token=time.monotonic())
        out.new_token_ids.append(token)
        out.num_cached_tokens = req.num_cached_tokens
        if index == req.num_prompt_tokens:  # its first token: the front end's queue and prefill times
            out.queued_time, out.scheduled_time = req.received_time, req.first_launch_time
        verified = result.verified.get(req.request_id)
        if verified is not None and verified.logprobs is not None:  # one per emitted token of the round
            out.logprobs = [*(out.logprobs or []), verified.logprobs[offset]]
            out.top_logprobs = [*(out.top_logprobs or []), verified.top_logprobs[offset] or []]
        elif req.request_id in result.logprobs:
            out.logprobs = [result.logprobs[req.request_id]]
            out.top_logprobs = [result.top_logprobs.get(req.request_id, [])]
        status, out.stop_reason = self._check_stop(req, token, index)
        if status is not None:
            out.finish_reason = status.value
            self._finish_reported(req, status)

    def _check_stop(self, req: Request, token: int, index: int) -> tuple[RequestStatus | None, int | None]:
        """EOS, then a stop token (both once ``min_tokens`` are out), then length."""
        params = req.sampling_params
        if index + 1 - req.num_prompt_tokens >= params.min_tokens:
            if not params.ignore_eos and token == req.eos_token_id:
                return RequestStatus.FINISHED_STOPPED, None
            if token in params.stop_token_ids:
                return RequestStatus.FINISHED_STOPPED, token
        if self._reaches_length(req, index):
            return RequestStatus.FINISHED_LENGTH, None
        return None, None

    def _reaches_length(self, req: Request, index: int) -> bool:
        """Whether the token at ``index`` is the last one ``max_tokens`` or the context allows."""
        max_tokens = req.sampling_params.max_tokens
        return (max_tokens is not None and index + 1 - req.num_prompt_tokens >= max_tokens) or index + 1 >= self.max_model_len

    def _finish_reported(self, req: Request, status: RequestStatus) -> None:
        del self.requests[req.request_id]
        if req.status.finished:  # finished at launch (length): the token decided the reason
            req.status = status
        else:
            self.scheduler.finish(req.request_id, status)
        self._release(req.request_id)

    def _release(self, request_id: str) -> None:
        """Forget a finished request's per-request state (runner, proposer)."""
        self.executor.release(request_id)
        if self.speculator is not None:
            self.speculator.release(request_id)

    # -- utilities (front ends call these between steps) --------------------------------------
    def snapshot_stats(self) -> StepStats:
        """Current gauges and counters, as a copy."""
        s = self.stats
        s.num_running = self.scheduler.num_running
        s.num_waiting = self.scheduler.num_waiting
        s.kv_cache_usage = self.kv_cache.usage
        prefix = self.kv_cache.prefix_cache_stats
        s.prefix_cache_hit_rate = prefix.hit_rate
        s.prefix_cache_queries, s.prefix_cache_hits = prefix.queries, prefix.hits
        if self.speculator is not None:
            self.speculator.fill_stats(s)
        if self.kv_transfers is not None:
            self.kv_transfers.fill_stats(s)
        return msgspec.structs.replace(s, iteration_tokens=list(s.iteration_tokens))

    def kv_cache_state(self) -> dict:
        return {"num_blocks": self.kv_cache.num_blocks, "num_free_blocks": self.kv_cache.num_free_blocks,
                "num_unfinished": len(self.requests) + len(self.beams.groups)}

    def reset_prefix_cache(self) -> None:
        self.kv_cache.reset_prefix_cache()

    def add_lora(self, name: str, path: str, lora_id: int | None = None) -> list:
        """Load a LoRA adapter before its requests (RequestError if it cannot run; ``lora_id`` None: the next
        free id); returns it as ``[name, id, path]``."""
        if self.adapters is None:
            refuse_without_lora(LoRARequest(name, lora_id or 1, path))
        lora = self.adapters.add(name, path, lora_id)
        return [lora.lora_name, lora.lora_int_id, lora.lora_path]

    def remove_lora(self, lora_id: int) -> bool:
        """Unload a LoRA adapter (requests running with it finish with it); False if it was not loaded."""
        return self.adapters is not None and self.adapters.remove(lora_id)

    def list_loras(self) -> list[list]:
        """The loaded LoRA adapters as ``[name, id, path]``."""
        return [] if self.adapters is None else self.adapters.list()

    def start_profile(self) -> None:
        """The torch profiler on every rank, from the next step on (pagoda.runner.torch_profiler)."""
        self.executor.profile(profiler_dir())

    def stop_profile(self) -> None:
        """Stop it; returns once every rank wrote its trace."""
        self.executor.profile(None)

    def shutdown(self) -> None:
        """Stop the other tensor-parallel ranks, if any (idempotent); a KV connector finishes its writes first."""
        if self.kv_transfers is not None:
            self.kv_transfers.close()
        self.executor.shutdown()


def validate_prompt(prompt_token_ids: list[int], max_model_len: int, vocab_size: int, pooling: bool = False) -> None:
    """Raise RequestError naming what is wrong with a prompt and how to fix it (a pooling prompt
    may fill the context: nothing is generated after it)."""
    if not prompt_token_ids:
        raise RequestError("the prompt is empty; give at least one token")
    if pooling and len(prompt_token_ids) > max_model_len:
        raise RequestError(f"the prompt has {len(prompt_token_ids)} tokens, but max_model_len is {max_model_len}; "
                           "shorten it, or set truncate_prompt_tokens to cut it")
    if not pooling and len(prompt_token_ids) >= max_model_len:
        raise RequestError(
            f"the prompt has {len(prompt_token_ids)} tokens, but max_model_len is {max_model_len} "
            "(prompt plus at least one generated token); shorten the prompt or raise --max-model-len"
        )
    if max(prompt_token_ids) >= vocab_size or min(prompt_token_ids) < 0:
        raise RequestError(f"prompt token ids must be in [0, {vocab_size}); "
                           f"got {min(prompt_token_ids)}..{max(prompt_token_ids)}")


def check_runner(runner: str, pooling_params: object | None) -> None:
    """RequestError when a request asks for what the engine's runner does not do."""
    if runner == "pooling" and pooling_params is None:
        raise RequestError("this model runs as a pooling model (runner 'pooling'): it embeds or scores prompts and "
                           "generates nothing; use embed/encode/score (/v1/embeddings, /score, /rerank), or start "
                           "the engine with runner='generate' for a model with an LM head")
    if runner != "pooling" and pooling_params is not None:
        raise RequestError("this model runs as a generative model: pooling (embed/encode/score, /v1/embeddings) needs "
                           "an engine started with runner='pooling' (--runner pooling)")


def _needs_tokens(scheduled: SchedulerOutput) -> bool:
    """Whether a request of this step must know its tokens before the step is launched."""
    return any(req.num_pending_tokens and needs_tokens_before_launch(req.sampling_params) for req in scheduled.requests)


def _without_finished(scheduled: SchedulerOutput) -> SchedulerOutput:
    kept = [(r, n) for r, n in zip(scheduled.requests, scheduled.num_tokens) if not r.status.finished]
    return SchedulerOutput([r for r, _ in kept], [n for _, n in kept], scheduled.preempted)


def _attention_sizes(scheduled: SchedulerOutput) -> dict[str, int]:
    """A step's attention work, for its trace line: ``kv``, the keys and values it reads (each request's earlier and
    new tokens), and ``pairs``, the (query, visible key) pairs of causal attention."""
    kv = pairs = 0
    for req, n in zip(scheduled.requests, scheduled.num_tokens):
        kv += req.num_computed_tokens + n
        pairs += n * req.num_computed_tokens + n * (n + 1) // 2
    return {"kv": kv, "pairs": pairs}


def _count_iteration(stats: StepStats, num_tokens: int) -> None:
    """Count one step of ``num_tokens`` computed tokens in ``stats.iteration_tokens`` (its bucket)."""
    if not stats.iteration_tokens:
        stats.iteration_tokens = [0] * (len(ITERATION_TOKENS_BUCKETS) + 1)
    stats.iteration_tokens[bisect.bisect_left(ITERATION_TOKENS_BUCKETS, num_tokens)] += 1
    stats.iteration_tokens_sum += num_tokens


def _num_prompt_tokens(scheduled: SchedulerOutput) -> int:
    """Prompt tokens computed by this step (before the scheduler advances the requests)."""
    return sum(
        max(0, min(req.num_prompt_tokens, req.num_computed_tokens + n) - req.num_computed_tokens)
        for req, n in zip(scheduled.requests, scheduled.num_tokens)
    )


def pooling_info(config) -> PoolingInfo | None:
    """What front ends need of a PoolerConfig (None for generative engines)."""
    if config is None:
        return None
    return PoolingInfo(config.pooling_type, config.normalize, config.hidden_size, config.num_labels)
