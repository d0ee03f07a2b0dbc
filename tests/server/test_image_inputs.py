"""Images in /v1/chat/completions through the openai SDK, on a tiny random LLaVA: data: URLs (PNG, JPEG,
WebP), file:// URLs under --allowed-local-media-path, http:// URLs from a local server with
--allow-remote-media, streamed and not, give transformers' greedy tokens; every bad input is a 400 naming
the problem and the fix, and the server keeps serving the others."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import openai
import pytest
from PIL import Image
from transformers import AutoTokenizer

from pagoda.config import EngineConfig
from pagoda.multimodal.media import MediaConfig
from pagoda.multimodal.processing import ImageProcessor
from server_helpers import API_KEY, MODEL_NAME, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multimodal"))
from tiny_vlm import hf_greedy, random_images, save_tiny_vlm  # noqa: E402

MAX_TOKENS = 6
LIMIT = 2  # images per prompt
MAX_PIXELS = 100 * 100
MAX_BYTES = 20_000  # a 60x40 noise PNG is about 7 kB, a 90x90 one about 24 kB
SLOW_S = 3.0  # the local HTTP server's slow image, past the 1 s fetch timeout


def encoded(image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buffer.getvalue()


def data_url(image, fmt: str = "PNG") -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(encoded(image, fmt)).decode()


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def user(*parts) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]}]


class Images(BaseHTTPRequestHandler):
    """/cat.png, /missing (404), /huge (declares 10 MB), /slow (answers after SLOW_S)."""

    png = b""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/slow":
            time.sleep(SLOW_S)
        if self.path == "/missing":
            self.send_error(404)
            return
        body = self.png
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(10_000_000 if self.path == "/huge" else len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("server-llava")
    return folder, save_tiny_vlm("llava", folder)


@pytest.fixture(scope="module")
def cat():
    (image,) = random_images([(40, 60)], seed=11)
    return image


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory, cat):
    """allowed/ (cat.png, a link out, a link in) beside outside/secret.png."""
    root = tmp_path_factory.mktemp("media")
    (root / "allowed").mkdir()
    (root / "outside").mkdir()
    (root / "allowed" / "cat.png").write_bytes(encoded(cat))
    (root / "outside" / "secret.png").write_bytes(encoded(cat))
    (root / "allowed" / "link-out.png").symlink_to(root / "outside" / "secret.png")
    (root / "allowed" / "link-in.png").symlink_to(root / "allowed" / "cat.png")
    return root


@pytest.fixture(scope="module")
def http_images(cat):
    Images.png = encoded(cat)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Images)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def vlm_config(folder, **media) -> EngineConfig:
    return EngineConfig(model=str(folder), dtype="float32", block_size=4, max_model_len=128,
                        limit_mm_per_prompt={"image": LIMIT}, max_image_pixels=MAX_PIXELS, max_image_bytes=MAX_BYTES,
                        **media)


@pytest.fixture(scope="module")
def open_server(vlm, media_dir):
    """A LLaVA server reading file:// URLs under allowed/ and fetching http(s):// URLs (1 s limit)."""
    running = start_server(vlm_config(vlm[0], allowed_local_media_path=str(media_dir / "allowed"),
                                      allow_remote_media=True, media_fetch_timeout=1.0))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def strict_server(vlm):
    """A LLaVA server with the default media flags: data: URLs only."""
    running = start_server(vlm_config(vlm[0]))
    yield running
    running.stop()


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def chat(server, messages, **kwargs):
    return client_of(server).chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=MAX_TOKENS,
                                                     temperature=0, logprobs=True, **kwargs)


def hf_tokens(vlm, text: str, images: list) -> tuple[list[int], int]:
    """transformers' greedy tokens for the rendered ``text`` with ``images``, and the expanded prompt's length."""
    folder, hf = vlm
    processor = ImageProcessor.for_model(str(folder), AutoTokenizer.from_pretrained(folder), MediaConfig())
    processed = processor.process(text, images, add_special_tokens=False)
    tokens, _ = hf_greedy("llava", hf, processed.prompt_token_ids, [i.inputs() for i in processed.items], MAX_TOKENS)
    return tokens, len(processed.prompt_token_ids)


def token_ids(vlm, logprobs_content) -> list[int]:
    return AutoTokenizer.from_pretrained(vlm[0]).convert_tokens_to_ids([c.token for c in logprobs_content])


