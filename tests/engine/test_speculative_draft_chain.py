"""The draft proposer's rounds (pagoda.spec_decode.draft_chain, draft_steps): a first step through
the draft's runner for new shadows, then steps queued on the device (inputs staged once per round,
no host read in between; step graphs replayed where the draft has them), the first one catching
up one or two known tokens. The drafts must be the draft model's own greedy continuation,
whatever each request's budget, across rounds that accept some, none or all of the previous
drafts; a steady round takes k steps, one copy in and one read; no KV block may be left behind."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pagoda import LLM, SamplingParams
from pagoda.interfaces.proposer import ProposalInput
from pagoda.spec_decode.draft_chain import ChainRow, chain_arrays
from test_decode_graphs import REPLAYS, replay_plugins  # noqa: F401 - the fixture
from tiny_models import VOCAB, random_prompts

K = 4


def _engine(target: str, draft: str, **extra) -> LLM:
    spec = {"method": "draft", "model": draft, "num_speculative_tokens": K}
    return LLM(model=target, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
               kv_cache_memory=1 << 20, speculative_config=spec, **extra)


def _greedy(llm: LLM, sequences: list[list[int]], n: int) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(sequences, params, use_tqdm=False)]


def _rounds(proposer, reference: LLM) -> int:
    """Three rounds over six requests (budgets k, 1, 0, 2, k and a prompt longer than the draft's
    token budget); each round's drafts checked against the draft model's greedy continuation.
    Returns the drafts proposed."""
    prompts = random_prompts(5, range(5, 30), seed=11) + random_prompts(1, range(60, 61), seed=12)
    budgets = [None, 1, 0, 2, None, None]
    sequences, total = [list(p) for p in prompts], 0
    for round_ in range(3):
        inputs = [ProposalInput(f"r{i}", tuple(s), max_drafts=b) for i, (s, b) in enumerate(zip(sequences, budgets))]
        drafts = proposer.propose(inputs, K).token_ids
        wanted = [min(K, K if b is None else b) for b in budgets]
        expected = _greedy(reference, sequences, K)
        for i, d in enumerate(drafts):
            if i == 5 and round_ == 0:  # its prompt is caught up over two rounds: no drafts yet
                assert d == []
                continue
            assert d == expected[i][: wanted[i]], (round_, i)
        total += sum(map(len, drafts))
        for i, d in enumerate(drafts):  # the target accepts all, some or none, then emits a token
            accepted = d[: (round_ + i) % (len(d) + 1)] if d else []
            sequences[i] += accepted + [(7 * round_ + 13 * i + 5) % VOCAB]
    return total


def _check_released(proposer) -> None:
    for i in range(6):
        proposer.release(f"r{i}")
    assert not proposer._shadows and proposer.kv_cache.num_free_blocks == proposer.kv_cache.num_blocks


def test_chain_arrays_catch_up_known_tokens_in_the_first_step_then_one_draft_per_step() -> None:
    rows = [ChainRow(start=6, steps=3, blocks=[3, 6], fed=(11, 12)),  # all drafts accepted: two known tokens
            ChainRow(start=13, steps=1, blocks=[4, 9], fed=(9,)), ChainRow(start=5, steps=0, blocks=[2], fed=(7,))]
    a = chain_arrays(rows, num_steps=3, size=4, block_size=8)
    assert a.q == 2  # two query slots per row in the first step; the one-token row's second is padding
    assert a.first["input_ids"].tolist() == [11, 12, 9, 0, 0, 0, 0, 0]
    assert a.first["positions"].tolist() == [6, 7, 13, 0, 0, 0, 0, 0]
    assert a.first["slot_mapping"].tolist() == [3 * 8 + 6, 3 * 8 + 7, 9 * 8 + 5, -1, -1, -1, -1, -1]
    assert a.first["seq_lens"].tolist() == [8, 15, 2, 2]  # start + q: the real queries keep their positions
    assert a.first["last_index"].tolist() == [1, 2, 4, 6]  # each row's last real query gives its first draft
    assert a.rest["positions"].tolist() == [[8, 0, 0, 0], [9, 0, 0, 0]]  # fed its drafts 1 and 2
    assert a.rest["slot_mapping"].tolist() == [[6 * 8, -1, -1, -1], [6 * 8 + 1, -1, -1, -1]]
    assert a.rest["seq_lens"].dtype == np.int32 and a.rest["seq_lens"].tolist() == [[9, 1, 1, 1], [10, 1, 1, 1]]
    assert a.table.tolist() == [[3, 6], [4, 9], [2, 0], [0, 0]] and a.max_seq_lens == [15, 9, 10]
    assert [r.computed for r in rows] == [4, 1, 0]
    one = chain_arrays([ChainRow(start=13, steps=2, blocks=[4, 9], fed=(9,))], num_steps=2, size=1, block_size=8)
    assert one.q == 1 and "last_index" not in one.first and one.first["seq_lens"].tolist() == [14]
    assert one.rest["positions"].tolist() == [[14]] and one.max_seq_lens == [14, 15]


def test_draft_rounds_are_the_draft_models_greedy_tokens(tiny_models) -> None:
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    proposer = _engine(target, draft).engine.core.speculator.proposer
    assert not proposer.chain.steps.sizes  # CPU: eager steps
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20)
    assert _rounds(proposer, reference) > 30
    _check_released(proposer)


def test_draft_rounds_replay_step_graphs(replay_plugins, tiny_models) -> None:  # noqa: F811
    """The steps replay the draft's step graphs (one per step, padded to a captured size)."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    extra = dict(platform="replay-cpu", attention_backend="torch-graphs")
    proposer = _engine(target, draft, **extra).engine.core.speculator.proposer
    steps = proposer.chain.steps
    assert steps.sizes == [1, 2, 4, 8] and proposer.runner.graphs is None  # the runner's decode graphs: unused
    replayed = _record_steps(steps)
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20, enforce_eager=True,
                    **extra)
    REPLAYS[0] = 0
    assert _rounds(proposer, reference) > 30
    assert len(replayed) >= 3 * K and all(graphed for _, _, graphed in replayed)
    assert {size for size, _, _ in replayed} <= {1, 4, 8} and {q for _, q, _ in replayed} == {1, 2}
    assert REPLAYS[0] == len(replayed)
    _check_released(proposer)


