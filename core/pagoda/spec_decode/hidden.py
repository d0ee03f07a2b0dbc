"""The target's hidden states, kept per request for proposers that read them (EAGLE).

When the proposer sets ``Proposer.needs_hidden_states``, the model runner hands every step's final
hidden states to :meth:`HiddenStates.record` at launch (``SpecDecodeStep.hidden_reader``, a feature of the runner): the rows of
each request's scheduled tokens are gathered into a tensor of their own (a copy: graph replays
reuse their output buffer), stored by position. Before proposing, :meth:`HiddenStates.take` hands
a request's rows for the positions computed since it last proposed, ending at its last computed
position; rows of rejected drafts (positions at or after the request's last, still uncomputed,
token) are dropped, and a later step's rows replace earlier ones from their first position on
(a draft position recomputed, a preempted request recomputed from the start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import torch

from pagoda.tensors import to_device

if TYPE_CHECKING:
    from pagoda.interfaces.scheduler import SchedulerOutput

Chunk = tuple[int, torch.Tensor]  # (position of its first row, rows [n, hidden])


class HiddenStates:
    def __init__(self) -> None:
        self._chunks: dict[str, list[Chunk]] = {}

    def record(self, out: "SchedulerOutput", hidden: torch.Tensor, query_starts: list[int]) -> None:
        """Keep the hidden states ``[num_tokens (padded), hidden]`` of a launched step, per request."""
        index: list[int] = []
        spans = []
        for i, (req, n) in enumerate(zip(out.requests, out.num_tokens)):
            if n > 0 and getattr(req, "pooling_params", None) is None:
                index.extend(range(query_starts[i], query_starts[i] + n))
                spans.append((req.request_id, req.num_computed_tokens, n))
        if not index:
            return
        if index[-1] - index[0] + 1 == len(index):  # packed rows (eager steps, decode graphs): one slice
            rows = hidden[index[0] : index[-1] + 1].clone()
        else:  # verify graphs: k + 1 slots per request, padding between
            rows = hidden.index_select(0, to_device(index, hidden.device))
        offset = 0
        for request_id, position, n in spans:
            chunks = self._chunks.setdefault(request_id, [])
            _cut(chunks, position)
            chunks.append((position, rows[offset : offset + n]))
            offset += n

    def take(self, request_id: str, end: int) -> torch.Tensor | None:
        """The rows of positions ``end - n .. end - 1`` (the longest contiguous run ending at ``end - 1``),
        forgotten here once taken; None when position ``end - 1`` has none."""
        chunks = self._chunks.pop(request_id, None)
        if not chunks:
            return None
        _cut(chunks, end)
        pieces, expect = [], end
        for start, rows in reversed(chunks):
            if start + len(rows) != expect:  # a gap (e.g. a prefix taken from the cache, never computed)
                break
            pieces.append(rows)
            expect = start
        if not pieces:
            return None
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces[::-1])

    def compact(self, keep: Iterable[str] = ()) -> None:
        """Copy the rows of the requests that did not propose out of the step tensors they were
        gathered in, so a paused request does not keep a whole step's rows alive."""
        skip = set(keep)
        for request_id, chunks in self._chunks.items():
            if request_id not in skip:
                chunks[:] = [(start, rows.clone() if rows._base is not None else rows) for start, rows in chunks]

    def forget(self, request_id: str) -> None:
        self._chunks.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._chunks)


def _cut(chunks: list[Chunk], position: int) -> None:
    """Drop the rows at ``position`` and after."""
    while chunks and chunks[-1][0] >= position:
        chunks.pop()
    if chunks:
        start, rows = chunks[-1]
        if start + len(rows) > position:
            chunks[-1] = (start, rows[: position - start])
