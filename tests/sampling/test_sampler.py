"""Batched sampler against a float64 per-row reference, plus seeding, greedy and logprobs."""

from __future__ import annotations

import pytest
import torch

from pagoda.sampling.sampler import Sampler, SamplingRow, prompt_logprobs
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.sampling_params import SamplingParams as SP

from .reference import assert_same_processing, reference_logits

V = 64


def random_logits(n: int, vocab: int = V, seed: int = 0, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(n, vocab, generator=torch.Generator().manual_seed(seed)) * scale  # [n, vocab]


def row(params: SP, prompt=(1, 2, 3), output=(), seed_gen: int | None = None, eos: int | None = 0) -> SamplingRow:
    gen = None if seed_gen is None else torch.Generator().manual_seed(seed_gen)
    return SamplingRow(params, list(prompt), list(output), gen, eos)


def check_against_reference(rows: list[SamplingRow], seed: int = 0) -> torch.Tensor:
    logits = random_logits(len(rows), seed=seed)
    got = Sampler().process(logits, rows)
    for i, r in enumerate(rows):
        assert_same_processing(got[i], reference_logits(logits[i], r))
    return got


STEP_CASES = {
    "defaults": [row(SP()), row(SP(temperature=0))],
    "min_tokens": [
        row(SP(min_tokens=3, stop_token_ids=[5, 9]), output=[4]),
        row(SP(min_tokens=3, stop_token_ids=[5], ignore_eos=True), output=[4]),
        row(SP(min_tokens=1, stop_token_ids=[5]), output=[4]),  # reached: nothing masked
        row(SP(min_tokens=2), output=[], eos=None),
    ],
    "repetition": [row(SP(repetition_penalty=1.7), prompt=[1, 2, 3, 2], output=[7, 8, 8]),
                   row(SP(repetition_penalty=0.6), prompt=[10, 11], output=[11, 40])],
    "frequency_presence": [row(SP(frequency_penalty=0.8), output=[3, 3, 3, 9]),
                           row(SP(presence_penalty=-1.5, frequency_penalty=-0.3), output=[3, 3, 9]),
                           row(SP(presence_penalty=2.0), prompt=[20, 21], output=[21])],
    "temperature": [row(SP(temperature=0.3)), row(SP(temperature=1.8)), row(SP(temperature=0))],
    "top_k": [row(SP(top_k=1)), row(SP(top_k=5)), row(SP(top_k=-1)), row(SP(top_k=V + 10))],
    "top_p": [row(SP(top_p=0.05)), row(SP(top_p=0.5)), row(SP(top_p=0.93)), row(SP())],
    "min_p": [row(SP(min_p=0.1)), row(SP(min_p=0.5)), row(SP(min_p=1.0)), row(SP())],
}


@pytest.mark.parametrize("case", sorted(STEP_CASES))
def test_each_step_matches_reference(case):
    got = check_against_reference(STEP_CASES[case])
    if case == "defaults":  # nothing to apply: logits pass through unchanged
        assert torch.equal(got, random_logits(2))


def test_steps_change_what_they_should():
    logits = random_logits(1)
    masked = Sampler().process(logits, [row(SP(min_tokens=2, stop_token_ids=[5]), output=[1], eos=7)])
    assert masked[0, 5] == masked[0, 7] == float("-inf") and torch.isinf(masked).sum() == 2
    assert torch.isfinite(Sampler().process(logits, [row(SP(top_k=5))])).sum() == 5


def test_top_k_keeps_ties_with_kth_value():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.5, 2.0]])
    got = Sampler().process(logits, [row(SP(top_k=2))])
    assert torch.isfinite(got[0]).tolist() == [True, False, True, True, False, True]
    got = Sampler().process(logits, [row(SP(top_k=2, top_p=0.999))])  # sort path, same rule
    assert torch.isfinite(got[0]).tolist() == [True, False, True, True, False, True]


def test_combined_mixed_batch_matches_reference():
    rows = [
        row(SP(temperature=0.7, top_k=10, top_p=0.8, min_p=0.05, repetition_penalty=1.2,
               frequency_penalty=0.4, presence_penalty=0.3), output=[5, 5, 6]),
        row(SP()),
        row(SP(temperature=0, repetition_penalty=2.0, min_tokens=4, stop_token_ids=[3]), output=[8]),
        row(SP(temperature=1.3, top_p=0.6, min_tokens=1), output=[], eos=12),
        row(SP(top_k=3, min_p=0.2, presence_penalty=-1.0), prompt=[], output=[0, 1]),
        row(SP(temperature=0.5, top_k=20)),
    ]
    for seed in range(3):
        check_against_reference(rows, seed)


