"""Images through the Responses API (``input_image`` parts) and the Messages API (``image`` blocks, base64
and url sources) on a tiny random LLaVA: the same prompt tokens and the same greedy text as the chat
route's ``image_url`` parts."""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path

import openai
import pytest
from server_helpers import API_KEY, MODEL_NAME, start_server

from pagoda.config import EngineConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multimodal"))
from tiny_vlm import random_images, save_tiny_vlm  # noqa: E402
from pagoda.testing import import_or_skip

anthropic = import_or_skip("anthropic")


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-llava")
    save_tiny_vlm("llava", folder)
    running = start_server(EngineConfig(model=str(folder), dtype="float32", block_size=4, max_model_len=128))
    yield running
    running.stop()


def test_an_image_reads_the_same_through_every_api(vlm_server) -> None:
    (image,) = random_images([(48, 64)], seed=21)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode()
    url = "data:image/png;base64," + data
    client = openai.OpenAI(base_url=vlm_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    claude = anthropic.Anthropic(base_url=vlm_server.url, api_key=API_KEY, max_retries=0, timeout=60)
    chat = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=6, messages=[
        {"role": "user", "content": [{"type": "text", "text": "t4 t5"}, {"type": "image_url", "image_url": {"url": url}}]}])
    expected = chat.choices[0].message.content
    response = client.responses.create(model=MODEL_NAME, temperature=0, max_output_tokens=6, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "t4 t5"},
                                     {"type": "input_image", "image_url": url, "detail": "auto"}]}])
    assert response.output_text == expected and response.usage.input_tokens == chat.usage.prompt_tokens
    for source in ({"type": "base64", "media_type": "image/png", "data": data}, {"type": "url", "url": url}):
        message = claude.messages.create(model=MODEL_NAME, max_tokens=6, extra_body={"temperature": 0}, messages=[
            {"role": "user", "content": [{"type": "text", "text": "t4 t5"}, {"type": "image", "source": source}]}])
        assert message.content[0].text == expected
        counted = claude.messages.count_tokens(model=MODEL_NAME, messages=[
            {"role": "user", "content": [{"type": "text", "text": "t4 t5"}, {"type": "image", "source": source}]}])
        assert counted.input_tokens == chat.usage.prompt_tokens  # the image's placeholder expanded
