"""Pagoda's vision-language models match transformers on the same weights and images (float32, CPU):
prompts with 0, 1 and 2 images of different sizes packed in one batch, through the paged KV cache."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoImageProcessor, AutoTokenizer

from hf_tiny import load_pagoda, prefill_metadata
from pagoda.interfaces import ForwardContext
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.models.gemma3_vl import Gemma3ForConditionalGeneration
from pagoda.models.llava import LlavaForConditionalGeneration
from pagoda.models.llava_next import LlavaNextForConditionalGeneration
from pagoda.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
from pagoda.models.spec import num_kv_cache_layers
from pagoda.multimodal.processing import ImageProcessor
from pagoda.multimodal.step import MultimodalStep
from pagoda.request import Request
from pagoda.sampling_params import SamplingParams
from tiny_vlm import PLACEHOLDERS, hf_inputs, hf_processor, random_images, save_tiny_vlm

TOL = 1e-4
CLASSES = {"llava": LlavaForConditionalGeneration, "llava_next": LlavaNextForConditionalGeneration,
           "qwen2_5_vl": Qwen2_5_VLForConditionalGeneration,
           "gemma3": Gemma3ForConditionalGeneration}
SIZES = [(40, 60), (90, 50), (56, 112)]  # Qwen2.5-VL: 2, 6 and 8 tokens, one or two attention windows each


@pytest.fixture(scope="module", params=list(CLASSES))
def vlm(request, tmp_path_factory):
    """(family, folder, HF model, Pagoda model, its BuildContext, Pagoda's image processor)."""
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    hf = save_tiny_vlm(family, folder)
    model, ctx = load_pagoda(folder)
    processor = ImageProcessor.load(type(model), model.config, AutoTokenizer.from_pretrained(folder), str(folder))
    return family, folder, hf, model, ctx, processor


def prompts(family: str) -> list[tuple[str, list]]:
    ph, images = PLACEHOLDERS[family], random_images(SIZES)
    return [(f"t1 t2 {ph} t3 t4 {ph} t5", images[:2]), ("t7 t8 t9", []), (f"t5 {ph} t6", images[2:])]


@torch.no_grad()
def run_packed(model, ctx, processed, cache_rows: int = 10_000) -> list[torch.Tensor]:
    """Pagoda's logits of each processed prompt, all prefilled in one packed step (an encoder cache of
    ``cache_rows`` rows)."""
    lens = [len(p.prompt_token_ids) for p in processed]
    meta, num_blocks = prefill_metadata(lens)
    caches = [torch.zeros(ctx.attention.kv_cache_shape(num_blocks)) for _ in range(num_kv_cache_layers(model.config))]
    requests = [Request(str(i), p.prompt_token_ids, SamplingParams(), mm_items=p.items) for i, p in enumerate(processed)]
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()]
    positions = torch.cat([torch.arange(n) for n in lens])
    mm = MultimodalStep(model, cache_rows).step_embeddings(SchedulerOutput(requests, lens), starts, positions)
    ids = torch.tensor([t for p in processed for t in p.prompt_token_ids])
    logits = model.compute_logits(model(ids, positions, ForwardContext(meta, caches, multimodal=mm)))
    return [logits[a:b] for a, b in zip(starts, starts[1:])]


def test_packed_prompts_with_0_1_2_images_match_transformers(vlm):
    family, _, hf, model, ctx, processor = vlm
    assert type(model) is CLASSES[family]
    processed = [processor.process(text, images) for text, images in prompts(family)]
    assert [len(p.items) for p in processed] == [2, 0, 1]
    for ours, p in zip(run_packed(model, ctx, processed), processed):
        with torch.no_grad():
            theirs = hf(**hf_inputs(family, model.config, p.prompt_token_ids, [i.inputs() for i in p.items])).logits[0]
        assert theirs.std() > 0.3, "logits too flat for the comparison to mean anything"
        assert (ours - theirs).abs().max().item() < TOL


def test_an_encoder_cache_smaller_than_a_step_keeps_the_step_s_images(vlm):
    """A step whose images outgrow the encoder cache still merges them all (the cache drops them after)."""
    family, _, _, model, ctx, processor = vlm
    processed = [processor.process(text, images) for text, images in prompts(family)]
    for ours, roomy in zip(run_packed(model, ctx, processed, cache_rows=1), run_packed(model, ctx, processed)):
        assert torch.equal(ours, roomy)