def test_greedy_is_argmax_of_penalised_logits():
    logits = random_logits(8, seed=1)
    assert Sampler()(logits, [row(SP(temperature=0))] * 8).token_ids == logits.argmax(1).tolist()
    top = int(logits[0].argmax())
    r = row(SP(temperature=0, frequency_penalty=2.0), output=[top] * 20)
    out = Sampler()(logits[:1], [r]).token_ids[0]
    assert out != top and out == int(reference_logits(logits[0], r).argmax())


def test_top_k_one_equals_greedy_in_a_mixed_batch():
    logits = random_logits(6, seed=2)
    rows = [row(SP(top_k=1, temperature=1.5)), row(SP(temperature=0))] * 3
    for seed in range(3):
        assert Sampler(seed)(logits, rows).token_ids == logits.argmax(1).tolist()


def test_empirical_frequencies_match_processed_probabilities():
    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 3.0])
    r = row(SP(temperature=0.8, top_k=6, top_p=0.95, min_p=0.02, presence_penalty=0.5), output=[7])
    want = torch.softmax(reference_logits(logits, r), 0)  # [8]
    assert (want == 0).sum() >= 2 and (want > 0.05).sum() >= 4
    n = 20000
    tokens = torch.tensor(Sampler(seed=123)(logits.expand(n, -1), [r] * n).token_ids)
    freq = torch.bincount(tokens, minlength=8).double() / n
    assert torch.all(freq[want == 0] == 0)
    torch.testing.assert_close(freq, want, rtol=0, atol=0.012)  # ~4 sigma at n=20000


