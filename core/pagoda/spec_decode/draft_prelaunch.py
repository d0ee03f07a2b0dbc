"""Draft rounds queued on the device straight behind a verify step, before the host reads it.

A fed round (:mod:`pagoda.spec_decode.draft_chain`) starts from the verify step's outcome: how
many drafts the target accepted (``a``) and its token after them (the *bonus*). Read on the host
first, that costs a synchronisation and the round's host work while the device idles between the
two. Here a shadow that verified drafts gets its next round staged for every outcome at once, and
the device picks each row's own:

- outcome ``a`` of a shadow holding ``T + D`` (its tokens, then ``m`` drafts, KV computed for all
  but the last draft) that verified ``D[:d]``: the tokens ``T + D[:a] + [bonus]``; the first step
  starts at ``len(T) + min(a, m - 1)`` and feeds the bonus (and ``D[m - 1]`` before it when
  ``a = m``, whose KV the last round did not compute); ``k`` steps follow as in any round;
- the outcomes' step records differ only in positions, KV slots and lengths: they are staged
  together, variant ``v`` of a row being its outcome ``min(v, d)``, and each row's bytes are taken
  from its variant ``a`` by one gather (:func:`record_rows` maps each byte to its row);
- ``a`` is the accepted prefix of the verify's sampled tokens (:func:`pagoda.spec_decode.verify.accepted_prefix`
  on the device), the bonus the token sampled after it, written into the first step's input ids.

:class:`Prelaunched` keeps what each row assumed; the next ``propose`` checks the tokens it is
given against it and hands out the drafts computed for that outcome (or drops the shadow if they
disagree, which only a bug would make happen).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from pagoda.interfaces.proposer import VerifyOutcome
from pagoda.spec_decode.draft_chain import ChainRow, DraftChain, Staged, chain_arrays, table_columns
from pagoda.spec_decode.draft_steps import MAX_QUERY, record_dtype


@dataclass
class PrelaunchedRow:
    """One shadow's round for every outcome of its verify step."""

    shadow: object  # the draft proposer's _Shadow it was queued for
    base: int  # len(T): the tokens before the drafts
    drafts: list[int]  # the drafts verified (D[:d])
    held: int  # m: the drafts the shadow holds (d <= m)
    rows: list[ChainRow]  # per outcome a = 0..d
    column: int  # its row in the round

    @property
    def two_fed(self) -> int:
        """The outcome whose first step feeds two tokens (``a = m``), or -1 where none can (``d < m``)."""
        return self.held if len(self.drafts) == self.held else -1


@dataclass
class Prelaunched:
    """A round queued behind a verify step: its drafts ``tokens`` ``[k, size]`` on the device; ``wait``
    returns ``[tokens, accepted [size]]`` on the host."""

    rows: dict[str, PrelaunchedRow]
    tokens: torch.Tensor
    wait: Callable[[], list[torch.Tensor]]
    _read: tuple[list[list[int]], list[int]] | None = None

    def positions(self, plan: PrelaunchedRow, count: int) -> list[int]:
        """Where ``plan``'s first ``count`` drafts are in ``tokens.view(-1)``."""
        return [j * self.tokens.shape[1] + plan.column for j in range(count)]

    def read(self) -> tuple[list[list[int]], list[int]]:
        """Each row's column of drafts, and the outcome ``a`` the device picked for it (waits once)."""
        if self._read is None:
            tokens, accepted = self.wait()
            self._read = tokens.T.tolist(), accepted.tolist()
        return self._read


def outcome_rows(base: int, drafts: list[int], held: int, last_draft: int, k: int, blocks: list[int]) -> list[ChainRow]:
    """A shadow's round per outcome ``a = 0..len(drafts)``, the bonus a placeholder 0 in ``fed``."""
    rows = []
    for a in range(len(drafts) + 1):
        fed = (0,) if a < held else (last_draft, 0)  # a = m: D[m - 1] has no KV yet
        rows.append(ChainRow(base + min(a, held - 1), k, blocks, fed))
    return rows


