"""The contract between the model runner and the step features that extend its steps.

A step feature (guided decoding, pooling, speculative verification, LoRA adapters, images of
vision-language models, KV connectors) adds to what :meth:`ModelRunner.launch` does, at fixed points of a step:

1. ``capture_graphs``: once, after the runner's decode graphs: device graphs of the steps the feature
   adds (its ``step_graphs`` are then tried for each step's inputs, before the runner's decode graphs and
   the plain packing);
2. ``begin_step``: a step arrived, before anything of it is queued on the device (KV connectors start
   their loads here); a step may hold no request at all, only ``out.kv_transfers``, and ends there;
3. ``prepare_inputs``: the step's device inputs are packed; the feature may change them (and set
   ``inputs.multimodal``, which the model's forward pass receives as ``ForwardContext.multimodal``);
4. ``run_step``: the feature may run the whole step instead of the runner (pooling);
5. ``after_forward``: the step's hidden states are computed; the feature may read them;
6. ``sample_step``: the feature may sample the step instead of the runner (verifying drafts);
7. ``start_masks`` / ``apply_masks``: the feature may mask the logits before sampling, the mask being
   filled while the host does other work (``job.running``: the runner queues the sampling later);
8. ``release``: a request finished; the feature forgets its state.

Every hook is optional: the base class does nothing, and the runner calls a hook only on the features
that override it, so a feature costs the steps nothing where it does nothing. The engine builder
(:mod:`pagoda.executor.features`) builds the features an engine uses and hands them to each rank's
runner; the runner imports none of them. What a feature needs from the engine core (drafts proposed
before scheduling, beams forking) stays with the engine core's own objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.request import Request
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner, PendingStep


class StepGraphs(Protocol):
    """Device graphs of one kind of step (``ModelRunner`` replays them instead of the eager forward)."""

    graphs: dict

    def size_for(self, out: "SchedulerOutput") -> int | None:
        """The captured size that fits this step, or None."""

    def stage(self, out: "SchedulerOutput", block_tables: list[list[int]], size: int) -> "StepInputs":
        """The step's inputs, written into the graphs' static buffers."""

    def replay(self, size: int) -> "torch.Tensor":
        """Run the captured step of ``size``; its hidden states."""


class MaskJob(Protocol):
    """A logits mask being filled; ``running`` while it is not ready."""

    @property
    def running(self) -> bool: ...


class StepFeature:
    """One capability a model runner's steps run with; override the hooks it needs (module docstring)."""

    step_graphs: StepGraphs | None = None  # set by capture_graphs

    def capture_graphs(self, runner: "ModelRunner", max_model_len: int, max_num_seqs: int) -> None:
        """Record the feature's step graphs, if it has any (every rank, in the same order)."""

    def begin_step(self, runner: "ModelRunner", out: "SchedulerOutput", block_tables: list[list[int]]) -> None:
        """Start of a step (also of a step without requests): nothing of it is queued on the device yet."""

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        """Change the step's device inputs before the forward pass."""

    def run_step(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> "PendingStep | None":
        """Run the whole step in the runner's place, or None to leave it to the runner."""

    def after_forward(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: "torch.Tensor",
                      query_starts: list[int]) -> None:
        """Read the step's hidden states (``[num_tokens (or the graph's size), hidden]``)."""

    def sample_step(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: "torch.Tensor",
                    inputs: "StepInputs", prompt_logprobs: dict) -> "PendingStep | None":
        """Sample the step in the runner's place, or None to leave it to the runner."""

    def start_masks(self, requests: list["Request"], prev: "PendingStep | None") -> MaskJob | None:
        """Start filling a mask for the logits of ``requests`` (one row each), or None for no mask."""

    def apply_masks(self, logits: "torch.Tensor", job: Any) -> None:
        """Mask ``logits`` with ``job``'s mask (waits for its fill)."""

    def mask_rows(self, logits: "torch.Tensor", requests: list["Request"], counts: list[int]) -> None:
        """Mask a verify step's logits: ``counts[i]`` rows in order belong to ``requests[i]``."""

    def can_roll_back(self, request_id: str) -> bool:
        """Whether this feature's state of the request can undo tokens (rejected drafts)."""
        return True

    def release(self, request_id: str) -> None:
        """Forget a finished request."""

    def drop_graphs(self) -> None:
        """Free the feature's step graphs."""
        if self.step_graphs is not None:
            self.step_graphs.graphs.clear()
        self.step_graphs = None


def overriding(features: list[StepFeature], hook: str) -> list[StepFeature]:
    """The features whose class overrides ``hook``: the only ones the runner calls it on."""
    base = getattr(StepFeature, hook)
    return [f for f in features if getattr(type(f), hook) is not base]