def _record_steps(steps) -> list[tuple[int, int, bool]]:
    """Wrap ``DraftSteps.run``: each step's (size, query slots, replayed as a graph)."""
    record, run = [], steps.run

    def recorded(buffers, graphed, table, max_seq_len):
        record.append((buffers.size, buffers.q, graphed))
        return run(buffers, graphed, table, max_seq_len)

    steps.run = recorded
    return record


class _HostTraffic(TorchDispatchMode):
    """Counts, while active, what crosses between host and device in a round on CPU: staging
    buffers (each copied to the device at once), reads started and waited for, synchronisations,
    and tensor-to-host scalar reads (``.item()``, ``int(t)``: each a device sync on a GPU)."""

    def __init__(self, platform) -> None:
        super().__init__()
        self.counts = {"host_buffer": 0, "copy_to_host": 0, "wait": 0, "synchronize": 0, "item": 0}
        self.platform = platform
        self._saved = {name: getattr(platform, name) for name in ("host_buffer", "copy_to_host_async", "synchronize")}

    def __enter__(self):
        counts, saved = self.counts, self._saved

        def host_buffer(nbytes):
            counts["host_buffer"] += 1
            return saved["host_buffer"](nbytes)

        def copy_to_host_async(tensors, beside=False):
            counts["copy_to_host"] += 1
            wait = saved["copy_to_host_async"](tensors, beside)
            return lambda: counts.__setitem__("wait", counts["wait"] + 1) or wait()

        def synchronize():
            counts["synchronize"] += 1
            saved["synchronize"]()

        self.platform.host_buffer, self.platform.copy_to_host_async = host_buffer, copy_to_host_async
        self.platform.synchronize = synchronize
        return super().__enter__()

    def __exit__(self, *exc):
        for name in self._saved:
            delattr(self.platform, name)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.counts["item"] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("batch", [1, 3])
