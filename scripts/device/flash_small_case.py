"""One small mixed batch through the flash kernels, for compute-sanitizer (memcheck, racecheck).

Decodes with split-KV (and without), a prompt, cached-prefix chunks, GQA 4, head sizes 64 and
128, bf16; prints the max abs error against a float64 reference, exits 1 if it is too large.

    compute-sanitizer --tool memcheck python3 scripts/device/flash_small_case.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "attention_triton" / "tests"))  # paged_batches
from paged_batches import make_batch, reference, rel_error  # noqa: E402
from pagoda.interfaces.attention import AttentionSpec  # noqa: E402
from pagoda_attention_flash.backend import FlashAttentionBackend  # noqa: E402
from pagoda_platform_cuda.platform import CudaPlatform  # noqa: E402

SEQS = [(1, 300), (1, 5), (1, 1), (70, 70), (33, 200), (1 + 15, 40)]


def main() -> int:
    worst = 0.0
    for head, splits in ((64, 4), (128, 1), (128, 3)):
        spec = AttentionSpec(8, 2, head, head**-0.5, 16, torch.bfloat16)
        batch = make_batch(spec, SEQS, "cuda", seed=head + splits)
        backend = FlashAttentionBackend(spec, CudaPlatform())
        backend.force_num_splits = splits
        out = torch.full(batch.query.shape, float("nan"), dtype=spec.dtype, device="cuda")
        backend.forward_into(out, batch.query, batch.key, batch.value, batch.kv_cache, backend.prepare(batch.metadata))
        torch.cuda.synchronize()
        rel = rel_error(out, reference(spec, batch))  # on the CPU: no cuBLAS for the sanitizer to instrument
        worst = max(worst, rel)
        print(f"small case d{head} splits {splits}: rel error {rel:.2e}", flush=True)
    return 0 if worst < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