def test_data_urls_match_hf_streamed_and_not(vlm, strict_server, cat):
    dog, bird = random_images([(90, 50), (56, 112)], seed=12)
    messages = user("t4 t5", image_part(data_url(dog, "JPEG")), "t6", image_part(data_url(bird, "WEBP")))
    reply = chat(strict_server, messages)
    decoded = [Image.open(io.BytesIO(encoded(dog, "JPEG"))), bird]  # JPEG is lossy: what the server decodes
    expected, prompt_len = hf_tokens(vlm, "user: t4 t5 <image> t6 <image> t3 assistant:", decoded)
    assert token_ids(vlm, reply.choices[0].logprobs.content) == expected
    assert reply.usage.prompt_tokens == prompt_len  # each <image> expanded into the image's 16 tokens

    stream = chat(strict_server, messages, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    streamed = [c for chunk in chunks for choice in chunk.choices if choice.logprobs for c in choice.logprobs.content]
    assert token_ids(vlm, streamed) == expected
    assert "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices) == \
        reply.choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == prompt_len

    png = chat(strict_server, user("t7", image_part(data_url(cat))))
    expected, _ = hf_tokens(vlm, "user: t7 <image> t3 assistant:", [cat])
    assert token_ids(vlm, png.choices[0].logprobs.content) == expected


def test_file_and_http_urls_read_the_same_image(vlm, open_server, media_dir, http_images, cat):
    expected = token_ids(vlm, chat(open_server, user("t7", image_part(data_url(cat)))).choices[0].logprobs.content)
    for url in (f"file://{media_dir}/allowed/cat.png", f"file://{media_dir}/allowed/link-in.png",
                f"file://{media_dir}/allowed/../allowed/cat.png", f"{http_images}/cat.png"):
        reply = chat(open_server, user("t7", image_part(url)))
        assert token_ids(vlm, reply.choices[0].logprobs.content) == expected, url


def bad_request(server, messages, **kwargs) -> str:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(server, messages, **kwargs)
    error = caught.value.body
    assert caught.value.status_code == 400 and error["type"] == "invalid_request_error", error
    return error["message"]


def test_bad_images_are_400s_naming_the_fix(strict_server, cat):
    not_an_image = "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()
    (big,) = random_images([(90, 90)], seed=13)
    wide = Image.new("RGB", (600, 20), (200, 30, 30))  # few bytes, too many pixels
    cases = [
        (user("t1", image_part(not_an_image)), "cannot be decoded"),
        (user("t1", image_part("data:image/png;base64,@@@@")), "not valid base64"),
        (user("t1", image_part("data:image/png,rawbytes")), "must be base64-encoded"),
        (user(*[image_part(data_url(cat))] * (LIMIT + 1)), f"at most {LIMIT} are allowed per prompt "
                                                            f"\\(--limit-mm-per-prompt image={LIMIT}\\)"),
        (user("t1", image_part(data_url(big))), f"more than the {MAX_BYTES} allowed per image \\(--max-image-bytes\\)"),
        (user("t1", image_part(data_url(wide))), f"600x20 = 12000 pixels, more than the {MAX_PIXELS} allowed per "
                                                 "image \\(--max-image-pixels\\); downscale it"),
        (user("t1", image_part("file:///etc/hostname")), "not read: start the server with --allowed-local-media-path"),
        (user("t1", image_part("https://example.com/cat.png")), "not fetched: start the server with "
                                                                "--allow-remote-media"),
        (user("t1", image_part("ftp://example.com/cat.png")), "must be a data: URL"),
    ]
    for messages, needle in cases:
        message = bad_request(strict_server, messages)
        assert re.search(needle, message), (needle, message)
    # beam search does not take images yet (the engine core refuses; the route answers 400)
    assert "beam search" in bad_request(strict_server, user("t1", image_part(data_url(cat))), n=2,
                                        extra_body={"use_beam_search": True})
    ok = chat(strict_server, user("t1", image_part(data_url(cat))))  # still serving
    assert ok.choices[0].finish_reason == "length"


def test_file_urls_stay_in_the_allowed_folder(open_server, media_dir):
    for path in (f"{media_dir}/outside/secret.png", f"{media_dir}/allowed/../outside/secret.png",
                 f"{media_dir}/allowed/link-out.png", "/etc/passwd", f"{media_dir}/allowed/../outside/missing.png"):
        message = bad_request(open_server, user("t1", image_part(f"file://{path}")))
        assert "is outside the folder images may be read from" in message and "--allowed-local-media-path" in message
    assert "does not exist" in bad_request(open_server, user("t1", image_part(f"file://{media_dir}/allowed/no.png")))
    assert "names a file on the server" in bad_request(open_server, user("t1", image_part("file://host/cat.png")))


def test_remote_fetches_within_limits_while_others_are_served(open_server, http_images, cat):
    assert "answered HTTP 404" in bad_request(open_server, user("t1", image_part(f"{http_images}/missing")))
    assert f"more than the {MAX_BYTES} allowed" in bad_request(open_server, user("t1", image_part(f"{http_images}/huge")))

    async def slow_and_fast():
        client = openai.AsyncOpenAI(base_url=open_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        slow = asyncio.ensure_future(client.chat.completions.create(
            model=MODEL_NAME, messages=user("t1", image_part(f"{http_images}/slow")), max_tokens=2))
        await asyncio.sleep(0.1)
        fast = await client.chat.completions.create(model=MODEL_NAME, messages=user("t1", image_part(data_url(cat))),
                                                    max_tokens=2)
        assert not slow.done()  # the fast request was served while the slow image was being fetched
        with pytest.raises(openai.BadRequestError) as caught:
            await slow
        return fast, caught.value.body["message"]

    fast, message = asyncio.run(slow_and_fast())
    assert fast.choices[0].finish_reason == "length"
    assert "took longer than 1 s (--media-fetch-timeout)" in message


def test_tokenize_counts_the_image_tokens(open_server, cat):
    body = {"model": MODEL_NAME, "messages": user("t7", image_part(data_url(cat)))}
    reply = httpx.post(open_server.url + "/tokenize", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["tokens"].count(127) == 16  # LLaVA's <image>, once per patch of the 28x28 tower


def test_an_image_for_a_text_only_model_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL_NAME, max_tokens=2, messages=user(
            "t1", image_part("data:image/png;base64,iVBORw0KGgo=")))
    assert "takes text only" in caught.value.body["message"] and "vision-language model" in caught.value.body["message"]
    ok = client.chat.completions.create(model=MODEL_NAME, max_tokens=2, messages=[{"role": "user", "content": "t1"}])
    assert ok.choices[0].message.content is not None
