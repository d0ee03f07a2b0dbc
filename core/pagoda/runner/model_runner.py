"""Runs one scheduled step on the platform: packed inputs -> model -> logits -> sampled tokens."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

import numpy as np
import torch

from pagoda.interfaces.parallel import SINGLE, WHOLE, PipelineParallel, TensorParallel
from pagoda.runner.batch import StepInputs, pack_host_inputs, stage
from pagoda.runner.features import StepFeature, StepGraphs, overriding
from pagoda.runner.pipeline import StageLink
from pagoda.request import Request
from pagoda.sampling.sampler import DeviceSample, Sampler, SamplerOutput, SamplingRow, prompt_logprobs
from pagoda.interfaces.attention import AttentionBackend
from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

if TYPE_CHECKING:
    from pagoda.runner.features import MaskJob

G = TypeVar("G")  # a set of decode graphs (runner.graphs.DecodeGraphs or a subclass)
HostCopies = Callable[[], list[torch.Tensor]]  # waits for a step's tensors on the host and returns them


@dataclass
class RunnerOutput:
    """Per request that sampled this step: its token, raw logprob and top logprobs (logprobs only
    when some request of the step asked for them)."""

    sampled: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, float] = field(default_factory=dict)
    top_logprobs: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # request id -> [(logprob of the actual next prompt token, top-k)] for this step's prompt tokens
    prompt_logprobs: dict[str, list[tuple[float, list[tuple[int, float]]]]] = field(default_factory=dict)
    # runner "pooling": request id -> (its pooled float32 values as bytes, their shape)
    pooled: dict[str, tuple[bytes, list[int]]] = field(default_factory=dict)
    # speculative decoding: request id -> its accepted drafts and the token after them
    # (pagoda.spec_decode.verify.Verified), for the requests that verified drafts this step
    verified: dict[str, object] = field(default_factory=dict)


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        attention: AttentionBackend,
        platform: Platform,
        kv_caches: list[torch.Tensor],
        block_size: int,
        seed: int,
        tp: TensorParallel = SINGLE,
        features: list[StepFeature] = (),
        pp: PipelineParallel = WHOLE,
    ) -> None:
        self.model = model
        self.attention = attention
        self.platform = platform
        self.device = platform.device()
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.tp = tp  # every rank runs the same steps; the tokens sampled on rank 0 are the step's
        self.pp = pp  # a pipeline stage: activations from the stage before, to the stage after; the last samples
        self.link = (StageLink(pp, model.config.hidden_size, attention.spec.dtype, self.device, tp.rank)
                     if pp.size > 1 else None)
        self.sampler = Sampler(seed=seed)
        self._generators: dict[str, torch.Generator] = {}
        self.graphs = None  # DecodeGraphs once captured
        self.step_graphs: list[StepGraphs] = []  # the decode graphs and the features' graphs, tried in order
        self.features = list(features)  # pagoda.runner.features: guided decoding, pooling, verifying drafts, ...
        self._begins, self._prepares, self._runs, self._readers, self._samplers, self.masks, self._releases = (
            overriding(self.features, hook) for hook in
            ("begin_step", "prepare_inputs", "run_step", "after_forward", "sample_step", "start_masks", "release"))
        self._unsampled: PendingStep | None = None  # a launched masked step whose sampling waits for its mask
        self._late_releases: list[str] = []  # requests finished while that step was unsampled (it still samples them)

    def capture_graphs(self, max_model_len: int, max_num_seqs: int) -> None:
        """Record decode steps as device graphs, then the features' steps (only where backend and platform
        support it: :func:`pagoda.runner.graphs.use_graphs`)."""
        from pagoda.runner.graphs import DecodeGraphs

        self.graphs = self.decode_graphs(DecodeGraphs, max_model_len, max_num_seqs)
        self.graphs.capture()
        for feature in self.features:
            feature.capture_graphs(self, max_model_len, max_num_seqs)
        # a feature's graphs first: they take the steps they were made for, the decode graphs the rest
        self.step_graphs = [f.step_graphs for f in self.features if f.step_graphs is not None] + [self.graphs]

    def decode_graphs(self, cls: type[G], max_model_len: int, max_num_seqs: int) -> G:
        """An uncaptured set of decode graphs (``DecodeGraphs`` or a subclass) of this runner's model."""
        return cls(self.model, self.attention, self.platform, self.kv_caches, self.block_size, max_model_len,
                   max_num_seqs, self.link if not self.pp.is_first else None)

    def feature(self, cls: type[StepFeature]) -> StepFeature | None:
        """This runner's feature of class ``cls``, if it has one."""
        return next((f for f in self.features if isinstance(f, cls)), None)

    def drop_graphs(self) -> None:
        """Free the captured graphs and wait for the device: before a tensor-parallel group is destroyed,
        since NCCL's destroy waits for every graph that captured one of its collectives to be gone."""
        if self.graphs is not None:
            self.graphs.graphs.clear()
        for feature in self.features:
            feature.drop_graphs()
        self.graphs, self.step_graphs = None, []
        gc.collect()
        self.platform.synchronize()

    def launch(self, out: SchedulerOutput, block_tables: list[list[int]], prev: PendingStep | None = None) -> PendingStep:
        """Queue one step on the device and return without waiting for its tokens.

        Tokens that are still ``PLACEHOLDER``s on the host (sampled by ``prev``, the step before,
        whose tokens are not read yet) are taken from ``prev``'s device tensor. The step features
        (:mod:`pagoda.runner.features`) join in at their hooks. A step whose logits a feature masks may
        return before its sampling is queued, which waits for the mask (:meth:`PendingStep.queue_sampling`,
        called before the next forward pass at the latest).
        """
        for feature in self._begins:  # e.g. a KV connector's loads, beside the steps that follow
            feature.begin_step(self, out, block_tables)
        if not out.requests:  # a step of KV transfers only
            return PendingStep([], None, lambda: [], {})
        inputs = self._inputs(out, block_tables)
        with self.platform.inference_context():
            if self._unsampled is not None:  # the step before samples first: this forward pass may read its tokens
                self._unsampled.queue_sampling()
            if prev is not None:
                self._fill_placeholders(out, inputs, prev)
            for feature in self._prepares:  # e.g. drafts still being computed on the device
                feature.prepare_inputs(self, out, inputs)
            for feature in self._runs:  # e.g. pooling: whole prompts, pooled; nothing is sampled
                step = feature.run_step(self, out, inputs)
                if step is not None:
                    return step
            hidden = self._forward(inputs)  # [num_tokens (or the padded graph size), hidden]
            for feature in self._readers:  # e.g. an EAGLE proposer reads them
                feature.after_forward(self, out, hidden, inputs.query_starts)
            if not self.pp.is_last:  # the last stage samples; the engine core reads its tokens from there
                return PendingStep([out.requests[i] for i in inputs.sample_rows], None, None, {})
            prompt_lps: dict = {}
            self._prompt_logprobs(out, hidden, inputs.query_starts, prompt_lps)
            if not inputs.sample_rows:
                return PendingStep([], None, lambda: [], prompt_lps)
            for feature in self._samplers:  # e.g. verifying drafts
                step = feature.sample_step(self, out, hidden, inputs, prompt_lps)
                if step is not None:
                    return step
            return self._sample_step(out, hidden, inputs, prev, prompt_lps)

    def _sample_step(self, out: SchedulerOutput, hidden: torch.Tensor, inputs: StepInputs, prev: PendingStep | None,
                     prompt_lps: dict) -> PendingStep:
        """The logits of the requests that sample, their masks started, their sampling queued (or left
        for later while a mask is filled on another thread)."""
        requests = [out.requests[i] for i in inputs.sample_rows]
        index = inputs.sample_token_index
        logits = self.model.compute_logits(hidden[: len(requests)] if index is None else hidden[index])
        rows = [self.sampling_row(req) for req in requests]  # read now: the engine core adds tokens before a later sampling
        jobs = [(f, job) for f in self.masks if (job := f.start_masks(requests, prev)) is not None]
        if any(job.running for _, job in jobs):  # a mask is filled on another thread meanwhile
            self._unsampled = PendingStep(requests, None, None, prompt_lps,
                                          later=lambda: self._sample_later(logits, rows, jobs))
            return self._unsampled
        sample, copies = self._sample(logits, rows, jobs)
        return PendingStep(requests, sample, copies, prompt_lps)

    def mask_rows(self, logits: torch.Tensor, requests: list[Request], counts: list[int]) -> None:
        """Mask a verify step's logits (``counts[i]`` rows in order for ``requests[i]``) by the features' masks."""
        for feature in self.masks:
            feature.mask_rows(logits, requests, counts)

    def _sample(self, logits: torch.Tensor, rows: list[SamplingRow],
                jobs: list[tuple[StepFeature, "MaskJob"]]) -> tuple[DeviceSample, HostCopies]:
        """Queue a step's masking (once its masks are filled), sampling and the tokens' copy to the host."""
        with self.platform.inference_context():
            for feature, job in jobs:
                feature.apply_masks(logits, job)
            sample = self.sampler.sample(logits, rows)
            if not self.sampler.picks_alike(rows):  # else every rank's argmax is rank 0's already
                self.tp.broadcast(sample.token_ids)  # ranks > 0 continue from rank 0's tokens (no-op alone)
            copies = self.platform.copy_to_host_async(sample.tensors(), beside=True)  # the sampler's new tensors
        return sample, copies

    def _sample_later(self, logits: torch.Tensor, rows: list[SamplingRow],
                      jobs: list[tuple[StepFeature, "MaskJob"]]) -> tuple[DeviceSample, HostCopies]:
        """:meth:`_sample` for the unsampled step, then the releases that waited for it."""
        sampled = self._sample(logits, rows, jobs)
        self._unsampled = None
        for request_id in self._late_releases:
            self._forget(request_id)
        self._late_releases.clear()
        return sampled

    def _fill_placeholders(self, out: SchedulerOutput, inputs: StepInputs, prev: PendingStep) -> None:
        """Write ``prev``'s sampled tokens over the placeholders among this step's input ids."""
        dst, src = [], []
        for i, req in enumerate(out.requests):
            if req.num_pending_tokens:
                offset = req.num_tokens - 1 - req.num_computed_tokens  # the placeholder among its tokens
                assert req.num_pending_tokens == 1 and 0 <= offset < out.num_tokens[i], "placeholder not at the end"
                dst.append(inputs.query_starts[i] + offset)
                src.append(prev.rows[req.request_id])
        if dst:
            self.copy_input_ids(inputs, dst, src, prev.sample.token_ids)

    def copy_input_ids(self, inputs: StepInputs, dst: list[int], src: list[int], source: torch.Tensor) -> None:
        """``input_ids[dst] = source[src]`` on the device, the indices staged from pinned memory."""
        host = self.platform.host_buffer(16 * len(dst))
        host.numpy()[:] = np.asarray(dst + src, dtype=np.int64).view(np.uint8)
        index = (host if self.device.type == "cpu" else host.to(self.device, non_blocking=True)).view(torch.int64)
        inputs.input_ids.index_copy_(0, index[: len(dst)], source.index_select(0, index[len(dst) :]))

    def _inputs(self, out: SchedulerOutput, block_tables: list[list[int]]) -> StepInputs:
        for graphs in self.step_graphs:
            size = graphs.size_for(out)
            if size is not None:
                return graphs.stage(out, block_tables, size)
        return stage(pack_host_inputs(out, block_tables, self.block_size), self.platform)

    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        """The step's hidden states (on a pipeline stage before the last: what it sent the next stage)."""
        link = self.link
        if link is not None:
            link.wait_sends()  # a replay writes the outputs the last send may still read
        if inputs.graph_size is not None:
            graphs = inputs.graphs or self.graphs
            if link is not None and not self.pp.is_first:
                link.receive(inputs.graph_size, graphs.intermediate_inputs(inputs.graph_size))
            start = time.monotonic()
            hidden = graphs.replay(inputs.graph_size)
        else:
            metadata = self.attention.prepare(inputs.metadata)
            fwd = ForwardContext(metadata, self.kv_caches, multimodal=inputs.multimodal)
            if link is not None and not self.pp.is_first:
                fwd.intermediate = link.receive(inputs.input_ids.shape[0])
            start = time.monotonic()
            hidden = self.model(inputs.input_ids, inputs.positions, fwd)
        if link is not None:
            if link.trace is not None:
                link.trace.record(start)
            if not self.pp.is_last:
                link.send(hidden)
        return hidden

    def release(self, request_id: str) -> None:
        """Forget per-request state (its seeded generator, cached sampling tensors, grammar matcher)
        once the request finished; after the unsampled step, if one may still sample it."""
        if self._unsampled is not None:
            self._late_releases.append(request_id)
        else:
            self._forget(request_id)

    def _forget(self, request_id: str) -> None:
        self._generators.pop(request_id, None)
        self.sampler.release(request_id)
        for feature in self._releases:
            feature.release(request_id)

    def sampling_row(self, req: Request) -> SamplingRow:
        params = req.sampling_params
        generator = None
        if params.seed is not None:
            generator = self._generators.get(req.request_id)
            if generator is None:
                generator = torch.Generator(self.device).manual_seed(params.seed)
                self._generators[req.request_id] = generator
        return SamplingRow(
            params=params,
            prompt_token_ids=req.prompt_token_ids,
            output_token_ids=req.output_token_ids,
            generator=generator,
            eos_token_id=req.eos_token_id,
            request_id=req.request_id,
        )

    def _prompt_logprobs(self, out: SchedulerOutput, hidden: torch.Tensor, starts: list[int], result: dict) -> None:
        """Logprobs of each prompt token given the ones before it, for requests that asked."""
        for i, req in enumerate(out.requests):
            k = req.sampling_params.prompt_logprobs
            first = req.num_computed_tokens
            last = min(first + out.num_tokens[i], req.num_prompt_tokens - 1)  # positions predicting a prompt token
            if k is None or first >= last:
                continue
            logits = self.model.compute_logits(hidden[starts[i] : starts[i] + last - first])
            targets = torch.tensor(req.prompt_token_ids[first + 1 : last + 1], device=logits.device)
            result[req.request_id] = prompt_logprobs(logits, targets, k)  # waits for the device


