"""The mixed-length workload's (input, output) token lengths: a small distribution file and draws from it.

`sharegpt_like_lengths.csv` is SYNTHETIC: shaped like ShareGPT's conversations, not taken from them (the
machines that made it have no internet, so the real dataset is not here). Its shape: input and output lengths
independent and each log-normal, with the means the vLLM paper (Kwon et al., SOSP 2023) reports for ShareGPT
(161 input and 338 output tokens) and spreads for a long tail (sigma 1.2 and 1.0 of the log: medians 78 and
205), cut to [4, 1024] tokens each as vLLM's ShareGPT loader keeps them (so prompt + output <= 2048; after
the cut the means are about 138 and 267 tokens, the p99s about 840 and 970: `--summary`). The file
holds the probability of each pair of length bins (bins doubling from 4 to 1024); a draw picks a pair of bins
by probability, then each length log-uniformly inside its bin.

    python benchmarks/peers/mixed_lengths.py            # rewrite the file (a test checks it is up to date)
    python benchmarks/peers/mixed_lengths.py --summary  # mean and percentiles of 10,000 draws
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DISTRIBUTION = HERE / "sharegpt_like_lengths.csv"
EDGES = (4, 8, 16, 32, 64, 128, 256, 512, 1025)  # bins [lo, hi); the last one ends at 1024 included
INPUT = (161.0, 1.2)  # (mean, sigma of the log) of the input lengths, before the cut
OUTPUT = (338.0, 1.0)
HEADER = "input_lo,input_hi,output_lo,output_hi,probability"


@dataclass(frozen=True)
class Bin:
    input_lo: int
    input_hi: int  # exclusive
    output_lo: int
    output_hi: int
    probability: float


def _lognormal_cdf(x: float, mean: float, sigma: float) -> float:
    mu = math.log(mean) - sigma * sigma / 2
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))


def _bin_probabilities(mean: float, sigma: float) -> list[float]:
    """Each bin's share of the log-normal, cut to [EDGES[0], EDGES[-1]) and renormalised."""
    cdf = [_lognormal_cdf(e, mean, sigma) for e in EDGES]
    mass = [hi - lo for lo, hi in zip(cdf, cdf[1:])]
    return [m / sum(mass) for m in mass]


def render() -> str:
    """The distribution file's text, from the shape above."""
    lines = ["# SYNTHETIC (input, output) token lengths shaped like ShareGPT; not the ShareGPT dataset.",
             "# Made by benchmarks/peers/mixed_lengths.py (the shape is in its docstring); do not edit by hand.",
             HEADER]
    bins = list(zip(EDGES, EDGES[1:]))
    p_in, p_out = _bin_probabilities(*INPUT), _bin_probabilities(*OUTPUT)
    for (ilo, ihi), pi in zip(bins, p_in):
        for (olo, ohi), po in zip(bins, p_out):
            lines.append(f"{ilo},{ihi},{olo},{ohi},{pi * po:.6f}")
    return "\n".join(lines) + "\n"


def load(path: Path = DISTRIBUTION) -> list[Bin]:
    rows = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    if not rows or rows[0] != HEADER:
        raise ValueError(f"{path}: expected the header {HEADER!r} after the comments")
    bins = [Bin(*(int(v) for v in row.split(",")[:4]), float(row.split(",")[4])) for row in rows[1:]]
    if not bins or any(b.probability < 0 or b.input_lo < 1 or b.output_lo < 1 for b in bins):
        raise ValueError(f"{path}: bins need lengths >= 1 and probabilities >= 0")
    return bins


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi - 1, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def draw(num: int, seed: int, bins: list[Bin] | None = None, max_len: int = 0) -> list[tuple[int, int]]:
    """``num`` (input_len, output_len) pairs; with max_len > 0 each length is cut to it (quick runs)."""
    bins = bins if bins is not None else load()
    rng = random.Random(seed)
    picked = rng.choices(bins, weights=[b.probability for b in bins], k=num)
    pairs = [(_log_uniform(rng, b.input_lo, b.input_hi), _log_uniform(rng, b.output_lo, b.output_hi)) for b in picked]
    return [(min(i, max_len), min(o, max_len)) for i, o in pairs] if max_len else pairs


def summary(pairs: list[tuple[int, int]]) -> dict:
    def stats(values: list[int]) -> dict:
        values = sorted(values)
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
        return {"mean": round(sum(values) / len(values), 1), "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99),
                "max": values[-1]}

    return {"input": stats([i for i, _ in pairs]), "output": stats([o for _, o in pairs])}


def main(argv: list[str]) -> int:
    if "--summary" in argv:
        print(summary(draw(10_000, 0)))
        return 0
    DISTRIBUTION.write_text(render())
    print(f"wrote {DISTRIBUTION} ({DISTRIBUTION.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
