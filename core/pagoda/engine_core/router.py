"""Which data-parallel engine core a request goes to: the one that holds its prompt's prefix, unless
that core is much busier than the least busy one; else the least busy (docs/distributed.md).

A front end remembers, for the full KV blocks of every prompt it routed, the core it sent them to
(a chained hash per block of ``block_size`` tokens, as the cores' prefix caches key them; the most
recent :data:`MAX_PREFIXES` blocks). A new prompt goes to the core of its longest remembered prefix
while that core has no more than :func:`much_busier`'s allowance over the least busy core. Load is
the number of this front end's unfinished sequences on each core: with several API servers, each
balances its own requests. Dead cores are never chosen.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_PREFIXES = 1 << 17  # remembered blocks (about 10 MB of hashes)


def much_busier(load: int, least: int) -> bool:
    """Whether a core with ``load`` sequences is too busy for an affine request, the least busy having ``least``:
    more than twice as many, and at least 4 more."""
    return load > 2 * least and load - least >= 4


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """A chained hash for each full block of ``token_ids``: block i's hash covers tokens ``[0, (i+1)*block_size)``."""
    hashes, h = [], 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hash((h, tuple(token_ids[start : start + block_size])))
        hashes.append(h)
    return hashes


class CoreRouter:
    """Routes requests over ``num_cores`` engine cores and keeps their loads."""

    def __init__(self, num_cores: int, block_size: int) -> None:
        self.block_size = block_size
        self.load = [0] * num_cores  # unfinished sequences routed to each core
        self.alive = [True] * num_cores
        self.routed = [0] * num_cores  # requests routed to each core since start (for logs and tests)
        self.prefix_core: OrderedDict[int, int] = OrderedDict()  # block hash -> the core last sent that prefix

    def choose(self, prompt_token_ids: list[int]) -> int:
        """The core for a new request (RuntimeError when every core is dead)."""
        live = [d for d, ok in enumerate(self.alive) if ok]
        if not live:
            raise RuntimeError("every data-parallel engine core has died")
        least = min(live, key=lambda d: self.load[d])
        hashes = block_hashes(prompt_token_ids, self.block_size)
        affine = self._longest_prefix_core(hashes)
        core = affine if affine is not None and not much_busier(self.load[affine], self.load[least]) else least
        for h in hashes:
            self.prefix_core[h] = core
            self.prefix_core.move_to_end(h)
        while len(self.prefix_core) > MAX_PREFIXES:
            self.prefix_core.popitem(last=False)
        self.routed[core] += 1
        return core

    def _longest_prefix_core(self, hashes: list[int]) -> int | None:
        for h in reversed(hashes):
            core = self.prefix_core.get(h)
            if core is not None and self.alive[core]:
                return core
        return None

    def died(self, core: int) -> None:
        """``core`` is gone: it is never chosen again, and its remembered prefixes are dropped."""
        self.alive[core] = False
        self.load[core] = 0
        for h in [h for h, d in self.prefix_core.items() if d == core]:
            del self.prefix_core[h]
