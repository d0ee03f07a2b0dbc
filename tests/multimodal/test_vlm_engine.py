"""Vision-language models through the engine: ``LLM.generate`` with ``multi_modal_data`` and ``LLM.chat``
with image content parts give transformers' greedy tokens and logprobs (prompts with 0, 1 and 2 images
batched together, prefills chunked through images), the prefix cache keeps prompts with different images
apart, the encoder cache serves a repeated image, and bad inputs get clear errors."""

from __future__ import annotations

import base64
import io

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.errors import RequestError
from pagoda.multimodal.step import MultimodalStep
from hf_tiny import save_tiny
from tiny_vlm import PLACEHOLDERS, hf_greedy, random_images, save_tiny_vlm, word_tokenizer

MAX_TOKENS = 8
FAMILIES = ["llava", "llava_next", "qwen2_5_vl", "gemma3"]
# a budget of 5 tokens a step cuts prompts into chunks: through LLaVA's (16 tokens) and Qwen2.5-VL's images;
# Gemma 3's image tokens attend to their whole image, so its chunks end before an image's run instead
BUDGET = 5


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request, tmp_path_factory):
    family = request.param
    folder = tmp_path_factory.mktemp(f"engine-{family}")
    return family, str(folder), save_tiny_vlm(family, folder)


def make_llm(folder: str, **kwargs) -> LLM:
    return LLM(model=folder, dtype="float32", block_size=4, max_model_len=256, **kwargs)


def image_prompts(family: str) -> list:
    ph, images = PLACEHOLDERS[family], random_images([(40, 60), (90, 50), (56, 112)])
    return [{"prompt": f"t1 t2 {ph} t3 t4 {ph} t5", "multi_modal_data": {"image": images[:2]}}, "t7 t8 t9",
            {"prompt": f"t5 {ph} t6", "multi_modal_data": {"image": images[2]}}]


def check_against_hf(family, hf, llm: LLM, prompt, completion) -> None:
    """``completion`` has transformers' greedy tokens and logprobs for ``prompt``."""
    if isinstance(prompt, dict):
        images = prompt["multi_modal_data"]["image"]
        processed = llm.engine.process_images(prompt["prompt"], images if isinstance(images, list) else [images])
        ids, items = processed.prompt_token_ids, [item.inputs() for item in processed.items]
    else:
        ids, items = llm.get_tokenizer()(prompt)["input_ids"], []
    tokens, logits = hf_greedy(family, hf, ids, items, MAX_TOKENS)
    assert completion.token_ids == tokens
    expected = torch.log_softmax(logits.double(), dim=-1)[torch.arange(len(tokens)), torch.tensor(tokens)]
    ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(tokens)], dtype=torch.float64)
    assert torch.allclose(ours, expected, atol=1e-4), (ours - expected).abs().max()


def test_generate_with_0_1_2_images_matches_hf(vlm):
    family, folder, hf = vlm
    llm = make_llm(folder, max_num_batched_tokens=BUDGET)
    prompts = image_prompts(family)
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0), use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        check_against_hf(family, hf, llm, prompt, out.outputs[0])


def png_data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_chat_with_image_url_parts_matches_generate(vlm):
    """OpenAI content parts with data: URLs render through the chat template into the same request as the
    template's text with the decoded images given to generate."""
    family, folder, _ = vlm
    llm = make_llm(folder)
    first, second = random_images([(40, 60), (56, 112)], seed=3)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "t4 t5"}, {"type": "image_url", "image_url": {"url": png_data_url(first)}},
        {"type": "text", "text": "t6"}, {"type": "image_url", "image_url": {"url": png_data_url(second)}}]}]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    chat = llm.chat(messages, params, use_tqdm=False)[0]
    ph = PLACEHOLDERS[family]
    text = f"user: t4 t5 {ph} t6 {ph} t3 assistant:"
    assert chat.prompt == text
    direct = llm.generate({"prompt": text, "multi_modal_data": {"image": [first, second]}}, params, use_tqdm=False)[0]
    assert chat.prompt_token_ids == direct.prompt_token_ids
    assert chat.outputs[0].token_ids == direct.outputs[0].token_ids


