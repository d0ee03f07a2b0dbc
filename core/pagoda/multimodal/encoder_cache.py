"""The encoder cache: vision encoder outputs by item content hash, within a budget of rows.

An item's rows are kept while a request still has placeholder tokens of it to compute (it is *pinned*
by that request), so a prompt chunked over several steps encodes each image once; afterwards they stay
as long as the budget allows (least recently used go first), so a repeated image is not encoded again.
Pinned entries may exceed the budget: an item needed by a running request is never dropped.
"""

from __future__ import annotations

from collections import OrderedDict

import torch


class EncoderCache:
    def __init__(self, budget_rows: int) -> None:
        self.budget_rows = budget_rows
        self._rows: OrderedDict[str, torch.Tensor] = OrderedDict()  # content hash -> [tokens, hidden]
        self._pins: dict[str, set[str]] = {}  # content hash -> request ids that still need it
        self.hits = 0  # lookups of an item already encoded
        self.misses = 0  # items encoded

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    @property
    def num_rows(self) -> int:
        return sum(t.shape[0] for t in self._rows.values())

    def get(self, key: str) -> torch.Tensor:
        self._rows.move_to_end(key)
        return self._rows[key]

    def put(self, key: str, rows: torch.Tensor) -> None:
        self._rows[key] = rows
        self._evict()

    def pin(self, key: str, request_id: str) -> None:
        self._pins.setdefault(key, set()).add(request_id)

    def unpin(self, key: str, request_id: str) -> None:
        holders = self._pins.get(key)
        if holders is not None:
            holders.discard(request_id)
            if not holders:
                del self._pins[key]
        self._evict()

    def _evict(self) -> None:
        """Drop least recently used unpinned entries while over the budget."""
        excess = self.num_rows - self.budget_rows
        for key in [k for k in self._rows if k not in self._pins]:
            if excess <= 0:
                break
            excess -= self._rows.pop(key).shape[0]