def seeded_tokens(sampler: Sampler, batch_of_others: int, seed: int, steps: int = 6) -> list[int]:
    """Tokens of a seeded row over several steps, beside unrelated rows that change each step."""
    target = row(SP(temperature=1.0, seed=seed), seed_gen=seed)
    tokens = []
    for step in range(steps):
        others = [row(SP(temperature=0.9, top_p=0.9)) for _ in range(batch_of_others)]
        others += [row(SP(seed=99 + step), seed_gen=99 + step)] if batch_of_others else []
        rows = others[: batch_of_others // 2] + [target] + others[batch_of_others // 2 :]
        logits = torch.zeros(len(rows), 500)  # flat: the draw alone decides
        tokens.append(sampler(logits, rows).token_ids[rows.index(target)])
    return tokens


def test_seeded_row_reproduces_whatever_the_batch():
    alone = seeded_tokens(Sampler(0), 0, seed=42)
    assert seeded_tokens(Sampler(7), 5, seed=42) == alone
    assert seeded_tokens(Sampler(3), 2, seed=42) == alone
    assert len(set(alone)) > 3 and seeded_tokens(Sampler(0), 0, seed=43) != alone


def test_unseeded_rows_depend_on_sampler_seed_only():
    logits = torch.zeros(16, 1000)
    rows = [row(SP())] * 16
    first = Sampler(0)(logits, rows).token_ids
    assert Sampler(0)(logits, rows).token_ids == first
    assert Sampler(1)(logits, rows).token_ids != first


def test_logprobs_are_raw_log_softmax_and_top_sorted():
    logits = random_logits(4, seed=5)
    rows = [row(SP(logprobs=5, temperature=0.5, repetition_penalty=1.5), output=[1, 2]),
            row(SP(logprobs=0)), row(SP(temperature=0, top_k=3)), row(SP(logprobs=20, top_p=0.5))]
    out = Sampler(0)(logits, rows)
    raw = torch.log_softmax(logits.double(), 1)  # [4, V]
    for i, tok in enumerate(out.token_ids):
        assert abs(out.logprobs[i] - raw[i, tok].item()) < 1e-6
    assert out.top_logprobs[1] == [] and out.top_logprobs[2] is None
    for i, k in ((0, 5), (3, 20)):
        top = out.top_logprobs[i]
        want_vals, want_ids = raw[i].topk(k)
        assert [t for t, _ in top] == want_ids.tolist()
        assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
        torch.testing.assert_close(torch.tensor([v for _, v in top], dtype=torch.float64), want_vals,
                                   rtol=0, atol=1e-6)


def test_prompt_logprobs_helper():
    logits = random_logits(5, seed=6)
    targets = torch.tensor([3, 0, 63, 7, 7])
    raw = torch.log_softmax(logits.double(), 1)
    got = prompt_logprobs(logits, targets, 2)
    assert len(got) == 5
    for i, (lp, top) in enumerate(got):
        assert abs(lp - raw[i, targets[i]].item()) < 1e-6
        assert [t for t, _ in top] == raw[i].topk(2).indices.tolist()
    assert all(top == [] for _, top in prompt_logprobs(logits, targets.tolist(), 0))


def test_empty_batch_and_shape_mismatch():
    assert Sampler()(torch.zeros(0, V), []).token_ids == []
    with pytest.raises(ValueError, match="2 rows of logits for 1 sampling rows"):
        Sampler()(torch.zeros(2, V), [row(SP())])


def test_to_device_keeps_values_and_dtype():
    from pagoda.tensors import to_device

    for values, dtype in (([3, 1, 2], torch.long), ([True, False], torch.bool), ([0.5, 2.0], torch.float32)):
        got = to_device(values, torch.device("cpu"), dtype)
        assert got.dtype == dtype and got.tolist() == values


def _with_sync_warnings(call):
    """``call()`` under torch's sync debug mode "warn": its result and where each synchronising call was
    made (every one, where mode "error" stops at the first)."""
    import warnings

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return result, [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


@pytest.mark.gpu
@pytest.mark.parametrize("nucleus", [True, False])  # the sort path (top-p), and top-k alone (topk)
def test_a_sampled_step_queues_without_waiting_for_the_device(nucleus):
    """Every kernel of a sampled step is queued without a synchronisation (torch's sync debug mode
    raises on one): a step's sampling then overlaps its forward pass instead of waiting for it.
    Temperature, top-k/top-p, min-p, min_tokens, logit_bias, penalties, seeded and greedy rows together."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    last = SP(temperature=0.9, top_p=0.8) if nucleus else SP(temperature=0.9, top_k=7)
    params = [SP(temperature=0.8, top_k=5), SP(temperature=0), SP(temperature=0.7, min_p=0.1),
              SP(temperature=0.6, min_tokens=3, stop_token_ids=[5]), SP(temperature=1.0, logit_bias={3: 2.0}),
              SP(temperature=0.5, seed=4), SP(temperature=0.9, repetition_penalty=1.2, presence_penalty=0.3,
                                                frequency_penalty=0.1), last]
    rows = [SamplingRow(p, [1, 2, 3], [4], torch.Generator("cuda").manual_seed(4) if p.seed is not None else None,
                        0, f"r{i}") for i, p in enumerate(params)]
    logits, sampler = random_logits(len(rows)).cuda(), Sampler()
    sampler.sample(logits, rows)  # the first step of a request builds its logit_bias tensors (once)
    torch.cuda.synchronize()
    sample, syncs = _with_sync_warnings(lambda: sampler.sample(logits, rows))
    assert not syncs, "synchronising calls:\n" + "\n".join(syncs)
    assert sample.token_ids.shape == (len(rows),) and sample.token_ids[1].item() == logits[1].argmax().item()


@pytest.mark.parametrize("rows,alike", [
    ([row(SP(temperature=0)), row(SP(temperature=0, logprobs=3))], True),  # plain argmax: every rank's own
    ([], True),
    ([row(SP(temperature=0)), row(SP(temperature=0.7))], False),  # a draw
    ([row(SP(temperature=0, top_k=5))], True),  # greedy ignores top-k
    ([row(SP(temperature=0, repetition_penalty=1.3), output=[4])], False),
    ([row(SP(temperature=0, min_tokens=2, stop_token_ids=[5]), output=[4])], False),  # still short of min_tokens
    ([row(SP(temperature=0, min_tokens=1, stop_token_ids=[5]), output=[4])], True),  # reached: nothing masked
    ([row(SP(temperature=0, logit_bias={3: 5.0}))], False),
    ([row(SP(temperature=0, guided_decoding=GuidedDecodingParams(json_object=True)))], False),  # rank 0's grammar
])
def test_picks_alike_only_for_rows_whose_tokens_are_the_plain_argmax(rows, alike):
    """Under tensor parallelism the ranks skip rank 0's token broadcast exactly when this holds."""
    assert Sampler.picks_alike(rows) is alike
    if alike and rows:  # what every rank then picks on its own is the argmax of the logits
        logits = random_logits(len(rows), seed=4)
        assert Sampler().sample(logits, rows).token_ids.tolist() == logits.argmax(dim=1).tolist()
