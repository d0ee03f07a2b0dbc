"""Turn a SchedulerOutput into the packed tensors one model step needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.interfaces.attention import AttentionMetadata
from pagoda.interfaces.scheduler import SchedulerOutput


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    metadata: AttentionMetadata
    sample_rows: list[int]  # indices into scheduled requests that sample this step
    sample_token_index: torch.Tensor  # [num_sampling] index of each sampling request's last token


def build_step_inputs(
    out: SchedulerOutput, block_tables: list[list[int]], block_size: int, device: torch.device
) -> StepInputs:
    """Pack the scheduled tokens of all requests along one axis (decodes first, by contract)."""
    starts = [req.num_computed_tokens for req in out.requests]
    ids: list[int] = []
    for req, start, n in zip(out.requests, starts, out.num_tokens):
        ids.extend(req.token_ids[start : start + n])
    query_lens = torch.tensor(out.num_tokens, dtype=torch.int32)
    seq_lens = torch.tensor(starts, dtype=torch.int32) + query_lens
    query_start_loc = torch.zeros(len(starts) + 1, dtype=torch.int32)
    torch.cumsum(query_lens, 0, out=query_start_loc[1:])
    # positions: start of each request plus offset within its chunk
    seq_of_token = torch.repeat_interleave(torch.arange(len(starts)), query_lens.long())  # [num_tokens]
    offsets = torch.arange(len(ids)) - query_start_loc[:-1].long()[seq_of_token]
    positions = torch.tensor(starts, dtype=torch.int64)[seq_of_token] + offsets
    table = _pad_block_tables(block_tables)  # [num_seqs, max_blocks]
    slot_mapping = table[seq_of_token, positions // block_size].long() * block_size + positions % block_size
    sample_rows = [i for i, req in enumerate(out.requests) if starts[i] + out.num_tokens[i] == req.num_tokens]
    metadata = AttentionMetadata(
        slot_mapping=slot_mapping.to(device),
        block_tables=table.to(device),
        query_start_loc=query_start_loc.to(device),
        seq_lens=seq_lens.to(device),
        max_query_len=max(out.num_tokens),
        max_seq_len=int(seq_lens.max()),
        num_decodes=_count_leading_ones(out.num_tokens),
    )
    return StepInputs(
        input_ids=torch.tensor(ids, dtype=torch.int64, device=device),
        positions=positions.to(device),
        metadata=metadata,
        sample_rows=sample_rows,
        sample_token_index=(query_start_loc[1:].long() - 1)[sample_rows].to(device),
    )


def _pad_block_tables(block_tables: list[list[int]]) -> torch.Tensor:
    """One tensor from ragged block tables (padded with block 0, never read past seq_lens)."""
    width = max(1, max(len(t) for t in block_tables))
    return torch.tensor([t + [0] * (width - len(t)) for t in block_tables], dtype=torch.int32)


def _count_leading_ones(values: list[int]) -> int:
    count = 0
    for v in values:
        if v != 1:
            break
        count += 1
    return count
