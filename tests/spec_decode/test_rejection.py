"""Rejection sampling keeps the target distribution exactly (chi-square over many rounds, with
wrong accept rules shown to fail the same test) and greedy rows reproduce greedy decoding."""

from __future__ import annotations

import pytest
import torch

from pagoda.spec_decode import rejection
from pagoda.spec_decode.rejection import rejection_sample

V, K = 6, 3
CHI2_CRITICAL = 25.7  # chi-square, 5 degrees of freedom, p = 1e-4
TARGET = torch.tensor([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])
DRAFT = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25])  # far from the target: many rejections


def _stream(rows: int, draft_probs: bool, seed: int) -> torch.Tensor:
    """Tokens emitted by ``rows`` rounds with a context-free target (every position is TARGET):
    if verification is exact, the concatenated stream is i.i.d. TARGET."""
    g = torch.Generator().manual_seed(seed)
    q = DRAFT if draft_probs else None
    drafts = torch.multinomial(DRAFT if draft_probs else TARGET.roll(1), rows * K, replacement=True, generator=g)
    out = rejection_sample(
        TARGET.expand(rows, K + 1, V), drafts.view(rows, K), torch.full((rows,), K),
        None if q is None else q.expand(rows, K, V), torch.zeros(rows, dtype=torch.bool),
        torch.rand(rows, K, generator=g), torch.empty(rows, V).exponential_(generator=g))
    return torch.tensor([t for row in out for t in row])


def _chi2(tokens: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=V).double()
    expected = TARGET.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("draft_probs", [True, False], ids=["sampled drafts", "deterministic drafts"])
def test_emitted_tokens_follow_the_target_distribution(draft_probs: bool) -> None:
    tokens = _stream(8000, draft_probs, seed=1)
    assert len(tokens) > 8000  # some rounds emit several tokens
    assert _chi2(tokens) < CHI2_CRITICAL


_real_final = rejection._final_tokens


@pytest.mark.parametrize("broken", ["always accept", "resample from p"])
def test_a_wrong_rule_fails_the_same_check(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    """The check has power: accepting every draft, or drawing from p instead of max(0, p - q) after
    a rejection, moves the histogram past the threshold with the same seed and size.
    (Treating sampled drafts as certain, i.e. ignoring q, is not a wrong rule: it is exact too.)"""
    g = torch.Generator().manual_seed(1)
    rows = 8000
    drafts = torch.multinomial(DRAFT, rows * K, replacement=True, generator=g).view(rows, K)
    uniform = torch.rand(rows, K, generator=g)
    if broken == "always accept":
        uniform.zero_()  # 0 * q < p for every draft
    else:
        monkeypatch.setattr(rejection, "_final_tokens",
                            lambda tp, ids, dp, na, nd, *rest: _real_final(tp, ids, dp, na, na, *rest))
    out = rejection.rejection_sample(TARGET.expand(rows, K + 1, V), drafts, torch.full((rows,), K),
                                     DRAFT.expand(rows, K, V), torch.zeros(rows, dtype=torch.bool), uniform,
                                     torch.empty(rows, V).exponential_(generator=g))
    assert _chi2(torch.tensor([t for row in out for t in row])) > CHI2_CRITICAL


def test_greedy_rows_keep_the_argmax_prefix_then_the_argmax() -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, K + 1, V, generator=g), -1)
    best = probs.argmax(-1)  # [3, K + 1]
    drafts = best[:, :K].clone()
    drafts[1, 1] = (best[1, 1] + 1) % V  # row 1: the second draft is wrong
    out = rejection_sample(probs, drafts, torch.tensor([K, K, 0]), None, torch.ones(3, dtype=torch.bool),
                           torch.zeros(3, K), torch.ones(3, V))
    assert out[0] == best[0].tolist()  # all accepted + the bonus argmax
    assert out[1] == [int(best[1, 0]), int(best[1, 1])]  # one accepted, then the target's choice
    assert out[2] == [int(best[2, 0])]  # no drafts: one plain greedy token


def test_rows_without_drafts_and_no_draft_columns() -> None:
    probs = torch.tensor([[[0.0, 1.0, 0.0]]])  # certain: token 1
    out = rejection_sample(probs, torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, dtype=torch.long), None,
                           torch.zeros(1, dtype=torch.bool), torch.zeros(1, 0), torch.ones(1, 3))
    assert out == [[1]]