def queue(chain: DraftChain, plans: list[PrelaunchedRow], outcome: VerifyOutcome, index: list[int],
          k: int) -> tuple[torch.Tensor, Callable[[], list[torch.Tensor]]]:
    """Stage every outcome of ``plans`` (``index[i]``: plan i's position in ``outcome``), pick each
    row's on the device and queue the round's ``k`` steps; returns its drafts ``[k, size]`` on the
    device and the wait for them and the outcomes on the host."""
    block_size, b = chain.runner.block_size, len(plans)
    variants = [[p.rows[min(v, len(p.drafts))] for p in plans] for v in range(k + 1)]  # variant v: outcome min(v, d)
    columns = max(table_columns(rows, block_size, MAX_QUERY) for rows in variants)
    size = chain.steps.size_for(b, columns)
    graphed, size = size is not None, size or b
    arrays = [chain_arrays(rows, k, size, block_size, MAX_QUERY, columns) for rows in variants]
    table, records, stacked = chain.stage(arrays, size, k)
    accepted, bonus, two_fed = _outcomes(chain, plans, outcome, index, size, k)
    chosen = _choose(stacked, [r.numel() for r in records[0]], accepted, size)
    first_ids = _first_ids(chosen[0], size, bonus, two_fed)
    max_seq_lens = [max(a.max_seq_lens[j] for a in arrays) for j in range(k)]
    tokens = torch.empty((k, size), dtype=torch.long, device=accepted.device)
    chain.queue_steps(Staged(table, chosen, MAX_QUERY, max_seq_lens), size, graphed, tokens, first_ids=first_ids)
    return tokens, chain.runner.platform.copy_to_host_async([tokens, accepted])


def _outcomes(chain: DraftChain, plans: list[PrelaunchedRow], outcome: VerifyOutcome, index: list[int], size: int,
              k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """On the device, per row (``size``; padding rows: 0): the accepted count ``a``, the bonus token,
    and whether the first step feeds two tokens (``a = m``)."""
    host = np.full((size, 2 * k + 2), -1, dtype=np.int64)  # [where each sampled token is | drafts, -1 past | m]
    host[:, : k + 1] = 0
    for plan, i in zip(plans, index):
        d = len(plan.drafts)
        host[plan.column, : k + 1] = outcome.offsets[i] + np.minimum(np.arange(k + 1), d)
        host[plan.column, k + 1 : k + 1 + d] = plan.drafts
        host[plan.column, 2 * k + 1] = plan.two_fed
    buffer = chain.runner.platform.host_buffer(host.nbytes)
    buffer.numpy()[:] = host.reshape(-1).view(np.uint8)
    device = outcome.sampled.device
    staged = (buffer if device.type == "cpu" else buffer.to(device, non_blocking=True)).view(torch.int64).view(size, -1)
    sampled = outcome.sampled[staged[:, : k + 1]]  # [size, k + 1]
    accepted = (sampled[:, :k] == staged[:, k + 1 : 2 * k + 1]).long().cumprod(dim=1).sum(dim=1)
    bonus = sampled.gather(1, accepted[:, None])[:, 0]
    return accepted, bonus, (accepted == staged[:, 2 * k + 1]).long()


def _choose(stacked: torch.Tensor, record_bytes: list[int], accepted: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Each step's record (``record_bytes`` each), every row's bytes from its outcome's variant
    (``stacked``: ``[variants, bytes]``), in one gather."""
    owner = record_rows(size, len(record_bytes), accepted.device)
    picked = stacked.gather(0, accepted[owner][None, :])[0]  # [bytes]
    ends = np.cumsum([0, *record_bytes])
    return [picked[ends[j] : ends[j + 1]] for j in range(len(record_bytes))]


def _first_ids(first: torch.Tensor, size: int, bonus: torch.Tensor, two_fed: torch.Tensor) -> torch.Tensor:
    """The first step's input ids ``[size * 2]``: its record's, the bonus in slot 0, or in slot 1
    after ``D[m - 1]`` where the first step feeds two tokens."""
    offset = record_dtype(size, MAX_QUERY).fields["input_ids"][1]
    ids = first[offset : offset + size * MAX_QUERY * 8].view(torch.int64).view(size, MAX_QUERY).clone()
    ids.scatter_(1, two_fed[:, None], bonus[:, None])
    return ids.view(-1)


@functools.cache
def record_rows(size: int, num_steps: int, device: torch.device) -> torch.Tensor:
    """The row each byte of a round's step records belongs to (the first step with MAX_QUERY slots a
    row, the others with one; padding bytes: row 0), on ``device`` (copied once: a copy from pageable
    memory would wait for the verify step)."""
    parts = [_owners(record_dtype(size, MAX_QUERY), size)]
    parts += [_owners(record_dtype(size, 1), size)] * (num_steps - 1)
    return torch.as_tensor(np.concatenate(parts), device=device)


def _owners(dtype: np.dtype, size: int) -> np.ndarray:
    owners = np.zeros(dtype.itemsize, dtype=np.int64)
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        count, width = field.shape[0], field.base.itemsize
        owners[offset : offset + count * width] = np.repeat(np.arange(count) // (count // size), width)
    return owners
