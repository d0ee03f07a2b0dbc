"""The ``eagle`` proposer: EAGLE-1 heads in their published checkpoint format (config.json +
safetensors or pytorch_model.bin, written here by the tests), run over the target's hidden states.

- the head's forward (and the proposer's drafting chain, across rounds) equals a plain-torch
  float64 reference of the EAGLE head (tests/engine/eagle_heads.py);
- greedy outputs token-identical to no speculation, seeded sampled outputs unchanged, with prefix
  caching and chunked prefill too; no KV blocks, head caches or hidden states left behind;
- a head trained for a few seconds on the target's own hidden states is accepted (mean acceptance
  length > 1.5), a random one is not;
- clear errors: wrong hidden size, missing files, EAGLE-3 heads, non-Llama targets.
"""

from __future__ import annotations

import json
import types

import pytest
import torch

from eagle_heads import HEAD_CONFIG, random_head_weights, reference_head, save_head, train_head
from pagoda import LLM, SamplingParams
from pagoda.errors import ConfigError
from pagoda.hookspecs import hookimpl
from pagoda.interfaces.proposer import Proposal, ProposalInput, Proposer
from pagoda.plugins import manager as plugin_manager
from pagoda.speculative_config import SpeculativeConfig
from pagoda.spec_decode.eagle import EagleProposer
from pagoda.spec_decode.eagle_head import EagleHead, load_head_checkpoint
from pagoda.spec_decode.ngram import NgramIndex
from pagoda.spec_decode.step import SpecDecodeStep
from test_decode_graphs import REPLAYS, GraphSafeTorchBackend, ReplayPlatform
from tiny_models import VOCAB, hf_greedy, random_prompts

K = 4


def _llm(path: str, spec: dict | None, **extra) -> LLM:
    config = dict(model=path, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
                  kv_cache_memory=1 << 20, speculative_config=spec)
    return LLM(**{**config, **extra})


def _eagle(head: str, **options) -> dict:
    return {"method": "eagle", "model": head, "num_speculative_tokens": K, **options}


def _tokens(outputs) -> list[list[list[int]]]:
    return [[c.token_ids for c in o.outputs] for o in outputs]


def _mean_acceptance_length(llm: LLM) -> float:
    s = llm.engine.stats
    return 1 + s.spec_num_accepted_tokens / s.spec_num_drafts


@pytest.fixture(scope="module")
def random_head(tmp_path_factory) -> str:
    return save_head(tmp_path_factory.mktemp("eagle-random"), random_head_weights(seed=5))


@pytest.fixture(scope="module")
def trained(tiny_models, tmp_path_factory) -> tuple[str, list[list[int]]]:
    """(a head trained on the tiny Llama's greedy continuations of these prompts, the prompts)."""
    _, hf_model = tiny_models["llama"]
    prompts = random_prompts(16, range(12, 13), seed=11)
    sequences = [p + hf_greedy(hf_model, p, 48)[0] for p in prompts]
    weights = train_head(hf_model, sequences, steps=150)
    return save_head(tmp_path_factory.mktemp("eagle-trained"), weights), prompts


# -- the head against the reference ----------------------------------------------------------
def _float64_head(tmp_path, weights) -> EagleHead:
    return EagleHead(load_head_checkpoint(save_head(tmp_path, weights)), torch.float64, torch.device("cpu"), 64)


