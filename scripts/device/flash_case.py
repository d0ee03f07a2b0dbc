"""A small flash-attention case for compute-sanitizer (memcheck, racecheck): per head size, one mixed
batch with decodes (split-KV and not), a chunked prefill after a cached prefix and a GQA group, and
one verify-sized batch (queries of up to 8 tokens, on the decode kernel), in bf16 and fp16. Exits non-zero if an output is not finite or far from the float64 reference.

    compute-sanitizer --tool memcheck --kernel-name kns=flash python3 scripts/device/flash_case.py
"""

from __future__ import annotations

import sys

import torch

from pagoda.attention.testing import make_batch, reference, rel_error
from pagoda.interfaces.attention import AttentionSpec
from pagoda_attention_flash.backend import FlashAttentionBackend
from pagoda_platform_cuda.platform import CudaPlatform

CASES = [  # (heads, kv heads, head size, dtype, window, splits)
    (8, 2, 128, torch.bfloat16, None, 4),
    (4, 4, 64, torch.float16, None, 1),
    (8, 1, 256, torch.bfloat16, 48, 2),
]
SEQS = [(1, 150), (1, 9), (70, 130), (5, 5)]
SHORT = [(1, 150), (4, 40), (3, 3), (8, 200)]  # short queries only: the decode kernel takes them all


def main() -> int:
    platform = CudaPlatform()
    worst = 0.0
    for (heads, kv_heads, head, dtype, window, splits), seqs in ((c, s) for c in CASES for s in (SEQS, SHORT)):
        spec = AttentionSpec(heads, kv_heads, head, head**-0.5, 16, dtype, window)
        batch = make_batch(spec, seqs, "cuda", seed=head)
        backend = FlashAttentionBackend(spec, platform)
        backend.force_num_splits = splits
        meta = backend.prepare(batch.metadata)
        out = backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, meta)
        torch.cuda.synchronize()
        err = rel_error(out, reference(spec, batch, "cuda"))
        worst = max(worst, err)
        print(f"heads {heads}/{kv_heads} d{head} {str(dtype)[6:]} window {window} splits {splits} "
              f"short queries {meta.extra.short_query_len}: rel error {err:.2e}")
    return 0 if worst < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
