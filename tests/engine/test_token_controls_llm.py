"""logit_bias, allowed_token_ids, bad_words and best_of through LLM.generate on a tiny random Llama:
greedy tokens equal an HF transformers greedy loop that applies the same rule to its logits."""

from __future__ import annotations

import pytest
import torch

from tiny_models import make_tiny_model
from pagoda import LLM, SamplingParams
from pagoda.errors import RequestError

PROMPT = [5, 17, 33, 2, 90, 41]
STEPS = 12


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-controls")
    hf = make_tiny_model(path, "llama")
    return LLM(model=str(path), block_size=8, kv_cache_memory=8 << 20), hf


@torch.no_grad()
def hf_greedy(hf, rule) -> list[int]:
    """HF's greedy tokens when ``rule(logits [V], output so far)`` edits each step's logits first."""
    out: list[int] = []
    for _ in range(STEPS):
        logits = hf(torch.tensor([PROMPT + out])).logits[0, -1].float()
        out.append(int(rule(logits.clone(), out).argmax()))
    return out


def biased(logits, out):
    logits[[7, 8]] += torch.tensor([6.0, -100.0])
    return logits


def allowed(logits, out):
    keep = torch.full_like(logits, float("-inf"))
    keep[[3, 9, 27, 81, 200]] = 0
    return logits + keep


def banning(plain: list[int]):
    """Ban the plain greedy output's 2nd-3rd tokens as a pair, and its 5th token outright."""
    pair, single = plain[1:3], plain[4]

    def rule(logits, out):
        if out[-1:] == pair[:1]:
            logits[pair[1]] = float("-inf")
        logits[single] = float("-inf")
        return logits
    return rule, [pair, [single]]


def test_each_control_equals_hf_with_the_same_rule_in_one_batch(tiny) -> None:
    llm, hf = tiny
    plain = hf_greedy(hf, lambda logits, out: logits)
    rule, bad = banning(plain)
    base = dict(temperature=0.0, max_tokens=STEPS, ignore_eos=True)
    params = [SamplingParams(**base), SamplingParams(**base, logit_bias={7: 6.0, 8: -100.0}),
              SamplingParams(**base, allowed_token_ids=[3, 9, 27, 81, 200]),
              SamplingParams(**base, bad_words_token_ids=bad)]
    got = [r.outputs[0].token_ids for r in llm.generate([PROMPT] * 4, params, use_tqdm=False)]
    assert got == [plain, hf_greedy(hf, biased), hf_greedy(hf, allowed), hf_greedy(hf, rule)]
    assert len({tuple(g) for g in got}) == 4  # every control changed the output
    assert 7 in got[1] and 8 not in got[1] and set(got[2]) <= {3, 9, 27, 81, 200}
    assert pair_absent(got[3], bad[0]) and bad[1][0] not in got[3]


def pair_absent(tokens: list[int], pair: list[int]) -> bool:
    return all(tokens[i : i + 2] != pair for i in range(len(tokens) - 1))


def test_bad_words_as_text_ban_their_tokens(tiny) -> None:
    llm, hf = tiny
    plain = hf_greedy(hf, lambda logits, out: logits)
    words = f"t{plain[1]} t{plain[2]}"  # the word-level tokenizer: "t17" is token 17
    out = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True,
                                                bad_words=[words]), use_tqdm=False)[0].outputs[0]
    assert out.token_ids[:2] == plain[:2] and out.token_ids[2] != plain[2] and pair_absent(out.token_ids, plain[1:3])


def test_logprobs_stay_those_of_the_raw_model(tiny) -> None:
    llm, _ = tiny
    plain = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=1, logprobs=2), use_tqdm=False)[0]
    first = plain.outputs[0].token_ids[0]
    out = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=1, logprobs=2, logit_bias={first: -100}),
                       use_tqdm=False)[0].outputs[0]
    ranked = sorted(out.logprobs[0].items(), key=lambda kv: kv[1].rank or 99)
    assert ranked[0][0] == first and out.token_ids[0] == ranked[1][0]  # the runner-up of the raw distribution


def test_best_of_returns_the_n_most_likely_of_its_sequences(tiny) -> None:
    llm, _ = tiny
    common = dict(temperature=1.0, seed=11, max_tokens=8, ignore_eos=True)
    every = llm.generate([PROMPT], SamplingParams(n=5, logprobs=0, **common), use_tqdm=False)[0].outputs
    best = llm.generate([PROMPT], SamplingParams(n=2, best_of=5, **common), use_tqdm=False)[0].outputs
    ranked = sorted(every, key=lambda o: -o.cumulative_logprob)
    assert [o.token_ids for o in best] == [o.token_ids for o in ranked[:2]]
    assert [o.index for o in best] == [0, 1] and best[0].cumulative_logprob is None  # logprobs were not asked for


def test_token_ids_outside_the_vocabulary_are_refused(tiny) -> None:
    llm, _ = tiny
    with pytest.raises(RequestError, match=r"logit_bias has token ids outside the vocabulary \[0, 384\): \[384\]"):
        llm.generate([PROMPT], SamplingParams(logit_bias={384: 1.0}), use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()
