"""Beam search: token-for-token parity with HF transformers' ``generate(num_beams=4, do_sample=False)``
on a tiny random Llama (its scores too), beams forking by sharing KV blocks, and the same beams
under preemption, without prefix caching, with chunked prefills, and over two tensor-parallel ranks or two
pipeline stages (gloo)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from hf_tiny import save_tiny  # noqa: E402
from tiny_models import save_word_tokenizer  # noqa: E402

from pagoda import LLM, BeamSearchParams  # noqa: E402
from pagoda.kv_cache.manager import KVCacheManager  # noqa: E402
from pagoda.errors import RequestError  # noqa: E402

EOS = 30  # a token these beams reach after 7 to 19 steps, so sequences end both ways
MAX_TOKENS = 24
PROMPTS = [[5, 17, 33], [7, 1, 99, 250, 3, 8, 60, 61, 62],
           [300, 2, 4, 8, 16, 32, 64, 128, 256, 1, 3, 5, 7, 9, 11, 13, 15]]  # partial last blocks of size 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-beams")
    hf = save_tiny("llama", path, vocab_size=384, max_position_embeddings=256)
    save_word_tokenizer(path, eos=EOS)
    return str(path), hf


@pytest.fixture(scope="module")
def llm(tiny):
    return LLM(model=tiny[0], block_size=4, kv_cache_memory=8 << 20)


@torch.no_grad()
def hf_beams(hf, prompt: list[int], **kw) -> tuple[list[list[int]], list[float]]:
    """HF's 4 beams (generated tokens, cut after EOS) and their scores, best first."""
    out = hf.generate(torch.tensor([prompt]), num_beams=4, num_return_sequences=4, do_sample=False,
                      max_new_tokens=MAX_TOKENS, eos_token_id=EOS, pad_token_id=EOS, output_scores=True,
                      return_dict_in_generate=True, **kw)
    beams = []
    for row in out.sequences.tolist():
        generated = row[len(prompt):]
        beams.append(generated[: generated.index(EOS) + 1] if EOS in generated else generated)
    return beams, out.sequences_scores.tolist()


@pytest.mark.parametrize("early_stopping, length_penalty", [(False, 1.0), (True, 1.0), ("never", 2.0),
                                                             (False, 0.0), ("never", -0.5)])
def test_beams_equal_hf_token_for_token(tiny, llm, early_stopping, length_penalty) -> None:
    params = BeamSearchParams(beam_width=4, max_tokens=MAX_TOKENS, early_stopping=early_stopping,
                              length_penalty=length_penalty)
    finish_reasons = set()
    for prompt, result in zip(PROMPTS, llm.beam_search(PROMPTS, params)):
        beams, scores = hf_beams(tiny[1], prompt, early_stopping=early_stopping, length_penalty=length_penalty)
        assert [o.token_ids for o in result.outputs] == beams
        ours = [o.cumulative_logprob / len(o.token_ids) ** length_penalty for o in result.outputs]
        assert ours == pytest.approx(scores, abs=1e-4)
        for out in result.outputs:
            assert out.finish_reason == ("stop" if out.token_ids[-1] == EOS else "length")
            assert out.text.strip() == " ".join(f"t{t}" for t in out.token_ids if t != EOS)
            finish_reasons.add(out.finish_reason)
    if length_penalty != 2.0:  # a strong length reward keeps every beam running to max_tokens
        assert finish_reasons == {"stop", "length"}


def test_forked_beams_share_full_blocks_and_free_them_all(tiny, monkeypatch) -> None:
    shared: list[int] = []
    fork = KVCacheManager.fork

    def spy(self, parent, child):
        tokens = fork(self, parent, child)
        ref_counts = [b.ref_count for b in self.blocks_of(child.request_id)]
        assert all(n >= 2 for n in ref_counts)  # held by the parent and the child: nothing copied
        shared.append(tokens)
        return tokens

    monkeypatch.setattr(KVCacheManager, "fork", spy)
    llm = LLM(model=tiny[0], block_size=4, kv_cache_memory=8 << 20, enable_prefix_caching=False)
    llm.beam_search(PROMPTS, BeamSearchParams(beam_width=4, max_tokens=MAX_TOKENS))
    assert len(shared) > 20 and all(n % 4 == 0 for n in shared) and max(shared) >= 24  # whole blocks, long prefixes
    kv = llm.engine.core.kv_cache
    assert kv.num_free_blocks == kv.num_blocks and not llm.engine.core.beams.active


