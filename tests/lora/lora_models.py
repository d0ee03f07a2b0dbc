"""Tiny random base models and random LoRA adapters that peft creates and saves, with HF + peft as the
reference (float32, CPU)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

VOCAB = 320
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, eos_token_id=None, bos_token_id=None,
              pad_token_id=None)
# three different adapters: ranks 8/16/4, plain and rsLoRA scaling, all projections or some
ADAPTERS = {
    "all-r8": dict(seed=1, r=8, alpha=16),
    "attn-r16-rslora": dict(seed=2, r=16, alpha=8, use_rslora=True, targets=["q_proj", "v_proj", "o_proj"]),
    "mlp-r4": dict(seed=3, r=4, alpha=4, targets=["gate_proj", "up_proj", "down_proj", "k_proj"]),
}
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=32),
    "phi3": lambda: transformers.Phi3Config(**COMMON),  # q/k/v and gate/up fused in the HF model itself
}


CHAT_TEMPLATE = "{% for m in messages %}t1 {{ m['content'] }} t2 {% endfor %}{% if add_generation_prompt %}t3{% endif %}"


def make_base(path: Path, family: str) -> Path:
    """A randomised tiny ``family`` model saved to ``path``, with a word-level tokenizer ('t0'..'t319', decoded
    as space-separated words) and a chat template of those words."""
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[family](), dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    model.save_pretrained(path)
    _save_word_tokenizer(path)
    return path


def _save_word_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(path)


def make_adapter(base: Path, path: Path, seed: int, r: int = 8, alpha: float = 16, targets=ALL_TARGETS,
                 use_rslora: bool = False, **config) -> Path:
    """A peft LoRA adapter of ``base`` with random A and B (seeded), saved to ``path``."""
    from peft import LoraConfig, get_peft_model

    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    lora = LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), use_rslora=use_rslora,
                      init_lora_weights=False, **config)
    peft_model = randomise_lora(get_peft_model(model, lora), seed)
    peft_model.save_pretrained(path)
    return path


def randomise_lora(peft_model, seed: int):
    """Fill a peft model's LoRA A and B with seeded random values (peft's own init makes B zero); returns it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "lora_A" in name else 0.2))
    return peft_model


def hf_reference(base: Path, adapter: Path | None):
    """HF's model of ``base`` with ``adapter`` applied by peft (None: the base alone)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return model.eval()


@torch.no_grad()
def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """HF's greedy tokens and the logprob of each ([steps] float64)."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0, attention_mask=torch.ones(1, len(prompt)))
    tokens = out.sequences[0, len(prompt):].tolist()
    logprobs = torch.log_softmax(torch.cat(out.logits).double(), dim=-1)
    return tokens, logprobs[torch.arange(len(tokens)), torch.tensor(tokens)]


def random_prompts(count: int, lengths: range, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths.start, lengths.stop, (count,), generator=g).tolist()
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in sizes]
