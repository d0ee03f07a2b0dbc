"""Tiny random HF models (saved with a small word-level tokenizer) for engine-level tests."""

from __future__ import annotations

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, decoders

VOCAB = 384


def save_word_tokenizer(path, eos: int | None = None) -> None:
    """A word-level tokenizer over 't0'..'t{VOCAB-1}' (decodes ids as space-separated words)."""
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{eos}" if eos is not None else None)
    fast.save_pretrained(path)


CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=None, bos_token_id=None, pad_token_id=None,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
    ),
    "mistral": lambda: transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=256, sliding_window=24, eos_token_id=None, bos_token_id=None,
        pad_token_id=None, head_dim=16,
    ),
    "qwen2": lambda: transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=None, bos_token_id=None, pad_token_id=None,
        tie_word_embeddings=True,
    ),
    "qwen3": lambda: transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, eos_token_id=None, bos_token_id=None,
        pad_token_id=None,
    ),
    "mixtral": lambda: transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, num_local_experts=8, num_experts_per_tok=2,
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    ),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256, num_experts=8,
        num_experts_per_tok=3, norm_topk_prob=True, mlp_only_layers=[0], eos_token_id=None, bos_token_id=None,
        pad_token_id=None,
    ),
    "gemma3": lambda: transformers.Gemma3TextConfig(  # local, global, local layers; window 24
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=256, sliding_window=24, query_pre_attn_scalar=48,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], eos_token_id=None,
        bos_token_id=None, pad_token_id=None,
    ),
    # LongRoPE below original_max_position_embeddings (128): transformers' generate recomputes its whole cache with
    # the long factors when a sequence crosses it, Pagoda does not (docs/models.md); the long factors are checked in
    # tests/models/test_model_parity.py
    "phi3": lambda: transformers.Phi3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, original_max_position_embeddings=128,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 128,
                         "short_factor": [1.0 + 0.1 * i for i in range(8)],
                         "long_factor": [2.0 + 1.5 * i for i in range(8)]},
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    ),
    # multi-head latent attention (a 48-value latent per token) with YaRN as DeepSeek-V2-Lite sets it (mscale =
    # mscale_all_dim: the softmax scale changes, cos/sin do not); q without LoRA; softmax greedy routing
    "deepseek_v2": lambda: transformers.DeepseekV2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=2,
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
        v_head_dim=16, max_position_embeddings=256, routed_scaling_factor=1.5,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "original_max_position_embeddings": 64},
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    ),
    # q LoRA; sigmoid scores over 4 groups of experts (2 kept) with a score bias, renormalised, scaled by 2.5
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        n_group=4, topk_group=2, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=16, head_dim=16, v_head_dim=16, max_position_embeddings=256, num_mtp_layers=0,
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    ),
}


def make_tiny_model(path, family: str, eos: int | None = None, config=None):
    """The family's tiny model (or one of ``config``, an HF config) saved under ``path`` with the word tokenizer."""
    torch.manual_seed(1234)
    config = config if config is not None else CONFIGS[family]()
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # larger weights than the default init make greedy decoding less flat
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
        for name, b in model.named_buffers():  # DeepSeek-V3's routing bias steers the expert choice
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.3)
    model.save_pretrained(path)
    save_word_tokenizer(path, eos)
    return model


def random_prompts(count: int, lengths: range, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths.start, lengths.stop, (count,), generator=g).tolist()
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in sizes]


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """HF greedy tokens and the raw logits of each generated step ([steps, vocab])."""
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, output_logits=True,
        return_dict_in_generate=True, pad_token_id=0,
    )
    return out.sequences[0, len(prompt):].tolist(), torch.cat(out.logits, dim=0)


def assert_greedy_matches_hf(llm, hf_model, prompts: list[list[int]], max_tokens: list[int], atol: float = 1e-4) -> None:
    """``llm``'s greedy tokens equal HF's for each prompt, and the logprob of each within ``atol`` of HF's."""
    from pagoda import SamplingParams

    params = [SamplingParams(temperature=0, max_tokens=m, logprobs=0) for m in max_tokens]
    for prompt, m, out in zip(prompts, max_tokens, llm.generate(prompts, params, use_tqdm=False)):
        completion = out.outputs[0]
        hf_tokens, hf_logits = hf_greedy(hf_model, prompt, m)
        assert completion.token_ids == hf_tokens
        expected = torch.log_softmax(hf_logits.double(), dim=-1)[torch.arange(m), torch.tensor(hf_tokens)]
        ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(hf_tokens)], dtype=torch.float64)
        assert torch.allclose(ours, expected, atol=atol), (ours - expected).abs().max()
