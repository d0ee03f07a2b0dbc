"""The split-KV plan shared by the GPU backends (pagoda.attention.split_kv), on H100-like numbers."""

from __future__ import annotations

import pytest

from pagoda.attention.split_kv import balance_waves, choose_num_splits

SMS = 132


@pytest.mark.parametrize(
    ("batch", "ctx", "per_sm", "expected"),
    [
        (64, 4096, 3, 3),  # 512 programs on 3 slots per SM: 4 on most SMs, the 4th alone -> split 3 (12 per SM)
        (64, 1024, 3, 3),
        (32, 8192, 3, 1),  # 256 programs: 2 per SM, none alone
        (256, 1024, 3, 1),  # 16 per SM: a long run, left alone (measured 96-100% of copy)
        (64, 4096, 4, 1),  # head 64: 4 per SM, 4 programs per SM run together
        (64, 4096, 1, 1),  # head 256: one per SM, nothing to balance
        (64, 300, 3, 1),  # too short to split
        (1, 32768, 3, 32),  # fewer programs than SMs: choose_num_splits decides
        (4, 32768, 3, 8),
    ],
)
def test_balance_waves(batch: int, ctx: int, per_sm: int, expected: int) -> None:
    programs = batch * 8  # Llama-3.1-8B: 8 kv heads, one program each
    splits = balance_waves(programs, choose_num_splits(batch, 8, ctx, SMS), ctx, SMS, per_sm)
    assert splits == expected


def test_balance_waves_unknown_occupancy_keeps_the_split() -> None:
    assert balance_waves(512, 1, 4096, SMS, 0) == 1
    assert balance_waves(132, 1, 4096, SMS, 3) == 3  # one program per SM, each alone: split
