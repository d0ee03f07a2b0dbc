"""The sampler over a 128256-entry vocabulary (float32 logits), batch 1..256:

- argmax: ``pagoda.layers.argmax`` (rows split into slices, one launch) against ``torch.argmax``,
  CUDA-graph replays; the outputs must be equal;
- greedy and sampled steps through ``Sampler.sample`` as the runner calls it (sampled: temperature
  0.7, top-p 0.9, and top-k 50 with it), launch by launch (a step builds its parameter tensors on the
  host).

The floor: the logits' bytes at the copy rate. ``--small`` (vocab 4096) runs on a CPU.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import device, on_gpu, time_us

TIMING = "argmax: CUDA-graph replays; sampler steps: launches; median"
SAMPLED = {"greedy": {"temperature": 0.0}, "top_p": {"temperature": 0.7, "top_p": 0.9},
           "top_k_top_p": {"temperature": 0.7, "top_p": 0.9, "top_k": 50}}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vocab", type=int, help="vocabulary size (default 128256; --small: 4096)")


def unavailable(args: argparse.Namespace) -> str | None:
    return None


def argmax_rows(report: Report, vocab: int, batches: tuple[int, ...]) -> None:
    from pagoda.layers.argmax import argmax

    for n in batches:
        x = torch.randn(n, vocab, device=device())
        if not torch.equal(argmax(x), torch.argmax(x, dim=-1)):
            raise AssertionError(f"pagoda argmax differs from torch.argmax at {n} x {vocab}")
        us = {"torch": time_us(lambda: torch.argmax(x, dim=-1), graphed=True), "pagoda": time_us(lambda: argmax(x), graphed=True)}
        report.add(make_row({"op": "argmax", "rows": n, "vocab": vocab}, us, peer="torch",
                            floor_us=report.rates.floor_us(nbytes=x.numel() * 4)))


def sampler_rows(report: Report, vocab: int, batches: tuple[int, ...]) -> None:
    from pagoda.sampling.sampler import Sampler, SamplingRow
    from pagoda.sampling_params import SamplingParams

    sampler = Sampler(seed=0)
    for n in batches:
        logits = torch.randn(n, vocab, device=device()) * 4
        us = {}
        for name, params in SAMPLED.items():
            rows = [SamplingRow(SamplingParams(max_tokens=16, **params), [1, 2, 3], []) for _ in range(n)]
            us[name] = time_us(lambda rows=rows: sampler.sample(logits, rows).token_ids)
        report.add(make_row({"op": "sampler", "rows": n, "vocab": vocab}, us, peer="greedy",
                            floor_us=report.rates.floor_us(nbytes=logits.numel() * 4)))


def run(args: argparse.Namespace, report: Report) -> None:
    vocab = args.vocab or (4096 if args.small else 128256)
    batches = (1, 4) if args.small else (1, 2, 4, 8, 16, 32, 64, 256)
    torch.manual_seed(0)
    argmax_rows(report, vocab, batches)
    sampler_rows(report, vocab, batches if not args.small else (1, 4))
    if on_gpu():
        torch.cuda.synchronize()
