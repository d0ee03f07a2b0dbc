"""THERE (one GPU, no install: PYTHONPATH=core): where the threshold top-p mask differs from the sort path's
on test_threshold_equals_sort_on_the_gpu's input; per differing row: kind, p, k, kept counts, the kept mass
of each and the values at the edge."""

from __future__ import annotations

import torch

from pagoda.engine import top_p
from pagoda.engine.sampler import _apply_top_k_top_p

g = torch.Generator(device="cuda").manual_seed(5)
x = torch.randn(256, 128256, device="cuda", generator=g)
x[:128] *= 6.0
x[128:] *= 0.02
p = torch.rand(256, device="cuda", generator=g) * 0.9 + 0.05
k = torch.where(torch.arange(256, device="cuda") % 4 == 0, 50, 128256)
by_sort, by_threshold = x.clone(), x.clone()
_apply_top_k_top_p(by_sort, k, p, 50)
top_p.apply_top_k_top_p(by_threshold, k, p, 50)
kept_sort, kept_thr = by_sort > float("-inf"), by_threshold > float("-inf")
rows = (kept_sort != kept_thr).any(dim=1).nonzero().flatten().tolist()
print(f"{len(rows)} of 256 rows differ")
probs = torch.softmax(x.double(), dim=-1)
for r in rows[:20]:
    a, b = kept_sort[r], kept_thr[r]
    edge_s, edge_t = x[r][a].min().item(), x[r][b].min().item()
    print(f"row {r:3d} {'peaked' if r < 128 else 'flat'} p={p[r].item():.6f} k={k[r].item()} kept sort {int(a.sum())} "
          f"thr {int(b.sum())} | mass sort {probs[r][a].sum().item():.9f} thr {probs[r][b].sum().item():.9f} | "
          f"edge sort {edge_s:.9g} thr {edge_t:.9g} | only sort {int((a & ~b).sum())} only thr {int((b & ~a).sum())}")
