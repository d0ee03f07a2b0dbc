"""The media settings (EngineConfig fields, their flags) and reading images offline: file:// URLs under the
allowed folder, the per-prompt limit, bytes and pixels (the server's answers: tests/server/test_image_inputs.py)."""

from __future__ import annotations

import argparse

import pytest

from pagoda.config import EngineConfig
from pagoda.entrypoints.multimodal_args import add_multimodal_args, multimodal_settings
from pagoda.errors import RequestError
from pagoda.multimodal.images import load_image
from pagoda.multimodal.media import MediaConfig
from tiny_vlm import random_images


def parse(*argv: str) -> dict:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_multimodal_args(parser)
    return multimodal_settings(parser.parse_args(argv))


def test_flags_mirror_the_config_fields(tmp_path):
    settings = parse("--limit-mm-per-prompt", "image=3", "--allowed-local-media-path", str(tmp_path),
                     "--allow-remote-media", "--max-image-bytes", "1000", "--max-image-pixels", "500",
                     "--media-fetch-timeout", "2.5")
    config = EngineConfig(**settings)
    assert MediaConfig.from_engine(config) == MediaConfig(3, str(tmp_path), True, 1000, 500, 2.5)
    assert parse("--limit-mm-per-prompt", '{"image": 0}')["limit_mm_per_prompt"] == {"image": 0}
    for bad in ("video=1", "image=-1", "image", "{nope"):
        with pytest.raises(argparse.ArgumentError, match="image=2"):
            parse("--limit-mm-per-prompt", bad)


@pytest.mark.parametrize("field, value, needle", [
    ("limit_mm_per_prompt", {"audio": 1}, "limits image only; got audio"),
    ("limit_mm_per_prompt", {"image": -1}, "counts >= 0"),
    ("allowed_local_media_path", "/no/such/folder", "an existing folder"),
    ("max_image_bytes", 0, "> 0 bytes"),
    ("media_fetch_timeout", 0, "> 0 seconds"),
])
def test_bad_settings_name_the_field(field, value, needle):
    with pytest.raises(ValueError, match=needle):
        EngineConfig(**{field: value})


def test_file_urls_offline(tmp_path):
    (image,) = random_images([(30, 20)])
    (tmp_path / "in").mkdir()
    image.save(tmp_path / "in" / "a.png")
    image.save(tmp_path / "b.png")
    media = MediaConfig(allowed_local_media_path=str(tmp_path / "in"))
    loaded = load_image(f"file://{tmp_path}/in/a.png", media)
    assert loaded.size == (20, 30) and loaded.tobytes() == image.tobytes()
    assert load_image(f"file://localhost{tmp_path}/in/%61.png", media).size == (20, 30)  # percent-encoded
    with pytest.raises(RequestError, match="outside the folder"):
        load_image(f"file://{tmp_path}/in/../b.png", media)
    with pytest.raises(RequestError, match="allowed_local_media_path=DIR"):
        load_image(f"file://{tmp_path}/in/a.png", MediaConfig())
    with pytest.raises(RequestError, match="more than the 100 allowed per image"):
        load_image(f"file://{tmp_path}/in/a.png", MediaConfig(allowed_local_media_path=str(tmp_path), max_image_bytes=100))
    with pytest.raises(RequestError, match="20x30 = 600 pixels"):
        load_image(image, MediaConfig(max_image_pixels=599))


def test_the_image_limit_offline(tmp_path):
    from pagoda import LLM
    from tiny_vlm import save_tiny_vlm

    save_tiny_vlm("llava", tmp_path)
    llm = LLM(model=str(tmp_path), dtype="float32", block_size=4, max_model_len=128, limit_mm_per_prompt={"image": 1})
    images = random_images([(40, 60), (40, 60)])
    with pytest.raises(RequestError, match="2 images and at most 1"):
        llm.generate({"prompt": "t1 <image> <image>", "multi_modal_data": {"image": images}}, use_tqdm=False)
    out = llm.generate({"prompt": "t1 <image>", "multi_modal_data": {"image": images[0]}}, use_tqdm=False)
    assert out[0].prompt_token_ids == [1] + [127] * 16  # t1, then the image's 16 tokens
