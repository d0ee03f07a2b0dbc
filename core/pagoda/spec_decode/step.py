"""Speculative decoding's part of the model runner's steps (a :class:`~pagoda.runner.features.StepFeature`):
verify steps recorded as device graphs, drafts still being computed on the device copied into a
step's inputs, the drafts verified in place of plain sampling, and the hidden states handed to a
proposer that reads them (EAGLE). The engine core's :class:`~pagoda.spec_decode.engine.Speculator`
proposes the drafts and settles what each verify step accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from pagoda.runner.features import StepFeature
from pagoda.speculative_config import SpeculativeConfig
from pagoda.spec_decode.verify import launch_verify
from pagoda.spec_decode.verify_graphs import VerifyGraphs

if TYPE_CHECKING:
    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner, PendingStep

HiddenReader = Callable[["SchedulerOutput", torch.Tensor, list[int]], None]


class SpecDecodeStep(StepFeature):
    """Every rank's runner has one when ``--speculative-config`` is set."""

    def __init__(self, config: SpeculativeConfig, lora: bool = False) -> None:
        self.config = config
        self.lora = lora  # LoRA adapters enabled: verify graphs only for steps without them (VerifyGraphs)
        self.hidden_reader: HiddenReader | None = None  # set by a proposer that reads the target's hidden states

    def capture_graphs(self, runner: "ModelRunner", max_model_len: int, max_num_seqs: int) -> None:
        """Verify steps of ``num_speculative_tokens + 1`` tokens a request, after the decode graphs (every
        tensor-parallel rank alike: the warm-up passes meet in collectives, and every rank pads a verify
        step to the same captured size)."""
        self.step_graphs = VerifyGraphs(runner.model, runner.attention, runner.platform, runner.kv_caches,
                                        runner.block_size, self.config.num_speculative_tokens + 1, max_model_len,
                                        max_num_seqs, base_model_only=self.lora)
        self.step_graphs.capture()

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        """Copy the drafts a proposer is still computing on the device (``req.draft_source``, queued
        before this step) into their places among this step's input ids."""
        dst, src, source = [], [], None
        for i, req in enumerate(out.requests):
            if req.draft_source is None or not req.num_draft_tokens:
                continue
            tokens, positions = req.draft_source
            assert source is None or tokens is source, "drafts on the device come from one round a step"
            source, d = tokens, req.num_draft_tokens
            first = inputs.query_starts[i] + out.num_tokens[i] - d  # the drafts end the request's query
            dst.extend(range(first, first + d))
            src.extend(positions[:d])
        if dst:
            runner.copy_input_ids(inputs, dst, src, source)

    def after_forward(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor,
                      query_starts: list[int]) -> None:
        if self.hidden_reader is not None:
            self.hidden_reader(out, hidden, query_starts)

    def sample_step(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor, inputs: "StepInputs",
                    prompt_logprobs: dict) -> "PendingStep | None":
        """The verify step's sampling, when a request of the step verifies drafts."""
        if not any(out.requests[i].num_draft_tokens for i in inputs.sample_rows):
            return None
        return launch_verify(runner, out, hidden, inputs.sample_rows, inputs.query_starts, prompt_logprobs)
