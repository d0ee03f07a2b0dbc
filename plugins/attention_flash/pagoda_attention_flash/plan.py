"""How many KV splits a flash decode step takes: the one of least modelled time.

A decode program (128 threads) owns one sequence, one kv head (up to 16 of its q heads) and one
split of the context; ``programs_per_sm`` of them fit on a multiprocessor at once (shared memory
of ``DecodeTile<D>`` in csrc/attention/flash_decode.cu, and registers). The GPU hands programs to
multiprocessors as slots free up, so the busiest one runs ``ceil(programs / SMs)`` of them in
groups of ``programs_per_sm``. On the H100 (2026-11-23) two or more resident programs stream at
the multiprocessor's share of the copy bandwidth, a lone one at about half of it: batch 64 x 8 kv
heads put a fourth program alone on most multiprocessors after three full ones, 5 program-times
for 3.9 programs' bytes, the 77% measured. A split shortens every program, fills that tail, and
costs one reduction launch.
"""

from __future__ import annotations

from math import ceil

DECODE_WARPS, DECODE_KEYS, DECODE_ROWS = 4, 16, 16  # csrc/attention/flash_decode.cu
RESERVED_PER_PROGRAM = 1024  # shared memory the runtime keeps per block (sm_80+)
REGISTER_LIMITED = {64: 4, 128: 3, 256: 1}  # ptxas: ~108 / ~166 / ~215 registers x 128 threads of 64K
SM_BANDWIDTH = 23e9  # bytes/s per multiprocessor: the H100's ~3.0 TB/s copy bandwidth over 132
REDUCE_SECONDS = 4e-6  # the split reduction kernel's launch and its partials' round trip
MIN_KEYS_PER_SPLIT = 256
MAX_SPLITS = 64
SPLIT_SLACK = 0.03  # the fewest splits within this fraction of the least modelled time


def decode_shared_memory(head_size: int) -> int:
    """Bytes of shared memory per decode program (``DecodeTile<D>::kSmemBytes``)."""
    stages = 3 if head_size <= 64 else 2
    ring = DECODE_WARPS * stages * 2 * DECODE_KEYS * head_size * 2  # K and V tiles, 16-bit
    merge = DECODE_WARPS * DECODE_ROWS * (head_size + 2) * 4
    return DECODE_ROWS * head_size * 2 + max(ring, merge)


def programs_per_sm(head_size: int, shared_memory_per_sm: int) -> int:
    """Decode programs resident per multiprocessor (at least 1)."""
    by_memory = shared_memory_per_sm // (decode_shared_memory(head_size) + RESERVED_PER_PROGRAM)
    return max(1, min(by_memory, REGISTER_LIMITED.get(head_size, 1)))


def group_units(programs: int, per_sm: int) -> int:
    """Program-times the busiest multiprocessor needs for ``programs``, run ``per_sm`` at a time: a
    group of two or more streams at full rate, a lone program at half."""
    full, rest = divmod(programs, per_sm)
    groups = [per_sm] * full + ([rest] if rest else [])
    return sum(max(g, 2) for g in groups)


def decode_seconds(splits: int, programs: int, context: int, key_bytes: int, num_sms: int, per_sm: int) -> float:
    """Modelled time of one decode attention call with ``splits`` splits per (sequence, kv head)."""
    busiest = ceil(programs * splits / num_sms)
    program_bytes = ceil(context / splits) * key_bytes
    seconds = group_units(busiest, per_sm) * program_bytes / SM_BANDWIDTH
    return seconds + (REDUCE_SECONDS if splits > 1 else 0.0)


def choose_decode_splits(num_decodes: int, programs_per_seq: int, context: int, head_size: int, itemsize: int,
                         num_sms: int, per_sm: int) -> int:
    """The fewest splits whose modelled time is within ``SPLIT_SLACK`` of the least (the model is
    coarse: more splits for a sliver of its time would only add partials and reduction work)."""
    programs = num_decodes * programs_per_seq
    if programs == 0 or context < 2 * MIN_KEYS_PER_SPLIT:
        return 1
    key_bytes = 2 * head_size * itemsize  # K and V of one key, one kv head
    candidates = range(1, min(MAX_SPLITS, context // MIN_KEYS_PER_SPLIT) + 1)
    seconds = {s: decode_seconds(s, programs, context, key_bytes, num_sms, per_sm) for s in candidates}
    least = min(seconds.values())
    return next(s for s in candidates if seconds[s] <= least * (1 + SPLIT_SLACK))