def test_head_forward_equals_the_reference(tmp_path) -> None:
    """Two requests packed in one forward (5 and 4 rows), then single rows on their caches: every
    output equals the reference over the whole sequence (float64)."""
    weights = {k: v.double() for k, v in random_head_weights(seed=1).items()}
    head = _float64_head(tmp_path, weights)
    g = torch.Generator().manual_seed(0)
    embeds, hidden = torch.randn(2, 7, 64, generator=g, dtype=torch.float64), torch.randn(2, 7, 64, generator=g,
                                                                                            dtype=torch.float64)
    expected = reference_head(weights, embeds, hidden)  # [2, 7, H]
    a, b = head.new_cache(), head.new_cache()
    first = head(torch.cat((embeds[0, :5], embeds[1, :4])), torch.cat((hidden[0, :5], hidden[1, :4])),
                 [0, 1, 2, 3, 4, 0, 1, 2, 3], [(a, 5), (b, 4)])
    torch.testing.assert_close(first[:5], expected[0, :5], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(first[5:], expected[1, :4], rtol=1e-10, atol=1e-10)
    for p in (5, 6):
        out = head(embeds[0, p : p + 1], hidden[0, p : p + 1], [p], [(a, 1)])
        torch.testing.assert_close(out[0], expected[0, p], rtol=1e-10, atol=1e-10)
    assert a.positions == list(range(7)) and b.positions == list(range(4))
    # the reference is sensitive to what it checks: the other concat order gives other outputs
    swapped = reference_head({**weights, "fc.weight": weights["fc.weight"].roll(64, dims=1)}, embeds, hidden)
    assert not torch.allclose(swapped, expected, atol=1e-3)


def test_drafting_chain_equals_the_reference_across_rounds(tmp_path) -> None:
    """The proposer's drafts: the head's output at the last verified position through the LM head,
    then its own predicted hidden states chained; next round the drafted positions are replaced by
    the target's hidden states of the accepted tokens (equal to the reference, float64)."""
    weights = {k: v.double() for k, v in random_head_weights(seed=2).items()}
    g = torch.Generator().manual_seed(3)
    embed_w = torch.randn(VOCAB, 64, generator=g, dtype=torch.float64)
    lm_w = torch.randn(VOCAB, 64, generator=g, dtype=torch.float64)
    target_hidden = torch.randn(32, 64, generator=g, dtype=torch.float64)  # "the target's" state per position
    proposer = EagleProposer(SpeculativeConfig(method="eagle", num_speculative_tokens=3, model="unused"))
    proposer.bind(_float64_head(tmp_path, weights), lambda ids: embed_w[ids], lambda h: h @ lm_w.T, torch.float64)

    def reference_drafts(tokens: list[int], k: int) -> list[int]:
        n = len(tokens) - 1  # positions 0..n-1 have the target's hidden states
        embeds, hidden, drafts = embed_w[torch.tensor(tokens[1:])], target_hidden[:n], []
        for _ in range(k):
            out = reference_head(weights, embeds[None], hidden[None])[0, -1]
            drafts.append(int((out @ lm_w.T).argmax()))
            embeds, hidden = torch.cat((embeds, embed_w[drafts[-1]][None])), torch.cat((hidden, out[None]))
        return drafts

    tokens = random_prompts(1, range(9, 10), seed=5)[0]
    drafts = proposer.propose([ProposalInput("r", tokens, target_hidden[:8])], 3).token_ids[0]
    assert drafts == reference_drafts(tokens, 3)
    tokens = tokens + [drafts[0], (drafts[1] + 1) % VOCAB]  # one accepted, then the target's own token
    drafts = proposer.propose([ProposalInput("r", tokens, target_hidden[8:10], max_drafts=2)], 3).token_ids[0]
    assert drafts == reference_drafts(tokens, 2)
    assert proposer._states["r"].cache.positions == list(range(10))  # drafted positions rolled back
    proposer.release("r")
    assert not proposer._states


def test_pytorch_model_bin_loads_like_safetensors(tmp_path) -> None:
    weights = random_head_weights(seed=4, bias=False)
    a = load_head_checkpoint(save_head(tmp_path / "st", weights))
    b = load_head_checkpoint(save_head(tmp_path / "bin", weights, bin_format=True))
    assert a.weights.keys() == b.weights.keys() == weights.keys()
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in weights)


# -- in the engine ---------------------------------------------------------------------------
class HiddenRecorder(Proposer):
    """Records the hidden states the engine hands over; drafts by prompt lookup (some accepted, some not)."""

    needs_hidden_states = True
    seen: list[tuple[str, list[int], torch.Tensor | None]] = []

    def __init__(self, config) -> None:
        super().__init__(config)
        self.indexes: dict[str, NgramIndex] = {}

    def propose(self, inputs: list[ProposalInput], k: int) -> Proposal:
        drafts = []
        for inp in inputs:
            self.seen.append((inp.request_id, list(inp.token_ids), None if inp.hidden is None else inp.hidden.clone()))
            drafts.append(self.indexes.setdefault(inp.request_id, NgramIndex(1, 3)).propose(inp.token_ids, k))
        return Proposal(drafts)


@pytest.fixture
def recorder():
    previous = plugin_manager._MANAGER
    module = types.SimpleNamespace(  # the recorder, and the CPU platform whose "graphs" replay (test_decode_graphs)
        register_proposers=hookimpl(lambda register: register("recorder", HiddenRecorder)),
        register_platforms=hookimpl(lambda register: register("replay-cpu", ReplayPlatform)),
        register_attention_backends=hookimpl(lambda register: register("torch-graphs", GraphSafeTorchBackend)),
    )
    plugin_manager._MANAGER = plugin_manager.PluginManager(modules={"eagle-tests": module}, entry_points=False)
    HiddenRecorder.seen = []
    yield HiddenRecorder.seen
    plugin_manager._MANAGER = previous