def test_a_steady_round_is_k_steps_one_copy_in_and_one_read(replay_plugins, tiny_models, batch):  # noqa: F811
    """Steady rounds at k = 2: after none, some or all drafts were accepted, a round replays k
    step graphs (two query slots in the first after all were accepted: no catch-up step), runs
    no step of the draft's runner, stages its inputs once, reads its drafts once and never
    synchronises or reads a scalar; its drafts are the draft model's greedy tokens."""
    _check_steady_rounds(tiny_models, batch, dict(platform="replay-cpu", attention_backend="torch-graphs"))


def _check_steady_rounds(tiny_models, batch: int, extra: dict) -> None:
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    proposer = _engine(target, draft, **extra).engine.core.speculator.proposer
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20, enforce_eager=True,
                    **extra)
    k, runner = 2, proposer.runner
    launches, launch = [], runner.launch
    runner.launch = lambda *a, **kw: launches.append(1) or launch(*a, **kw)
    replayed = _record_steps(proposer.chain.steps)
    sequences = [list(p) for p in random_prompts(batch, range(10, 20), seed=5)]  # within the draft's token budget
    drafts = proposer.propose([ProposalInput(f"q{i}", tuple(s)) for i, s in enumerate(sequences)], k).token_ids
    assert len(launches) == 1 and all(len(d) == k for d in drafts)  # the prompts: one step of the draft's runner
    size = next(s for s in proposer.chain.steps.sizes if s >= batch)
    for accepted in ("all", "none", "some", "all", "all", "some", "none"):
        for i, (seq, d) in enumerate(zip(sequences, drafts)):
            kept = {"none": 0, "some": 1, "all": len(d)}[accepted]
            seq += d[:kept] + [(d[kept] + 1) % VOCAB if kept < len(d) else (31 * i + 7) % VOCAB]
        del replayed[:], launches[:]
        with _HostTraffic(runner.platform) as traffic:
            drafts = proposer.propose([ProposalInput(f"q{i}", tuple(s)) for i, s in enumerate(sequences)], k).token_ids
        assert drafts == [e[:k] for e in _greedy(reference, sequences, k)], accepted
        assert not launches, accepted  # no step of the draft's runner (the all-accepted catch-up included)
        assert replayed == [(size, 2 if accepted == "all" else 1, True), (size, 1, True)], accepted
        assert traffic.counts == {"host_buffer": 1, "copy_to_host": 1, "wait": 1, "synchronize": 0, "item": 0}, accepted
    for i in range(batch):
        proposer.release(f"q{i}")
    assert proposer.kv_cache.num_free_blocks == proposer.kv_cache.num_blocks


@pytest.mark.gpu
def test_a_round_on_cuda_is_k_replays_one_copy_in_and_one_read(tiny_models) -> None:
    """The same on a GPU (Triton backend, float32, real CUDA graphs)."""
    _check_steady_rounds(tiny_models, 3, dict(attention_backend="triton", dtype="float32"))


@pytest.mark.gpu
def test_draft_rounds_on_cuda_graphs(tiny_models) -> None:
    """On a GPU (Triton backend, float32): the chained steps replay CUDA graphs and give the draft
    model's greedy tokens (computed eagerly); the round waits for the device once per chain."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    extra = dict(attention_backend="triton", dtype="float32")
    proposer = _engine(target, draft, **extra).engine.core.speculator.proposer
    assert proposer.chain.steps.sizes
    replayed = _record_steps(proposer.chain.steps)
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20, enforce_eager=True,
                    **extra)
    assert _rounds(proposer, reference) > 30
    assert replayed and all(graphed for *_, graphed in replayed) and {q for _, q, _ in replayed} == {1, 2}
    _check_released(proposer)
