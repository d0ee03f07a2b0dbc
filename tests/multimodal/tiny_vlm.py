"""Tiny random vision-language models (LLaVA, LLaVA-NeXT, Qwen2.5-VL, Gemma 3) saved with a word-level tokenizer,
a chat template and transformers' PIL image processor, for parity tests against transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers as tf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from hf_tiny import randomise

# {% for %} over content parts: text as is, an image as the model's placeholder
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}:"
    "{% if m['content'] is string %} {{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %} PLACEHOLDER{% else %} {{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %} t3 {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def word_tokenizer(vocab_size: int, specials: list[str], extra: dict[str, str], placeholder: str):
    """Words t0..t{n} then the special tokens at the top of the vocabulary; roles are words too."""
    words = vocab_size - len(specials) - 3
    vocab = {f"t{i}": i for i in range(words)}
    vocab.update({"user:": words, "assistant:": words + 1, "system:": words + 2})
    vocab.update({s: vocab_size - len(specials) + j for j, s in enumerate(specials)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(specials)
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, extra_special_tokens=extra)
    fast.chat_template = CHAT_TEMPLATE.replace("PLACEHOLDER", placeholder)
    return fast


def llava_parts():
    tok = word_tokenizer(128, ["<image>"], {"image_token": "<image>"}, "<image>")
    images = tf.LlavaImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    vision = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                 image_size=28, patch_size=7, projection_dim=16)
    text = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config = tf.LlavaConfig(vision_config=vision, text_config=text, image_token_id=127, vision_feature_layer=-2,
                            image_seq_length=16)
    return config, tok, images, tf.LlavaForConditionalGeneration


def llava_next_parts():
    """LLaVA's tiny tower and decoder over any-resolution tiles of 28x28 (grids of 1x2 to 2x2 and 1x3 tiles)."""
    config, tok, _, _ = llava_parts()
    pinpoints = [[28, 56], [56, 28], [56, 56], [28, 84], [84, 28]]
    images = tf.LlavaNextImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28},
                                           image_grid_pinpoints=pinpoints)
    config = tf.LlavaNextConfig(vision_config=config.vision_config, text_config=config.text_config, image_token_id=127,
                                vision_feature_layer=-2, image_grid_pinpoints=pinpoints)
    return config, tok, images, tf.LlavaNextForConditionalGeneration


def qwen2_5_vl_parts():
    specials = ["<|vision_start|>", "<|image_pad|>", "<|video_pad|>", "<|vision_end|>"]
    tok = word_tokenizer(160, specials, {}, "<|vision_start|><|image_pad|><|vision_end|>")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    images = Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 24, patch_size=14, merge_size=2,
                                      temporal_patch_size=2)
    vision = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
    text = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    config = tf.Qwen2_5_VLConfig(vision_config=vision, text_config=text, image_token_id=157, video_token_id=158,
                                 vision_start_token_id=156, vision_end_token_id=159)
    return config, tok, images, tf.Qwen2_5_VLForConditionalGeneration


def gemma3_parts():
    specials = ["<start_of_image>", "<image_soft_token>", "<end_of_image>"]
    extra = {"boi_token": specials[0], "image_token": specials[1], "eoi_token": specials[2]}
    tok = word_tokenizer(160, specials, extra, "<start_of_image>")
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    images = Gemma3ImageProcessorPil(size={"height": 28, "width": 28})
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=28,
                  patch_size=7, vision_use_head=False)
    text = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=512, sliding_window=6,
                query_pre_attn_scalar=48, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config = tf.Gemma3Config(vision_config=vision, text_config=text, mm_tokens_per_image=4, image_token_index=158,
                             boi_token_index=157, eoi_token_index=159)
    return config, tok, images, tf.Gemma3ForConditionalGeneration


FAMILIES = {"llava": llava_parts, "llava_next": llava_next_parts, "qwen2_5_vl": qwen2_5_vl_parts,
            "gemma3": gemma3_parts}
PLACEHOLDERS = {"llava": "<image>", "llava_next": "<image>", "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
                "gemma3": "<start_of_image>"}


def save_tiny_vlm(family: str, folder: Path):
    """Save a randomised tiny ``family`` model, its tokenizer and image processor; returns the HF model."""
    config, tok, images, cls = FAMILIES[family]()
    torch.manual_seed(0)
    model = randomise(cls(config).to(torch.float32))
    with torch.no_grad():  # image rows about as large as the text embeddings: greedy tokens still vary after them
        for name, p in model.named_parameters():
            if "projector" in name or "merger" in name:
                p.mul_(0.3)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    images.save_pretrained(folder)
    return model


def random_images(sizes: list[tuple[int, int]], seed: int = 0) -> list:
    """Random RGB PIL images of (height, width) ``sizes``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def hf_inputs(family: str, config, ids: list[int], items: list[dict]) -> dict:
    """transformers' forward inputs for one prompt with Pagoda's processed items."""
    inputs = {"input_ids": torch.tensor([ids])}
    if not items:
        return inputs
    if family == "qwen2_5_vl":
        inputs["pixel_values"] = torch.cat([it["pixel_values"] for it in items])
        inputs["image_grid_thw"] = torch.stack([it["image_grid_thw"] for it in items])
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == config.image_token_id).int()
    elif family == "llava_next":  # each image's tiles, concatenated; its size says how many are its
        inputs["pixel_values"] = torch.cat([it["pixel_values"] for it in items])
        inputs["image_sizes"] = torch.stack([it["image_sizes"] for it in items])
    else:
        inputs["pixel_values"] = torch.stack([it["pixel_values"] for it in items])
    if family == "gemma3":
        inputs["token_type_ids"] = (inputs["input_ids"] == config.image_token_id).long()
    return inputs


def hf_processor(family: str, tokenizer, image_processor):
    """transformers' own processor for the tiny model (LLaVA, LLaVA-NeXT and Gemma 3; Qwen2.5-VL's needs
    torchvision)."""
    if family == "llava":
        return tf.LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=7,
                                 vision_feature_select_strategy="default", num_additional_image_tokens=1)
    if family == "llava_next":
        return tf.LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=7,
                                     vision_feature_select_strategy="default", num_additional_image_tokens=1)
    return tf.Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_length=4)


@torch.no_grad()
def hf_greedy(family: str, model, ids: list[int], items: list[dict], max_new_tokens: int):
    """transformers' greedy tokens for one prompt with its items, and the logits of each step ([steps, vocab])."""
    out = model.generate(**hf_inputs(family, model.config, ids, items), max_new_tokens=max_new_tokens,
                         do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, len(ids):].tolist(), torch.cat(out.logits, dim=0)