def test_images_change_the_logits(vlm):
    """The same prompt with another image: different logits from the first image token on, equal before."""
    family, _, _, model, ctx, processor = vlm
    text, images = prompts(family)[2]
    a, b = (processor.process(text, [image]) for image in (images[0], random_images(SIZES, seed=1)[2]))
    assert a.prompt_token_ids == b.prompt_token_ids and a.items[0].content_hash != b.items[0].content_hash
    first = a.items[0].offset
    la, lb = run_packed(model, ctx, [a, b])
    assert (la[:first] - lb[:first]).abs().max().item() < 1e-6
    assert (la[first:] - lb[first:]).abs().max().item() > 1e-2


@pytest.mark.parametrize("family", ["llava", "llava_next", "gemma3"])
def test_processing_matches_transformers_processor(family, tmp_path):
    """Placeholder expansion and pixel values equal transformers' processor's (Qwen2.5-VL's processor needs
    torchvision for its video part; its expansion is checked against the image grid in the parity test)."""
    save_tiny_vlm(family, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    image_processor = AutoImageProcessor.from_pretrained(tmp_path, backend="pil")
    cls = CLASSES[family]
    from pagoda.loader import ModelSource, load_hf_config

    config = load_hf_config(ModelSource(tmp_path, None, "tiny"))
    ours = ImageProcessor(cls, config, tokenizer, image_processor)
    theirs = hf_processor(family, tokenizer, image_processor)
    text, images = prompts(family)[0]
    expected = theirs(text=text, images=images, return_tensors="pt")
    got = ours.process(text, images)
    assert got.prompt_token_ids == expected["input_ids"][0].tolist()
    pixels = expected["pixel_values"]
    if family == "llava_next":  # [images, most tiles, ...] padded with zeros: each item holds its own tiles
        assert all(torch.equal(i.inputs()["image_sizes"], size) for i, size in zip(got.items, expected["image_sizes"]))
        pixels = torch.cat([p[: len(i.inputs()["pixel_values"])] for p, i in zip(pixels, got.items)])
        assert not any(t.any() for p, i in zip(expected["pixel_values"], got.items)
                       for t in p[len(i.inputs()["pixel_values"]):])
    assert torch.equal(torch.cat([i.inputs()["pixel_values"].reshape(-1, *pixels.shape[-3:]) for i in got.items]),
                       pixels.reshape(-1, *pixels.shape[-3:]))


PAN_AND_SCAN = dict(do_pan_and_scan=True, pan_and_scan_min_crop_size=28, pan_and_scan_max_num_crops=4,
                    pan_and_scan_min_ratio_to_activate=1.2)


def test_gemma3_pan_and_scan_crops_match_transformers(tmp_path):
    """With pan-and-scan on in the image processor's config, a wide image becomes the image and its crops, each
    an item of its own placeholder run, as transformers' processor writes them; the logits still match."""
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    hf = save_tiny_vlm("gemma3", tmp_path)
    Gemma3ImageProcessorPil(size={"height": 28, "width": 28}, **PAN_AND_SCAN).save_pretrained(tmp_path)
    model, ctx = load_pagoda(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    ours = ImageProcessor.load(type(model), model.config, tokenizer, str(tmp_path))
    text, images = "t1 <start_of_image> t2 <start_of_image> t3", random_images([(30, 120), (40, 40)])
    got = ours.process(text, images)
    expected = hf_processor("gemma3", tokenizer, ours.image_processor)(text=text, images=images, return_tensors="pt",
                                                                       **PAN_AND_SCAN)
    assert len(got.items) == 6  # the wide image and 4 crops, then the square one
    assert got.prompt_token_ids == expected["input_ids"][0].tolist()
    assert torch.equal(torch.stack([i.inputs()["pixel_values"] for i in got.items]), expected["pixel_values"])
    (ours_logits,) = run_packed(model, ctx, [got])
    with torch.no_grad():
        theirs = hf(**hf_inputs("gemma3", model.config, got.prompt_token_ids, [i.inputs() for i in got.items])).logits[0]
    assert (ours_logits - theirs).abs().max().item() < TOL


def test_a_processor_chat_template_beside_the_tokenizer_is_used(tmp_path):
    """LLaVA-1.5's checkpoints keep their chat template in chat_template.json, for the processor."""
    import json

    from pagoda.loader import ModelSource, load_tokenizer
    from tiny_vlm import word_tokenizer

    tokenizer = word_tokenizer(128, ["<image>"], {}, "<image>")
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    assert load_tokenizer(ModelSource(tmp_path, None, "tiny")).chat_template == template