class PendingStep:
    """A launched step: its sampled tokens are on the device until :meth:`result` reads them.

    A guided step may be launched before its sampling is queued (``later``: queues it and returns
    the sample and its host copies, once its grammar bitmask is filled); :meth:`queue_sampling`
    queues it, and :meth:`result` if nothing did before.
    """

    pooled_request_ids: tuple[str, ...] = ()  # pooling steps (pagoda.pooling.runner.PendingPooling): the requests pooled

    def __init__(self, requests: list[Request], sample: DeviceSample | None, copies: HostCopies | None,
                 prompt_logprobs: dict, later: Callable[[], tuple[DeviceSample, HostCopies]] | None = None) -> None:
        self.requests = requests  # the requests that sample, in row order
        self.rows = {req.request_id: i for i, req in enumerate(requests)}
        self.sample = sample
        self._copies = copies
        self._later = later
        self._prompt_logprobs = prompt_logprobs
        self._result: RunnerOutput | None = None

    def queue_sampling(self) -> None:
        """Queue the step's sampling if it was left for later (waits for its grammar bitmask; raises
        the fill's error)."""
        if self._later is not None:
            later, self._later = self._later, None
            self.sample, self._copies = later()

    def result(self) -> RunnerOutput:
        """Wait for the step's tokens (and logprobs) and return them per request id (read once:
        guided decoding may read them while launching the next step, the engine core after)."""
        if self._result is None:
            self._result = self._read()
        return self._result

    def _wait(self) -> list[torch.Tensor]:
        """The sampled tensors on the host (MultiprocExecutor wraps this to catch failed ranks)."""
        return self._copies()

    def _read(self) -> RunnerOutput:
        self.queue_sampling()
        result = RunnerOutput(prompt_logprobs=self._prompt_logprobs)
        if self.sample is None:
            return result
        sampled: SamplerOutput = self.sample.to_output(self._wait())
        for i, req in enumerate(self.requests):
            result.sampled[req.request_id] = sampled.token_ids[i]
            if sampled.logprobs:
                result.logprobs[req.request_id] = sampled.logprobs[i]
            if sampled.top_logprobs[i] is not None:
                result.top_logprobs[req.request_id] = sampled.top_logprobs[i]
        return result
