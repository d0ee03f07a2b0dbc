"""The prefill kernel's division by the cache block size (``FastDiv`` in csrc/attention/flash_common.cuh):
a multiply-high, an add and a shift built on the host. The formulas are read from the source and
checked here against integer division for every block size up to 4096 (and a few large ones) on
dividends up to 2^31 - 1 (key positions are int32): a wrong magic number would put keys in the
wrong cache page, which the GPU tests only see for the block sizes they try."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

SOURCE = Path(__file__).resolve().parents[3] / "csrc" / "attention" / "flash_common.cuh"
pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason="needs the repository's csrc/")


def fast_div(d: int) -> tuple[int, int]:
    """(multiplier, shift) as FastDiv's constructor builds them."""
    shift = 0
    while (1 << shift) < d:
        shift += 1
    multiplier = ((((1 << shift) - d) << 32) // d + 1) & 0xFFFFFFFF
    return multiplier, shift


def divide(n: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """FastDiv::div in uint32 arithmetic: (umulhi(n, multiplier) + n) >> shift."""
    n = n.astype(np.uint64)
    high = (n * np.uint64(multiplier)) >> np.uint64(32)
    total = (high + n) & np.uint64(0xFFFFFFFF)
    return (total >> np.uint64(shift)).astype(np.int64)


def test_the_source_has_these_formulas() -> None:
    """The model above is the code: the constructor's loop and multiplier, div's expression."""
    text = SOURCE.read_text()
    assert "while ((1ull << shift) < d) ++shift;" in text
    assert "multiplier = static_cast<uint32_t>((((1ull << shift) - d) << 32) / d + 1);" in text
    assert re.search(r"return \(__umulhi\(n, multiplier\) \+ n\) >> shift;", text)


def test_fast_division_equals_integer_division() -> None:
    rng = np.random.default_rng(0)
    for d in [*range(1, 4097), 10000, 65535, 65536, 1 << 20, (1 << 31) - 1]:
        edges = np.array([0, 1, d - 1, d, d + 1, 2**31 - 1, 2**31 - d, 2**31 - 2], dtype=np.int64)
        multiples = np.arange(0, 2**31 - 1, max(d, 2**31 // 1024), dtype=np.int64)
        n = np.concatenate([edges, multiples, multiples + d - 1, rng.integers(0, 2**31, 500)])
        n = n[(n >= 0) & (n < 2**31)]
        multiplier, shift = fast_div(d)
        np.testing.assert_array_equal(divide(n, multiplier, shift), n // d, err_msg=f"block size {d}")
