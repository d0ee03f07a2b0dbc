"""runner/profiling.py: the dummy step's layout, and that platforms without measurement skip it."""

from __future__ import annotations

import torch

from pagoda.runner.profiling import dummy_prefill_metadata, profile_activation_bytes
from pagoda.platforms.cpu import CpuPlatform


def test_cpu_profiling_runs_nothing() -> None:
    class Exploding(torch.nn.Module):
        def forward(self, *args):
            raise AssertionError("the CPU platform must not run the profile step")

    assert profile_activation_bytes(Exploding(), None, CpuPlatform(), 8192, 256, 16, 2, 4096) == 0


def test_dummy_prefill_metadata_gives_each_token_its_own_slot() -> None:
    meta = dummy_prefill_metadata(num_tokens=100, num_seqs=7, block_size=16, device=torch.device("cpu"))
    assert meta.seq_lens.tolist() == [15, 15, 14, 14, 14, 14, 14]
    assert meta.query_start_loc.tolist() == [0, 15, 30, 44, 58, 72, 86, 100]
    assert meta.slot_mapping.unique().numel() == 100 and meta.max_seq_len == 15
    # slot of a sequence's token i is block_tables[seq, i // 16] * 16 + i % 16
    assert meta.slot_mapping[15:30].tolist() == [int(meta.block_tables[1, 0]) * 16 + i for i in range(15)]
