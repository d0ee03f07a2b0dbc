"""Top-k / top-p masking without sorting the vocabulary (``PAGODA_SAMPLER_TOP_P=threshold``).

The sort path (``sampler._apply_top_k_top_p``) sorts every row of ``[N, V]`` logits and scatters it
back: at batch 256 x 128k that is most of a sampled decode step's extra cost (H100, 2026-11-27:
greedy 10.81 ms, temperature 0.7 with top-p 0.9 15.41 ms). Here each row gets one threshold and
``x < threshold`` is masked:

- top-k: the k-th largest value (``topk``), as the sort path;
- top-p: among the ``CANDIDATES`` largest values (sorted by ``topk``) and the row's log-sum-exp,
  the smallest value whose strictly larger values hold less than ``top_p`` of the mass. Where the
  nucleus reaches past the candidates (a flat row), a search over the whole row finds it
  (``top_p_search``: a Triton kernel on GPUs with triton installed, torch elsewhere), with no host
  synchronisation.

One difference from the sort path: every value equal to the threshold stays (the sort path keeps
the tied values that its sort happened to put first), as ties with the k-th value already do for
top-k.
"""

from __future__ import annotations

import torch

from pagoda.triton_support import interpreting, triton_installed

NEG_INF = float("-inf")
CANDIDATES = 1024  # the largest values a row's nucleus is looked for among before searching the row


def apply_top_k_top_p(x: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None, max_k: int) -> None:
    """Mask, in place, values outside each row's top-k and outside its top-p nucleus (``top_k``: [N]
    long, the vocab size where off; ``top_p``: [N] float, at least 1 where off; ``max_k``: the
    largest top-k that applies)."""
    vocab = x.shape[1]
    width = min(vocab, max(max_k, CANDIDATES if top_p is not None else 1))
    top = x.topk(width, dim=1).values  # [N, width], descending
    threshold = torch.full((x.shape[0], 1), NEG_INF, device=x.device)
    if top_k is not None:
        kth = top.gather(1, top_k.clamp(max=width)[:, None] - 1)
        threshold = torch.where((top_k < vocab)[:, None], kth, threshold)
        top = top.masked_fill(top < threshold, NEG_INF)
    if top_p is not None:
        floor = threshold if top_k is not None else None
        threshold = torch.maximum(threshold, _nucleus_threshold(x, top, floor, top_p))
    x.masked_fill_(x < threshold, NEG_INF)


def _nucleus_threshold(x: torch.Tensor, top: torch.Tensor, floor: torch.Tensor | None,
                       top_p: torch.Tensor) -> torch.Tensor:
    """[N, 1]: the smallest value of ``top`` whose strictly larger values hold less than ``top_p`` of
    the mass of the values at or above ``floor`` (the top-k's; None: every value), -inf where top-p is
    off; searched over the row where the candidates hold less than ``top_p``."""
    if floor is None:
        floor = torch.full_like(top[:, :1], NEG_INF)
        lse = torch.logsumexp(x, dim=1, keepdim=True)  # [N, 1]
    else:
        lse = torch.logsumexp(x.masked_fill(x < floor, NEG_INF), dim=1, keepdim=True)
    threshold, mass = _last_kept(top, lse, top_p)
    covered = mass >= top_p[:, None]
    off = (top_p >= 1.0)[:, None]
    search = ~(covered | off)  # [N, 1]: rows whose nucleus reaches past the candidates
    found = top_p_search(x, lse, floor, top_p, search)
    threshold = torch.where(search, found, threshold)
    return threshold.masked_fill(off, NEG_INF)


def _last_kept(values: torch.Tensor, lse: torch.Tensor, top_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, 1] the smallest of the descending ``values`` whose larger ones hold less than ``top_p`` of
    the mass exp(value - lse) (the first always stays), [N, 1] the mass of all of them)."""
    probs = (values - lse).exp()
    mass_before = probs.cumsum(dim=1) - probs
    kept = (mass_before < top_p[:, None]).sum(dim=1, keepdim=True)
    return values.gather(1, kept - 1), probs.sum(dim=1, keepdim=True)


def top_p_search(x: torch.Tensor, lse: torch.Tensor, floor: torch.Tensor, top_p: torch.Tensor,
                 search: torch.Tensor) -> torch.Tensor:
    """[N, 1]: for rows where ``search``, the largest value v of the row with mass(x >= v) >= top_p
    (mass: exp(x - lse) over values at or above ``floor``); any value elsewhere."""
    if (x.device.type == "cuda" or interpreting()) and triton_installed():  # "cuda": NVIDIA and AMD GPUs
        from pagoda.engine.top_p_triton import search_thresholds

        return search_thresholds(x, lse, floor, top_p, search)
    return _search_by_sort(x, lse, floor, top_p, search)


def _search_by_sort(x: torch.Tensor, lse: torch.Tensor, floor: torch.Tensor, top_p: torch.Tensor,
                    search: torch.Tensor) -> torch.Tensor:
    """The same by sorting the rows to search whole: on the CPU (its host read is free), or on a GPU
    without triton (there ``nonzero`` waits for the device)."""
    out = torch.full_like(lse, NEG_INF)
    rows = search[:, 0].nonzero()[:, 0]
    if rows.numel():
        values = x[rows].masked_fill(x[rows] < floor[rows], NEG_INF).sort(dim=1, descending=True).values
        out[rows] = _last_kept(values, lse[rows], top_p[rows])[0]
    return out
