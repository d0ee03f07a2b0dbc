"""A pipeline stage's activations in and out (docs/distributed.md, pipeline parallelism).

Every stage runs the same scheduled step on the same packed inputs, so each knows how many rows
(tokens, or the padded size of a replayed decode graph) the stage before sends: a stage after the
first receives the hidden states and the residual (``[rows, hidden_size]`` each) before its
forward pass, and a stage before the last sends its own after it. Sends are asynchronous; the
next forward pass first waits for them (on NCCL the stream waits, not the host), since a replayed
graph writes its outputs into the same static buffers again.

With ``PAGODA_TRACE_DIR`` set, each rank appends one JSON line per forward pass to
``stage<S>_tp<T>.jsonl``: its number (the same step on every rank), and when the stage started it
(after the activations arrived) and ended it, on the ``time.monotonic()`` clock every process of a
host shares (host time: on a GPU, when the work was queued).
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import torch

from pagoda import envs
from pagoda.interfaces.model import IntermediateTensors
from pagoda.interfaces.parallel import PipelineParallel


class StageLink:
    """This rank's point-to-point link to the ranks of the stages before and after it."""

    def __init__(self, pp: PipelineParallel, hidden_size: int, dtype: torch.dtype, device: torch.device,
                 tp_rank: int = 0) -> None:
        self.pp = pp
        self.hidden_size, self.dtype, self.device = hidden_size, dtype, device
        self._sending: tuple[list, list[torch.Tensor]] = ([], [])  # the works of the last send, and its tensors
        folder = envs.TRACE_DIR.get()
        self.trace = StageTrace(Path(folder) / f"stage{pp.rank}_tp{tp_rank}.jsonl") if folder else None

    def buffers(self, rows: int) -> IntermediateTensors:
        """Fresh ``[rows, hidden_size]`` hidden states and residual (the static inputs of decode graphs)."""
        shape = (rows, self.hidden_size)
        return IntermediateTensors(torch.zeros(shape, dtype=self.dtype, device=self.device),
                                   torch.zeros(shape, dtype=self.dtype, device=self.device))

    def receive(self, rows: int, into: IntermediateTensors | None = None) -> IntermediateTensors:
        """What the stage before sent for a step of ``rows`` rows, received into ``into`` (or new tensors)."""
        into = into if into is not None else IntermediateTensors(*(
            torch.empty((rows, self.hidden_size), dtype=self.dtype, device=self.device) for _ in range(2)))
        self.pp.recv([into.hidden, into.residual])
        return into

    def send(self, out: IntermediateTensors) -> None:
        """Start sending this stage's output to the next stage."""
        self.wait_sends()
        tensors = [out.hidden.contiguous(), out.residual.contiguous()]
        self._sending = (self.pp.send(tensors), tensors)

    def wait_sends(self) -> None:
        """Wait until the last send no longer reads its tensors."""
        works, _ = self._sending
        for work in works:
            work.wait()
        self._sending = ([], [])


class StageTrace:
    """One JSON line per forward pass of this rank: ``{"forward": k, "start": t0, "end": t1}``."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.count = path, 0
        self._encode = msgspec.json.Encoder().encode

    def record(self, start: float) -> None:
        with open(self.path, "ab") as f:  # a line at a time: the trace is for investigations, not for speed
            f.write(self._encode({"forward": self.count, "start": start, "end": time.monotonic()}) + b"\n")
        self.count += 1
