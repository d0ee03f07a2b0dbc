"""LoRA on a GPU: the Triton kernels compiled for the device (bfloat16 and float32, Llama-8B-sized slices)
against a float64 reference; decode steps replayed as CUDA graphs with LoRA rows give the tokens and
logprobs of eager steps and of HF + peft."""

from __future__ import annotations

import pytest
import torch

from lora_models import hf_greedy, hf_reference, make_adapter, make_base, random_prompts
from pagoda import LLM, LoRARequest, SamplingParams
from pagoda.lora.plan import build_plan, graph_buffer_size, graph_plan, write_graph_plan

pytestmark = pytest.mark.gpu
QKV_8B = [4096, 1024, 1024]


def _reference(x, a, b, y, slices, row_slots):
    out = y.double().clone()
    for row, slot in enumerate(row_slots):
        if slot >= 0:
            for s, (offset, size) in enumerate(slices):
                out[row, offset : offset + size] += b[slot, offset : offset + size].double() @ (a[slot, s].double()
                                                                                               @ x[row].double())
    return out


@pytest.mark.parametrize("dtype, atol", [(torch.bfloat16, 0.06), (torch.float32, 1e-3)])
@pytest.mark.parametrize("rank", [8, 16, 64])
def test_triton_kernels_on_the_gpu(dtype, atol, rank):
    from pagoda.lora.triton_kernels import add_lora_triton, tiles

    g = torch.Generator().manual_seed(rank)
    counts, slots = [1, 1, 1, 1, 37, 5, 300], [0, -1, 3, 0, 1, -1, 2]
    rows = sum(counts)
    k, n = 4096, sum(QKV_8B)
    slices = [(sum(QKV_8B[:i]), size) for i, size in enumerate(QKV_8B)]
    x = torch.randn(rows, k, generator=g).to(dtype)
    a = (torch.randn(4, 3, rank, k, generator=g) / k**0.5).to(dtype)
    b = (torch.randn(4, n, rank, generator=g) / rank**0.5).to(dtype)
    y = torch.randn(rows, n, generator=g).to(dtype)
    expected = _reference(x, a, b, y, slices, [s for c, s in zip(counts, slots) for _ in range(c)])
    xd, ad, bd, yd = (t.cuda() for t in (x, a, b, y))
    slices_d = torch.tensor(slices, dtype=torch.int32).cuda()
    plan = build_plan(slots, counts, torch.device("cuda"), groups=False)
    t = tiles(plan.max_segment_len)
    got = add_lora_triton(yd.clone(), xd, ad, bd, slices_d, 4096, plan, t)
    assert torch.allclose(got.double().cpu(), expected, atol=atol, rtol=0.02), (got.double().cpu() - expected).abs().max()
    static = torch.full((graph_buffer_size(64, 4),), -1, dtype=torch.int32)
    write_graph_plan(static.numpy(), slots[:4], 64, 4)
    decode_plan = graph_plan(static.cuda(), 64, 4)
    decode = add_lora_triton(yd[:8].clone(), xd[:8], ad, bd, slices_d, 4096, decode_plan, t)
    decode_expected = _reference(x[:8], a, b, y[:8], slices, [*slots[:4], -1, -1, -1, -1])
    assert torch.allclose(decode.double().cpu(), decode_expected, atol=atol, rtol=0.02)


def test_cuda_graph_decode_steps_with_lora_rows(tmp_path):
    base = make_base(tmp_path / "base", "llama")
    adapters = [make_adapter(base, tmp_path / f"a{i}", seed=30 + i, r=8 * (i + 1)) for i in range(3)]
    loras = [LoRARequest(f"a{i}", i + 1, str(path)) for i, path in enumerate(adapters)]
    per_prompt = [loras[0], None, loras[1], loras[2], loras[0], None]
    prompts = random_prompts(len(per_prompt), range(5, 20), seed=9)
    params = SamplingParams(temperature=0, max_tokens=16, logprobs=0)
    outputs, replays = {}, {}
    for eager in (False, True):
        llm = LLM(str(base), dtype="float32", enable_lora=True, max_loras=3, max_lora_rank=32, max_num_seqs=8,
                  skip_tokenizer_init=True, enforce_eager=eager)
        replays[eager] = _count_replays(llm.engine.core.runner.step_graphs)
        outputs[eager] = llm.generate(prompts, params, use_tqdm=False, lora_request=per_prompt)
        if not eager:  # base requests alone: the decode graphs captured without LoRA
            base_only = llm.generate(prompts[:2], params, use_tqdm=False)
        llm.shutdown()
    assert replays[True] == {} and replays[False]["AdapterGraphs"] > 0 and replays[False]["DecodeGraphs"] > 0, replays
    for out, prompt in zip(base_only, prompts):
        assert out.outputs[0].token_ids == hf_greedy(hf_reference(base, None), prompt, 16)[0]
    for graphed, eager, prompt, lora in zip(outputs[False], outputs[True], prompts, per_prompt):
        assert graphed.outputs[0].token_ids == eager.outputs[0].token_ids
        tokens, logprobs = hf_greedy(hf_reference(base, None if lora is None else lora.lora_path), prompt, 16)
        assert graphed.outputs[0].token_ids == tokens
        ours = torch.tensor([graphed.outputs[0].logprobs[i][t].logprob for i, t in enumerate(tokens)], dtype=torch.float64)
        assert torch.allclose(ours, logprobs, atol=2e-3), (ours - logprobs).abs().max()


def _count_replays(graph_sets) -> dict[str, int]:
    """Replays per graph set (by class name), counted as they happen."""
    counts = {}
    for graphs in graph_sets:
        name, replay = type(graphs).__name__, graphs.replay
        counts[name] = 0

        def counted(size, replay=replay, name=name):
            counts[name] += 1
            return replay(size)

        graphs.replay = counted
    return counts


def test_speculative_decoding_with_adapters_under_cuda_graphs(tmp_path):
    """n-gram speculation with LoRA on CUDA: verify steps of requests with adapters run eagerly, those of base
    requests alone replay the verify graphs (captured without LoRA rows); every request's greedy tokens equal
    HF + peft's."""
    base = make_base(tmp_path / "base", "llama")
    adapter = make_adapter(base, tmp_path / "a", seed=41, r=8)
    lora = LoRARequest("a", 1, str(adapter))
    prompts = [p * 3 for p in random_prompts(4, range(4, 9), seed=12)]  # repeated text: n-gram drafts
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": false}'
    llm = LLM(str(base), dtype="float32", enable_lora=True, max_lora_rank=8, max_num_seqs=8, skip_tokenizer_init=True,
              speculative_config=spec)
    replays = _count_replays(llm.engine.core.runner.step_graphs)
    params = SamplingParams(temperature=0, max_tokens=16)
    mixed = llm.generate(prompts, params, use_tqdm=False, lora_request=[lora, None, lora, None])
    base_only = llm.generate(prompts, params, use_tqdm=False)
    llm.shutdown()
    assert replays["VerifyGraphs"] > 0, replays
    for out, prompt, which in zip(mixed + base_only, prompts * 2, [adapter, None, adapter, None] + [None] * 4):
        assert out.outputs[0].token_ids == hf_greedy(hf_reference(base, which), prompt, 16)[0]
