"""Draft rounds queued behind the verify step (pagoda.spec_decode.draft_prelaunch): the next round
staged for every outcome, each row's picked on the device from the verify's sampled tokens. The
drafts must be the ones the round after the read would propose, step for step: the target's
verification keeps the outputs right whatever the drafts, so the drafts themselves are compared."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from pagoda.spec_decode import draft_prelaunch
from pagoda.spec_decode.draft import DraftProposer
from test_decode_graphs import replay_plugins  # noqa: F401 - the fixture
from test_speculative_draft import _llm, _params, _prompts, _tokens


def _run(target: str, spec: dict, monkeypatch, prelaunch: bool, **extra) -> tuple[list, list, int, int]:
    """Outputs, every step's proposals ((tokens known, drafts) per input), the rows of rounds queued
    behind a verify step, and the drafts that went into verify steps unread (on the device). Without
    ``prelaunch`` no round is queued behind a verify step: every round is drafted after the read."""
    with monkeypatch.context() as patch:
        if not prelaunch:
            patch.setattr(DraftProposer, "prelaunch", lambda self, outcome, k: None)
        return _generate(_llm(target, spec, **extra), patch)


def _generate(llm, monkeypatch) -> tuple[list, list, int, int]:
    proposer, proposals, queued, on_device = llm.engine.core.speculator.proposer, [], [], []
    propose, queue = proposer.propose, draft_prelaunch.queue

    def logged(inputs, k):
        proposal = propose(inputs, k)
        step = [(len(i.token_ids), d) for i, d in zip(inputs, proposal.token_ids)]
        proposals.append(step)
        if proposal.on_device is not None:  # placeholders until the engine reads them after the verify launch
            read = proposal.on_device.read
            on_device.append(len(proposal.on_device.index))

            def read_logged():
                values = read()
                for i, drafts in values.items():
                    step[i] = (step[i][0], drafts)
                return values

            proposal.on_device = dataclasses.replace(proposal.on_device, read=read_logged)
        return proposal

    def counted(*args):
        queued.append(len(args[1]))
        return queue(*args)

    proposer.propose = logged
    monkeypatch.setattr(draft_prelaunch, "queue", counted)
    outputs = _tokens(llm.generate(_prompts(), _params(), use_tqdm=False))
    assert not proposer._shadows and proposer.kv_cache.num_free_blocks == proposer.kv_cache.num_blocks
    return outputs, proposals, sum(queued), sum(on_device)


@pytest.mark.parametrize("draft", ["qwen3", "llama"])  # another random model (few accepted); the target (all)
@pytest.mark.parametrize("graphs", [False, True])
def test_prelaunched_rounds_propose_what_rounds_after_the_read_do(tiny_models, monkeypatch, caplog, draft, graphs,
                                                                  request):
    extra = {}
    if graphs:  # on CPU, a platform whose "graphs" rerun the recorded step on its static buffers
        request.getfixturevalue("replay_plugins")
        extra = dict(platform="replay-cpu", attention_backend="torch-graphs")
    _compare(tiny_models, monkeypatch, caplog, draft, extra)


@pytest.mark.gpu
def test_prelaunched_rounds_on_cuda_graphs(tiny_models, monkeypatch, caplog):
    """The same on a GPU: the draft's step graphs and the target's verify graphs (Triton, float32).
    The target as its own draft: nearly all accepted, so both ways run first steps of two slots. A
    draft that is rarely accepted would compare one-slot first steps with two-slot ones, whose
    float32 rounding on a GPU may differ enough to flip a near tie (not a bug)."""
    _compare(tiny_models, monkeypatch, caplog, "llama", dict(attention_backend="triton", dtype="float32"))


def _compare(tiny_models, monkeypatch, caplog, draft: str, extra: dict, queued_at_least: int = 20) -> None:
    target = tiny_models["llama"][0]
    spec = {"method": "draft", "model": tiny_models[draft][0], "num_speculative_tokens": 3, "backoff": False}
    with caplog.at_level(logging.WARNING, logger="pagoda"):
        after_read, proposals_after, none_queued, none_unread = _run(target, spec, monkeypatch, False, **extra)
        behind, proposals_behind, queued, unread = _run(target, spec, monkeypatch, True, **extra)
    assert none_queued == none_unread == 0 and queued >= queued_at_least  # rows of rounds queued behind verify steps
    assert unread >= queued_at_least // 2  # of them, taken into verify steps before the host read them
    assert proposals_behind == proposals_after
    assert behind == after_read
    assert "assumed another outcome" not in caplog.text


@pytest.mark.parametrize("unfiltered", [False, True])
def test_prelaunched_rounds_under_varying_budgets(tiny_models, monkeypatch, caplog, unfiltered):
    """Budgets below k cut the queued round's drafts. A request without drafts next step gets no
    round queued; queued anyway (``unfiltered``), its round goes stale unused and the request takes
    the usual path later: still the drafts of rounds after the read, and no shadow dropped."""
    from pagoda.spec_decode.backoff import Backoff
    from pagoda.spec_decode.engine import Speculator

    monkeypatch.setattr(Backoff, "budget", lambda self, request_id, step: (step + len(request_id)) % (self.k + 1))
    if unfiltered:
        monkeypatch.setattr(Speculator, "prelaunch", lambda self, pending: self.proposer.prelaunch(pending.outcome(), self.k)
                            if pending.outcome() is not None else None)
    _compare(tiny_models, monkeypatch, caplog, "llama", {}, queued_at_least=5)


def test_outcome_rows_start_after_the_accepted_drafts():
    """Outcome a of a shadow holding 3 drafts after 10 tokens: the bonus at 10 + a, or D[2] then the
    bonus from position 12 where all 3 were accepted (the last draft has no KV yet)."""
    rows = draft_prelaunch.outcome_rows(10, [5, 6, 7], 3, 7, 2, [0, 1])
    assert [(r.start, r.fed, r.steps) for r in rows] == [(10, (0,), 2), (11, (0,), 2), (12, (0,), 2), (12, (7, 0), 2)]
    fewer = draft_prelaunch.outcome_rows(10, [5], 3, 7, 2, [0, 1])  # one of its three drafts verified
    assert [(r.start, r.fed) for r in fewer] == [(10, (0,)), (11, (0,))]
