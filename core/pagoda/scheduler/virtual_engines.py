"""One scheduler per micro-batch in flight, over one KV cache (pipeline parallelism).

With P pipeline stages, P steps run at once, one in each stage. A request's next decode step needs
the token its last step samples, which the last stage produces only once that step has left every
stage: so the requests are split into P groups (virtual engines, as vLLM's V0 named them), each
its own scheduler of the chosen kind, and a step holds one group's requests. While a group's step
is in flight the others schedule theirs; the group schedules again once its step's tokens are
read. New requests join the group with the fewest unfinished requests.

The groups share the KV cache (its block pool and prefix cache), and each preempts only its own
requests when blocks run out. Blocks freed while a step that wrote them is still in flight may go
to a later step at once: every stage runs the steps in the order they were launched, so a stage
writes and reads the blocks of its own layers in that order.
"""

from __future__ import annotations

from pagoda.interfaces.scheduler import Scheduler, SchedulerOutput
from pagoda.request import Request, RequestStatus


class VirtualEngines(Scheduler):
    """``engines[i]`` schedules group ``i``; :meth:`schedule` asks the next group that is not in flight."""

    def __init__(self, engines: list[Scheduler]) -> None:
        super().__init__(engines[0].config, engines[0].kv_cache)
        self.engines = engines
        self.group_of: dict[str, int] = {}  # unfinished request id -> its group
        self.in_flight = [False] * len(engines)
        self.next = 0  # the group asked first by the next schedule() (round robin)
        self.last_group: int | None = None  # the group of the last non-empty schedule()

    @property
    def num_waiting(self) -> int:
        return sum(e.num_waiting for e in self.engines)

    @property
    def num_running(self) -> int:
        return sum(e.num_running for e in self.engines)

    def load(self, group: int) -> int:
        engine = self.engines[group]
        return engine.num_running + engine.num_waiting

    def add_request(self, request: Request) -> None:
        group = min(range(len(self.engines)), key=self.load)
        self.engines[group].add_request(request)
        self.group_of[request.request_id] = group

    def fork(self, parent: Request, child: Request) -> None:
        """The child joins its parent's group (a beam's step then holds its siblings)."""
        group = self.group_of[parent.request_id]
        self.engines[group].fork(parent, child)
        self.group_of[child.request_id] = group

    def fork_refusal(self) -> str | None:
        return self.engines[0].fork_refusal()

    def schedule(self) -> SchedulerOutput:
        """The step of the first group, from the round robin's turn on, that is not in flight and has work; it is
        in flight from now until :meth:`step_done`. Empty when none has."""
        count = len(self.engines)
        preempted: list[Request] = []
        for k in range(count):
            group = (self.next + k) % count
            if self.in_flight[group]:
                continue
            out = self.engines[group].schedule()
            preempted += out.preempted
            if not out.is_empty():
                self.in_flight[group], self.next, self.last_group = True, (group + 1) % count, group
                out.preempted = preempted
                return out
        return SchedulerOutput(preempted=preempted)

    def step_done(self, group: int) -> None:
        """Group ``group``'s step was read: it may schedule again."""
        self.in_flight[group] = False

    def update_from_output(self, output: SchedulerOutput, sampled: dict[str, int]) -> None:
        if output.requests:
            self.engines[self.group_of[output.requests[0].request_id]].update_from_output(output, sampled)

    def finish(self, request_id: str, status: RequestStatus) -> None:
        group = self.group_of.pop(request_id, None)
        if group is not None:
            self.engines[group].finish(request_id, status)
