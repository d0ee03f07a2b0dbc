"""The start-up memory profile of a vision-language model encodes the largest images one step may reach,
with a full encoder cache, before the text step (on a platform that measures; the CPU one runs nothing)."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from hf_tiny import load_pagoda
from pagoda.config import EngineConfig
from pagoda.models.spec import num_kv_cache_layers
from pagoda.platforms.cpu import CpuPlatform
from pagoda.runner.encoder_profile import EncoderProfile, encoder_profile
from pagoda.runner.profiling import profile_activation_bytes
from tiny_vlm import FAMILIES, save_tiny_vlm

# the largest image's placeholder tokens in the tiny configs: LLaVA's square, LLaVA-NeXT's 2x2 grid of tiles,
# Qwen2.5-VL's max_pixels (24 merged patches), Gemma 3's pooled square
LARGEST = {"llava": 16, "llava_next": 88, "qwen2_5_vl": 24, "gemma3": 4}
BUDGET = 100


class RunningCpu(CpuPlatform):
    """A CPU platform that runs the profile step (and reports no bytes: CPU memory is not measured)."""

    def peak_memory_during(self, fn) -> int:
        fn()
        return 0


@pytest.fixture(scope="module", params=list(FAMILIES))
def vlm(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"profile-{request.param}")
    save_tiny_vlm(request.param, folder)
    model, ctx = load_pagoda(folder)
    return request.param, folder, model, ctx


def profiled(model, ctx, profile: EncoderProfile) -> tuple[list[list], list[torch.Tensor]]:
    """The items each encoder call got, and what the profile step held, running it on the CPU."""
    calls, held = [], []
    encode, hold = model.encode_images, profile.hold

    def recording_encode(items):
        calls.append(items)
        return encode(items)

    def recording_hold(m, device):
        held.extend(hold(m, device))
        return held

    model.encode_images, profile.hold = recording_encode, recording_hold
    try:
        profile_activation_bytes(model, ctx.attention, RunningCpu(), BUDGET, 4, 4, num_kv_cache_layers(model.config),
                                 256, profile)
    finally:
        del model.encode_images
    return calls, held


def test_the_profile_encodes_a_step_s_worth_of_the_largest_image(vlm):
    family, folder, model, ctx = vlm
    config = EngineConfig(model=str(folder), max_num_batched_tokens=BUDGET, max_num_seqs=4)
    profile = encoder_profile(config, model, str(folder), model.config, BUDGET, 256)
    cls = type(model)
    items = cls.image_items(model.config, cls.load_image_processor(str(folder), model.config), Image.new("RGB", (9, 9)))
    per_image = len(items)
    (call,), held = profiled(model, ctx, profile)
    assert sum(cls.item_tokens(model.config, item) for item in call[:per_image]) == LARGEST[family]
    assert len(call) == per_image * (math.ceil(BUDGET / LARGEST[family]) + 1)
    cache, *rows = held
    assert cache.shape == (8192, model.config.text_config.hidden_size)  # the encoder cache's budget, full
    assert [r.shape[0] for r in rows] == [cls.item_tokens(model.config, item) for item in call]


def test_the_image_limit_bounds_the_profiled_images(vlm):
    family, folder, model, ctx = vlm
    config = EngineConfig(model=str(folder), max_num_seqs=2, limit_mm_per_prompt={"image": 1})
    (call,), _ = profiled(model, ctx, encoder_profile(config, model, str(folder), model.config, BUDGET, 256))
    assert sum(type(model).item_tokens(model.config, item) for item in call) == 2 * LARGEST[family]  # one image per sequence
    config = EngineConfig(model=str(folder), limit_mm_per_prompt={"image": 0})
    calls, held = profiled(model, ctx, encoder_profile(config, model, str(folder), model.config, BUDGET, 256))
    assert calls == [] and len(held) == 1


def test_a_folder_without_an_image_processor_profiles_the_text_step(tmp_path, caplog):
    save_tiny_vlm("llava", tmp_path)
    (tmp_path / "preprocessor_config.json").unlink()
    model, ctx = load_pagoda(tmp_path)
    profile = encoder_profile(EngineConfig(), model, str(tmp_path), model.config, BUDGET, 256)
    calls, held = profiled(model, ctx, profile)
    assert calls == [] and len(held) == 1
    assert "left out of the memory profile" in caplog.text


def test_text_models_have_no_encoder_profile(tmp_path):
    assert encoder_profile(EngineConfig(), torch.nn.Linear(2, 2), str(tmp_path), None, BUDGET, 256) is None


def test_the_largest_image_fits_the_context(tmp_path):
    """Qwen2.5-VL's largest image (24 tokens here) is shrunk to a prompt's max_model_len (10 tokens)."""
    save_tiny_vlm("qwen2_5_vl", tmp_path)
    model, _ = load_pagoda(tmp_path)
    profile = encoder_profile(EngineConfig(), model, str(tmp_path), model.config, BUDGET, max_model_len=10)
    items = profile.largest_items(model)
    tokens = type(model).item_tokens(model.config, items[0])
    assert 4 <= tokens <= 10 and len(items) == math.ceil(BUDGET / tokens) + 1