@pytest.mark.parametrize("settings", [
    # 14 blocks of 4 tokens for 12 beams: preempted beams wait for blocks that their waiting siblings give back
    dict(kv_cache_memory=14 * 2048, enable_prefix_caching=False, max_model_len=48),
    dict(max_num_batched_tokens=16, block_size=8, overlap_steps=False),  # chunked prompts, beams split over steps
])
def test_the_same_beams_under_preemption_and_chunked_prefill(tiny, llm, settings) -> None:
    expected = [[o.token_ids for o in r.outputs] for r in llm.beam_search(PROMPTS, BeamSearchParams(4, MAX_TOKENS))]
    other = LLM(model=tiny[0], **{"block_size": 4, "kv_cache_memory": 8 << 20, **settings})
    got = [[o.token_ids for o in r.outputs] for r in other.beam_search(PROMPTS, BeamSearchParams(4, MAX_TOKENS))]
    assert got == expected
    if "enable_prefix_caching" in settings:
        assert other.engine.core.stats.num_preemptions > 0


@pytest.mark.parametrize("parallel", [dict(tensor_parallel_size=2), dict(pipeline_parallel_size=2)])
def test_the_same_beams_over_two_ranks(tiny, llm, parallel) -> None:
    """Forked beams join their parent's micro-batch under pipeline parallelism; every rank mirrors the forks."""
    expected = [[o.token_ids for o in r.outputs] for r in llm.beam_search(PROMPTS, BeamSearchParams(4, MAX_TOKENS))]
    other = LLM(model=tiny[0], block_size=4, kv_cache_memory=8 << 20, dtype="float32", **parallel)
    try:
        got = [[o.token_ids for o in r.outputs] for r in other.beam_search(PROMPTS, BeamSearchParams(4, MAX_TOKENS))]
    finally:
        other.shutdown()
    assert got == expected


def test_beam_search_mixes_with_sampled_requests_and_ignore_eos(tiny, llm) -> None:
    from pagoda import SamplingParams

    engine = llm.engine
    engine.add_request("plain", PROMPTS[0], SamplingParams(temperature=0, max_tokens=5))
    engine.add_request("beams", PROMPTS[1], BeamSearchParams(3, 6, ignore_eos=True).output_params(),
                       beam=BeamSearchParams(3, 6, ignore_eos=True))
    done = {}
    while engine.has_unfinished_requests():
        done.update({o.request_id: o for o in engine.step() if o.finished})
    assert [len(o.token_ids) for o in done["beams"].outputs] == [6, 6, 6]
    hf = tiny[1].generate(torch.tensor([PROMPTS[1]]), num_beams=3, num_return_sequences=3, do_sample=False,
                          max_new_tokens=6, pad_token_id=0)
    assert [o.token_ids for o in done["beams"].outputs] == [row[len(PROMPTS[1]):] for row in hf.tolist()]
    assert len(done["plain"].outputs[0].token_ids) == 5


def test_params_and_engine_limits_are_checked(llm) -> None:
    with pytest.raises(RequestError, match="beam_width must be an int >= 1, got 0"):
        BeamSearchParams(beam_width=0)
    with pytest.raises(RequestError, match='early_stopping must be true, false or "never"'):
        BeamSearchParams(beam_width=2, early_stopping="sometimes")
    with pytest.raises(RequestError, match="needs 400 candidate tokens per step, more than the vocabulary's 384"):
        llm.beam_search([PROMPTS[0]], BeamSearchParams(beam_width=200))