def test_prefix_cache_keeps_different_images_apart(vlm):
    """The same text with another image shares only the blocks before the image; the same image again
    shares the whole prompt but its last token; both give the tokens of a fresh engine."""
    family, folder, hf = vlm
    ph = PLACEHOLDERS[family]
    a, b = random_images([(90, 50), (90, 50)], seed=5)
    text = f"t1 t2 t3 t4 t5 t6 t7 t8 {ph} t9 t10 t11 t12 t13 t14 t15 t16"
    prompts = [{"prompt": text, "multi_modal_data": {"image": image}} for image in (a, b, a)]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0)
    llm = make_llm(folder, enable_prefix_caching=True)
    outs = [llm.generate(p, params, use_tqdm=False)[0] for p in prompts]
    first_image_token = llm.engine.process_images(text, [a]).items[0].offset
    assert outs[1].num_cached_tokens == first_image_token // 4 * 4  # the full blocks before the image
    assert outs[2].num_cached_tokens == (len(outs[2].prompt_token_ids) - 1) // 4 * 4
    for prompt, out in zip(prompts, outs):
        check_against_hf(family, hf, llm, prompt, out.outputs[0])


def test_encoder_cache_serves_a_repeated_image(vlm):
    family, folder, _ = vlm
    llm = make_llm(folder, enable_prefix_caching=False)
    ph = PLACEHOLDERS[family]
    (image,) = random_images([(56, 112)], seed=6)
    prompt = {"prompt": f"t5 {ph} t6", "multi_modal_data": {"image": image}}
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    first, again = (llm.generate(prompt, params, use_tqdm=False)[0] for _ in range(2))
    cache = llm.engine.core.runner.feature(MultimodalStep).cache
    assert (cache.misses, cache.hits) == (1, 1)
    assert again.outputs[0].token_ids == first.outputs[0].token_ids


def test_bad_image_inputs_are_refused(vlm):
    family, folder, _ = vlm
    llm = make_llm(folder)
    ph = PLACEHOLDERS[family]
    (image,) = random_images([(40, 60)])
    with pytest.raises(RequestError, match="1 image placeholder.*2 image"):
        llm.generate({"prompt": f"t1 {ph}", "multi_modal_data": {"image": [image, image]}}, use_tqdm=False)
    with pytest.raises(RequestError, match="cannot be decoded"):
        llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(b"not an image").decode()}}]}], use_tqdm=False)
    with pytest.raises(RequestError, match="must be a data: URL.*or a PIL.Image"):
        llm.generate({"prompt": f"t1 {ph}", "multi_modal_data": {"image": "cat.png"}}, use_tqdm=False)
    with pytest.raises(RequestError, match="not fetched.*allow_remote_media=True"):
        llm.generate({"prompt": f"t1 {ph}", "multi_modal_data": {"image": "https://example.com/a.png"}},
                     use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()


def test_images_for_a_text_only_model_are_refused(tmp_path):
    save_tiny("llama", tmp_path)
    word_tokenizer(96, [], {}, "").save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), dtype="float32", max_model_len=64)
    (image,) = random_images([(40, 60)])
    with pytest.raises(RequestError, match="takes text only"):
        llm.generate({"prompt": "t1 t2", "multi_modal_data": {"image": image}}, use_tqdm=False)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "gemma3"])
def test_tensor_parallel_2_equals_1(family, tmp_path):
    """Two ranks over gloo: the worker rank gets the images with the request and encodes them itself."""
    save_tiny_vlm(family, tmp_path)
    prompts, params = image_prompts(family), SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    outputs = []
    for tp in (1, 2):
        llm = make_llm(str(tmp_path), tensor_parallel_size=tp)
        try:
            outputs.append([out.outputs[0].token_ids for out in llm.generate(prompts, params, use_tqdm=False)])
        finally:
            llm.shutdown()
    assert outputs[0] == outputs[1]
