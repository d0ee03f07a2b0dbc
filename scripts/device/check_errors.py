"""Whether the csrc bindings' argument checks raise a RuntimeError naming the problem or crash the
process: each bad call runs in a child process (python -X faulthandler), and one line per call says
which. Checks with a literal message and ones that format arguments (c10::str) are both probed.

    python3 scripts/device/check_errors.py
"""

from __future__ import annotations

import subprocess
import sys

SETUP = ("import torch\nfrom pagoda_platform_cuda.build import load_extension\nk = load_extension()\n"
         "x = torch.randn(1, 64, device='cuda', dtype=torch.bfloat16)\n"
         "w = torch.randn(32, 64, device='cuda', dtype=torch.bfloat16)\n")
CASES = [  # (bad call, what the message must name)
    ("k.dense_gemv(torch.randn(1, 72, device='cuda', dtype=torch.bfloat16)[:, 1:65], w)", "16-byte aligned"),
    ("k.dense_gemv(torch.randn(5, 64, device='cuda', dtype=torch.bfloat16), w)", "tokens, not 5"),
    ("k.dense_gemv(x.cpu(), w)", "must be a CUDA tensor"),
    ("k.dense_gemv(x, w, None, 3)", "split must be 1, 2 or 4"),
    ("k.silu_and_mul(torch.empty(1, 32, device='cuda', dtype=torch.int32), "
     "torch.empty(1, 64, device='cuda', dtype=torch.int32))", "is not float32"),
]


def probe(call: str, message: str) -> str:
    code = f"{SETUP}try:\n    {call}\nexcept RuntimeError as exc:\n    print('RuntimeError:', exc)\n"
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                          timeout=600)
    if done.returncode == 0 and message in done.stdout:
        return f"raised: {call} -> {done.stdout.splitlines()[0][:160]}"
    return f"FAILED (exit {done.returncode}): {call}\n  stdout: {done.stdout[-300:]}\n  stderr: {done.stderr[-1500:]}"


if __name__ == "__main__":
    results = [probe(call, message) for call, message in CASES]
    print("\n".join(results))
    sys.exit(any(r.startswith("FAILED") for r in results))
