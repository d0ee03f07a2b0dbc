"""DeepSeek's pieces against transformers' own: grouped top-k routing (V2 softmax greedy and group-limited,
V3 sigmoid with the score bias), YaRN frequencies and attention factor, and MLA's softmax scale."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, yarn_apply_mscale

from pagoda.layers.moe_routing import GroupedRouting, grouped_topk
from pagoda.layers.rotary import cos_sin_cache, inverse_frequencies, rope_config_from_hf, yarn_attention_factor
from pagoda.models.spec import mla_softmax_scale

HIDDEN, EXPERTS = 32, 16
V2 = dict(hidden_size=HIDDEN, num_attention_heads=4, n_routed_experts=EXPERTS, num_experts_per_tok=3,
          routed_scaling_factor=1.7)


def sorted_by_expert(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = ids.argsort(dim=-1)
    return weights.gather(1, order), ids.gather(1, order)


@pytest.mark.parametrize("config", [
    tf.DeepseekV2Config(**V2, topk_method="greedy"),
    tf.DeepseekV2Config(**V2, topk_method="group_limited_greedy", n_group=4, topk_group=2),
    tf.DeepseekV3Config(**V2, n_group=4, topk_group=2, norm_topk_prob=True),
    tf.DeepseekV3Config(**V2, n_group=8, topk_group=3, norm_topk_prob=False),
], ids=["v2-greedy", "v2-group-limited", "v3-renormalized", "v3-8-groups-unnormalized"])
def test_routing_matches_transformers(config) -> None:
    torch.manual_seed(0)
    router = (tf.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3TopkRouter if config.model_type == "deepseek_v3"
              else tf.models.deepseek_v2.modeling_deepseek_v2.DeepseekV2TopkRouter)(config)
    with torch.no_grad():
        router.weight.normal_(0, 0.5)
        bias = getattr(router, "e_score_correction_bias", None)
        if bias is not None:
            bias.normal_(0, 0.3)
    x = torch.randn(64, HIDDEN)
    _, hf_weights, hf_ids = router(x)
    routing = GroupedRouting.from_hf(config)
    weights, ids = grouped_topk(x @ router.weight.T, routing, getattr(router, "e_score_correction_bias", None))
    ours, theirs = sorted_by_expert(weights, ids), sorted_by_expert(hf_weights, hf_ids)
    assert torch.equal(ours[1], theirs[1])
    assert torch.allclose(ours[0], theirs[0], atol=1e-6)


def test_the_bias_steers_the_choice_but_not_the_weights() -> None:
    routing = GroupedRouting(num_experts=4, top_k=1, scoring="sigmoid", biased=True)
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]])
    weights, ids = grouped_topk(logits, routing, torch.tensor([0.0, 0.0, 0.0, 2.0]))
    assert ids.item() == 3 and weights.item() == pytest.approx(torch.sigmoid(torch.tensor(0.5)).item())


YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1}


@pytest.mark.parametrize("extra", [
    dict(mscale=0.707, mscale_all_dim=0.707),  # DeepSeek-V2-Lite: cos/sin unscaled, the softmax scale corrected
    dict(mscale=1.0, mscale_all_dim=0.8),
    dict(),  # plain YaRN: attention factor 0.1 ln(factor) + 1
    dict(truncate=False, factor=8.0),
], ids=["v2-lite", "mscale-ratio", "plain", "untruncated"])
def test_yarn_matches_transformers(extra) -> None:
    config = tf.DeepseekV2Config(hidden_size=64, num_attention_heads=4, qk_nope_head_dim=16, qk_rope_head_dim=16,
                                 max_position_embeddings=8192, rope_parameters={**YARN, **extra})
    inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](config)
    rope = rope_config_from_hf(config, 16)
    assert torch.allclose(inverse_frequencies(rope), inv_freq, rtol=1e-6)
    assert yarn_attention_factor(rope) == pytest.approx(factor)
    cache = cos_sin_cache(rope)
    assert cache[0, 0].item() == pytest.approx(factor)  # cos(0) times the attention factor
    assert mla_softmax_scale(config) == pytest.approx(yarn_apply_mscale(config.rope_parameters, 32 ** -0.5))
