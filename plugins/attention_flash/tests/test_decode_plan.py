"""The flash decode split choice (pagoda_attention_flash.plan): the kernel's shared memory as the
source declares it, the tail the model predicts for the H100's batch-64 measurement, and the choices
per regime."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagoda_attention_flash.plan import (
    choose_decode_splits,
    decode_seconds,
    decode_shared_memory,
    group_units,
    programs_per_sm,
)

CSRC = Path(__file__).resolve().parents[3] / "csrc" / "attention" / "flash_decode.cu"
H100_SMEM, H100_SMS = 228 * 1024, 132


@pytest.mark.skipif(not CSRC.is_file(), reason="needs the repository's csrc/")
def test_shared_memory_mirrors_the_kernel() -> None:
    source = CSRC.read_text()
    assert "kStages = D <= 64 ? 3 : 2;" in source
    assert "kDecodeRows * D * 2 + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes)" in source
    assert [decode_shared_memory(d) // 1024 for d in (64, 128, 256)] == [50, 68, 136]
    assert re.search(r"D 64: 50 KiB, 128: 68 KiB", source)


def test_programs_per_sm_on_an_h100() -> None:
    assert [programs_per_sm(d, H100_SMEM) for d in (64, 128, 256)] == [4, 3, 1]
    assert programs_per_sm(256, 99 * 1024) == 1  # never zero


def test_a_lone_program_in_the_tail_costs_two() -> None:
    assert group_units(4, 3) == 5  # three together, then one alone at half rate
    assert group_units(6, 3) == 6 and group_units(2, 3) == 2 and group_units(1, 3) == 2


def test_model_matches_the_h100_batch_64_measurement() -> None:
    """Batch 64 x 8 kv heads, 1k context, head 128: measured 117 us (2026-11-23, no split)."""
    seconds = decode_seconds(1, 64 * 8, 1024, 2 * 128 * 2, H100_SMS, 3)
    assert 100e-6 < seconds < 130e-6


@pytest.mark.parametrize(("batch", "context", "expected"), [
    (64, 1024, 2),   # the tail of a fourth program per SM is split away
    (64, 4096, 2),
    (256, 4096, 2),
    (32, 4096, 1),   # 256 programs: two per SM, no tail
    (16, 4096, 2),   # 128 programs leave SMs idle
    (1, 32768, 32),
])
def test_choices_per_regime(batch: int, context: int, expected: int) -> None:
    assert choose_decode_splits(batch, 8, context, 128, 2, H100_SMS, 3) == expected


def test_short_contexts_and_empty_steps_do_not_split() -> None:
    assert choose_decode_splits(64, 8, 400, 128, 2, H100_SMS, 3) == 1
    assert choose_decode_splits(0, 8, 4096, 128, 2, H100_SMS, 3) == 1