GRAPHS = {"platform": "replay-cpu", "attention_backend": "torch-graphs"}


@pytest.mark.parametrize("extra", [{}, {"max_num_batched_tokens": 16}, GRAPHS], ids=["whole-prompts", "chunked",
                                                                                     "graphs"])
def test_the_engine_hands_over_the_targets_hidden_states_at_their_positions(tiny_models, recorder, extra) -> None:
    """Each round's rows are the target's final hidden states (HF's, after the final norm) of the
    positions computed since the request last proposed, ending at its last computed position; over
    a request's rounds every position comes exactly once (rejected drafts' rows never). With graphs,
    decode and verify steps (k + 1 padded slots per request) are replays."""
    target, hf_model = tiny_models["llama"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (30, 3, 17, 30, 9, 25)]
    llm = _llm(target, {"method": "recorder", "num_speculative_tokens": K, "backoff": False}, **extra)
    REPLAYS[0] = 0
    llm.generate(_prompts(), params, use_tqdm=False)
    if extra is GRAPHS:
        assert llm.engine.core.runner.feature(SpecDecodeStep).step_graphs is not None and REPLAYS[0] > 10
    s = llm.engine.stats
    assert 0 < s.spec_num_accepted_tokens < s.spec_num_draft_tokens  # acceptances and rejections
    covered: dict[str, int] = {}
    for request_id, tokens, hidden in recorder:
        assert hidden is not None
        n, end = hidden.shape[0], len(tokens) - 1
        assert covered.get(request_id, 0) == end - n  # continues where the previous round ended
        covered[request_id] = end
        with torch.no_grad():
            expected = hf_model.model(input_ids=torch.tensor([tokens])).last_hidden_state[0, end - n : end]
        torch.testing.assert_close(hidden.float(), expected, rtol=1e-4, atol=1e-4)
    assert set(covered) == {"0", "2", "3", "4", "5"}  # (max_tokens 3 leaves request 1 no room for drafts)
    assert len(llm.engine.core.speculator.hidden) == 0


def _prompts() -> list[list[int]]:
    base = random_prompts(4, range(6, 14), seed=3)
    return [p * 3 for p in base] + random_prompts(2, range(5, 30), seed=4)


@pytest.mark.parametrize("extra", [{}, {"enable_prefix_caching": True, "max_num_batched_tokens": 16}],
                         ids=["plain", "prefix-cache+chunked"])
def test_eagle_greedy_tokens_equal_no_speculation(tiny_models, random_head, extra) -> None:
    target = tiny_models["llama"][0]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (30, 3, 17, 30, 9, 25)]
    prompts = _prompts() + _prompts()[:2]  # repeated prompts: prefix-cache hits (hidden states start later)
    params = params + params[:2]
    plain = _tokens(_llm(target, None, **extra).generate(prompts, params, use_tqdm=False))
    llm = _llm(target, _eagle(random_head, backoff=False), **extra)
    assert _tokens(llm.generate(prompts, params, use_tqdm=False)) == plain
    assert llm.engine.stats.spec_num_draft_tokens > 50
    core = llm.engine.core
    assert core.kv_cache.num_free_blocks == core.kv_cache.num_blocks  # rejected drafts' blocks released
    assert not core.speculator.proposer._states and len(core.speculator.hidden) == 0  # head caches, hidden states


def test_eagle_seeded_sampled_outputs_equal_no_speculation(tiny_models, trained) -> None:
    target = tiny_models["llama"][0]
    head, prompts = trained
    params = [
        SamplingParams(temperature=0.8, seed=1, max_tokens=30, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=1.0, seed=2, max_tokens=30, ignore_eos=True, top_k=20, top_p=0.9),
        SamplingParams(temperature=0.7, seed=3, max_tokens=30, ignore_eos=True, repetition_penalty=1.3),
        SamplingParams(temperature=0.3, seed=4, max_tokens=30, ignore_eos=True, n=2),
        SamplingParams(temperature=0, max_tokens=30, ignore_eos=True),
    ]
    prompts = prompts[: len(params)]
    plain = _llm(target, None).generate(prompts, params, use_tqdm=False)
    llm = _llm(target, _eagle(head, backoff=False))
    spec = llm.generate(prompts, params, use_tqdm=False)
    assert _tokens(spec) == _tokens(plain)
    again = _llm(target, _eagle(head, backoff=False)).generate(prompts, params, use_tqdm=False)
    assert _tokens(again) == _tokens(spec)  # seeded: reproducible
    for a, b in zip(plain[0].outputs[0].logprobs, spec[0].outputs[0].logprobs):
        assert a.keys() == b.keys() and all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)
    assert llm.engine.stats.spec_num_accepted_tokens > 0


