"""Pagoda's models match transformers on the same weights (float32, CPU, paged torch attention)."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces import AttentionMetadata, ForwardContext
from pagoda.models.deepseek import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM
from pagoda.models.gemma3 import Gemma3ForCausalLM
from pagoda.models.llama import LlamaForCausalLM, MistralForCausalLM
from pagoda.models.mixtral import MixtralForCausalLM
from pagoda.models.phi3 import Phi3ForCausalLM
from pagoda.models.qwen2 import Qwen2ForCausalLM
from pagoda.models.qwen3 import Qwen3ForCausalLM
from pagoda.models.qwen3_moe import Qwen3MoeForCausalLM
from hf_tiny import BLOCK_SIZE, DEEPSEEK_YARN, LLAMA3_ROPE, hf_logits, load_pagoda, longrope, run_prefill, save_tiny

TOL = 1e-4
PROMPT = [5, 17, 42, 3, 88, 61, 7, 7, 29, 90, 14, 2, 55, 31]  # 14 tokens: several blocks and > window

CASES = {
    "llama-gqa-llama3-rope": ("llama", dict(rope_scaling=LLAMA3_ROPE)),
    "llama-mqa-linear-rope-biases": (
        "llama",
        dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True,
             rope_scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0}),
    ),
    "llama-mha-tied-no-head-dim": ("llama", dict(num_key_value_heads=4, head_dim=None, tie_word_embeddings=True)),
    "mistral-sliding-window": ("mistral", dict(sliding_window=5)),
    "qwen2-qkv-bias": ("qwen2", dict()),
    "qwen2-sliding-window": ("qwen2", dict(use_sliding_window=True, sliding_window=6, max_window_layers=0)),
    "qwen2-mixed-windows": ("qwen2", dict(use_sliding_window=True, sliding_window=5, max_window_layers=1)),
    "qwen3-qk-norm": ("qwen3", dict(rope_theta=1e6)),
    "qwen3-tied": ("qwen3", dict(tie_word_embeddings=True, attention_bias=True)),
    "mixtral-moe": ("mixtral", dict()),
    "mixtral-moe-top1-sliding-window": ("mixtral", dict(num_experts_per_tok=1, sliding_window=5)),
    "qwen3-moe-dense-layer-renormalized": ("qwen3_moe", dict()),
    "qwen3-moe-unnormalized-top3": ("qwen3_moe", dict(norm_topk_prob=False, num_experts_per_tok=3, mlp_only_layers=[])),
    "gemma3-local-global": ("gemma3", dict()),
    "gemma3-softcaps-untied-mqa-linear-rope": (
        "gemma3",
        dict(attn_logit_softcapping=3.0, final_logit_softcapping=4.0, tie_word_embeddings=False, num_key_value_heads=1,
             rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    ),
    "phi3-fused-qkv-gate-up": ("phi3", dict()),
    "phi3-longrope-short": ("phi3", dict(rope_parameters=longrope(32), original_max_position_embeddings=32)),
    # past original_max_position_embeddings (8): every step here uses the long factors
    "phi3-longrope-long-partial-window": (
        "phi3", dict(rope_parameters=longrope(8, partial=0.75), original_max_position_embeddings=8, sliding_window=6),
    ),
    "deepseek-v2-mla-greedy-yarn": ("deepseek_v2", dict()),
    "deepseek-v2-group-limited-biases": (
        "deepseek_v2", dict(topk_method="group_limited_greedy", n_group=4, topk_group=2, attention_bias=True,
                            first_k_dense_replace=0),
    ),
    "deepseek-v3-q-lora-sigmoid-groups-bias": ("deepseek_v3", dict()),
    "deepseek-v3-halves-rope-unnormalized": (
        "deepseek_v3", dict(rope_interleave=False, norm_topk_prob=False, n_group=2, topk_group=1,
                            rope_parameters=DEEPSEEK_YARN),
    ),
}
CLASSES = {"llama": LlamaForCausalLM, "mistral": MistralForCausalLM, "qwen2": Qwen2ForCausalLM,
           "qwen3": Qwen3ForCausalLM, "mixtral": MixtralForCausalLM, "qwen3_moe": Qwen3MoeForCausalLM,
           "gemma3": Gemma3ForCausalLM, "phi3": Phi3ForCausalLM, "deepseek_v2": DeepseekV2ForCausalLM,
           "deepseek_v3": DeepseekV3ForCausalLM}


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory):
    """(case, HF model, Pagoda model, its BuildContext) loaded from one saved checkpoint."""
    kind, overrides = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    hf = save_tiny(kind, folder, **overrides)
    model, ctx = load_pagoda(folder)
    return request.param, hf, model, ctx


def test_prefill_logits_match_transformers(pair):
    case, hf, model, ctx = pair
    kind = CASES[case][0]
    assert type(model) is CLASSES[kind]
    ours = run_prefill(model, ctx, [PROMPT])
    theirs = hf_logits(hf, PROMPT)
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    assert theirs.std() > 0.3, "logits too flat for the comparison to mean anything"
    assert (ours - theirs).abs().max().item() < TOL


def test_packed_batch_equals_sequences_run_alone(pair):
    _, hf, model, ctx = pair
    a, b = PROMPT[:9], PROMPT[3:] + [1, 2]
    packed = run_prefill(model, ctx, [a, b])
    alone = torch.cat([run_prefill(model, ctx, [a]), run_prefill(model, ctx, [b])])
    assert (packed - alone).abs().max().item() < 1e-5
    assert (packed[len(a):] - hf_logits(hf, b)).abs().max().item() < TOL


def test_decode_steps_through_the_kv_cache(pair):
    """Prefill all but the last 3 tokens, then decode them one per step (two sequences batched)."""
    _, hf, model, ctx = pair
    seqs = [PROMPT, PROMPT[::-1]]
    n, k = len(PROMPT), 3
    num_blocks = 2 * -(-n // BLOCK_SIZE)
    caches = [torch.zeros(ctx.attention.kv_cache_shape(num_blocks)) for _ in range(len(model.model.layers))]
    tables = torch.arange(num_blocks, dtype=torch.int32).view(2, -1)
    offsets = torch.arange(BLOCK_SIZE).repeat(tables.shape[1])
    slots = tables.long().repeat_interleave(BLOCK_SIZE, dim=1) * BLOCK_SIZE + offsets  # [2, blocks * BLOCK_SIZE]
    prefix = n - k
    starts = torch.tensor([0, prefix, 2 * prefix], dtype=torch.int32)
    meta = AttentionMetadata(slots[:, :prefix].flatten(), tables, starts,
                             torch.tensor([prefix, prefix], dtype=torch.int32), prefix, prefix)
    ids = torch.tensor([t for s in seqs for t in s[:prefix]])
    reference = [hf_logits(hf, s) for s in seqs]  # causal: row p is the logits after s[:p + 1]
    with torch.no_grad():
        model(ids, torch.arange(prefix).repeat(2), ForwardContext(meta, caches))
        for pos in range(prefix, n):
            meta = AttentionMetadata(slots[:, pos], tables, torch.tensor([0, 1, 2], dtype=torch.int32),
                                     torch.tensor([pos + 1, pos + 1], dtype=torch.int32), 1, pos + 1, num_decodes=2)
            step = torch.tensor([seqs[0][pos], seqs[1][pos]])
            logits = model.compute_logits(model(step, torch.tensor([pos, pos]), ForwardContext(meta, caches)))
            for i in range(len(seqs)):
                assert (logits[i] - reference[i][pos]).abs().max().item() < TOL