def test_a_trained_head_is_accepted_and_a_random_one_is_not(tiny_models, trained, random_head) -> None:
    """The trained head predicts the target's next hidden state from its current one: with the
    engine's hidden states fed at the right positions, several drafts a round are accepted."""
    target = tiny_models["llama"][0]
    head, prompts = trained
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    plain = _tokens(_llm(target, None).generate(prompts, params, use_tqdm=False))
    good = _llm(target, _eagle(head, backoff=False))
    assert _tokens(good.generate(prompts, params, use_tqdm=False)) == plain
    bad = _llm(target, _eagle(random_head, backoff=False))
    assert _tokens(bad.generate(prompts, params, use_tqdm=False)) == plain
    good_length, bad_length = _mean_acceptance_length(good), _mean_acceptance_length(bad)
    assert good_length > 1.5, good_length
    assert bad_length < 1.2 and bad_length < good_length - 0.5, (bad_length, good_length)
    assert good.engine.stats.spec_accepted_per_position[-1] > 0  # chained drafts accepted too


def test_eagle_beside_a_tensor_parallel_target(tiny_models, trained) -> None:
    """TP=2 (gloo): the head runs on rank 0 with a whole copy of the target's embedding and LM head read
    from its checkpoint; greedy tokens equal TP=1 without speculation and the trained head is accepted."""
    target = tiny_models["llama"][0]
    head, prompts = trained
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    plain = _tokens(_llm(target, None, dtype="float32").generate(prompts[:4], params, use_tqdm=False))
    llm = _llm(target, _eagle(head, backoff=False), dtype="float32", tensor_parallel_size=2)
    try:
        assert _tokens(llm.generate(prompts[:4], params, use_tqdm=False)) == plain
        assert _mean_acceptance_length(llm) > 1.5
        proposer, hf = llm.engine.core.speculator.proposer, tiny_models["llama"][1]
        ids, hidden = torch.arange(VOCAB), torch.randn(3, hf.config.hidden_size)
        assert torch.equal(proposer._embed(ids), hf.model.embed_tokens(ids))  # the whole vocabulary, not a shard
        assert torch.allclose(proposer._logits(hidden), hf.lm_head(hidden), atol=1e-5)
    finally:
        llm.shutdown()


# -- errors ----------------------------------------------------------------------------------
def test_head_of_another_hidden_size_is_refused(tiny_models, tmp_path) -> None:
    head = save_head(tmp_path, random_head_weights(hidden=32, inter=64, head_dim=8), hidden_size=32,
                     intermediate_size=64)
    with pytest.raises(ConfigError, match="hidden_size 32 but the target model's is 64.*use the EAGLE head"):
        _llm(tiny_models["llama"][0], _eagle(head))


def test_missing_files_are_named(tiny_models, tmp_path) -> None:
    target = tiny_models["llama"][0]
    with pytest.raises(ConfigError, match="does not exist: set \"model\" to the local folder of an EAGLE head"):
        _llm(target, _eagle(str(tmp_path / "nowhere")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        _llm(target, _eagle(str(tmp_path / "empty")))
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "llama", **HEAD_CONFIG}))
    with pytest.raises(ConfigError, match="has no weights: it needs model.safetensors"):
        _llm(target, _eagle(str(tmp_path / "empty")))
    weights = random_head_weights()
    del weights["layers.0.mlp.down_proj.weight"]
    with pytest.raises(ConfigError, match="lacks layers.0.mlp.down_proj.weight"):
        _llm(target, _eagle(save_head(tmp_path / "partial", weights)))
    with pytest.raises(ConfigError, match='needs "model"'):
        _llm(target, {"method": "eagle", "num_speculative_tokens": 2})


def test_eagle3_heads_and_other_targets_are_refused(tiny_models, tmp_path, random_head) -> None:
    weights = random_head_weights()
    eagle3 = {"fc.weight": torch.zeros(64, 3 * 64), "d2t": torch.zeros(VOCAB, dtype=torch.long),
              **{k.replace("layers.0.", "midlayer."): v for k, v in weights.items() if k.startswith("layers.0.")}}
    with pytest.raises(ConfigError, match="is an EAGLE-3 head.*loads EAGLE-1/EAGLE-2 heads"):
        _llm(tiny_models["llama"][0], _eagle(save_head(tmp_path, eagle3)))
    with pytest.raises(ConfigError, match="EAGLE heads of Llama-family targets.*Gemma3ForCausalLM is not one"):
        _llm(tiny_models["gemma3"][0], _eagle(random_head))
