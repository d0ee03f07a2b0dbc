"""LoRA adapters over the OpenAI API, with the openai client: a request selects an adapter by its model
field (completions and chat, streamed and not, outputs equal HF + peft); /v1/models lists the base model and
each adapter with its parent; adapters load and unload at run time while other requests stream; every bad
input is a clear 400 (404 for unknown names) and the server keeps serving."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from lora_models import hf_greedy, hf_reference, make_adapter, make_base, random_prompts
from lora_server import API_KEY, BASE_NAME, start_lora_server

MAX_TOKENS = 10


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-server")
    base = make_base(root / "base", "llama")
    adapters = {name: make_adapter(base, root / name, seed=seed, r=r)
                for name, seed, r in (("sql", 11, 8), ("chat", 12, 16), ("late", 13, 8), ("big", 14, 32))}
    return base, adapters


@pytest.fixture(scope="module")
def server(folders):
    base, adapters = folders
    running = start_lora_server(str(base), [("sql", str(adapters["sql"])), ("chat", str(adapters["chat"]))],
                                max_loras=2, max_lora_rank=16)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def _words(tokens: list[int]) -> list[str]:
    return [f"t{t}" for t in tokens]


def _expected(folders, adapter: str | None, prompt: list[int]) -> list[str]:
    base, adapters = folders
    tokens, _ = hf_greedy(hf_reference(base, adapters[adapter] if adapter else None), prompt, MAX_TOKENS)
    return _words(tokens)


def test_models_lists_the_base_and_each_adapter(client, folders):
    cards = {card.id: card for card in client.models.list().data}
    assert set(cards) == {BASE_NAME, "sql", "chat"}
    assert cards["sql"].parent == BASE_NAME and cards["sql"].root == str(folders[1]["sql"])
    assert cards[BASE_NAME].parent is None


@pytest.mark.parametrize("model", ["sql", "chat", BASE_NAME])
def test_completions_select_the_adapter_by_model(client, folders, model):
    prompt = random_prompts(1, range(8, 9), seed=21)[0]
    adapter = None if model == BASE_NAME else model
    expected = _expected(folders, adapter, prompt)
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
    assert whole.model == model and whole.choices[0].text.split() == expected
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stream=True) if c.choices)
    assert streamed.split() == expected


def test_beam_search_with_an_adapter(client, folders):
    """``use_beam_search`` with an adapter's name: the best beam is the peft model's (HF's beam search)."""
    import torch

    prompt = random_prompts(1, range(6, 7), seed=23)[0]
    base, adapters = folders
    reference = hf_reference(base, adapters["sql"])
    with torch.no_grad():
        best = reference.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)), num_beams=3,
                                  do_sample=False, max_new_tokens=MAX_TOKENS, pad_token_id=0)[0, len(prompt):]
    whole = client.completions.create(model="sql", prompt=prompt, max_tokens=MAX_TOKENS, n=3,
                                      extra_body={"use_beam_search": True, "ignore_eos": True})
    assert whole.choices[0].text.split() == _words(best.tolist())


def test_chat_streams_with_an_adapter(client, folders):
    messages = [{"role": "user", "content": "t5 t6 t7 t8"}]
    whole = client.chat.completions.create(model="chat", messages=messages, max_tokens=MAX_TOKENS, temperature=0)
    prompt = [1, 5, 6, 7, 8, 2, 3]  # the chat template's words
    assert whole.choices[0].message.content.split() == _expected(folders, "chat", prompt)
    chunks = client.chat.completions.create(model="chat", messages=messages, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) .split() == \
        whole.choices[0].message.content.split()


def test_load_and_unload_while_others_stream(server, folders):
    """Streams of two loaded adapters and the base model run while a third adapter is loaded, used and
    unloaded; every stream ends with the tokens HF + peft gives; then the unloaded name is a 404."""
    prompts = random_prompts(3, range(6, 12), seed=22)
    models = ["sql", "chat", BASE_NAME]

    async def stream(aclient, model, prompt):
        chunks = await aclient.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                                  stream=True)
        return "".join([c.choices[0].text async for c in chunks if c.choices]).split()

    async def scenario():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        streams = [asyncio.ensure_future(stream(aclient, m, p)) for m, p in zip(models, prompts)]
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            loaded = await http.post("/v1/load_lora_adapter", json={"lora_name": "late",
                                                                    "lora_path": str(folders[1]["late"])})
            late = await stream(aclient, "late", prompts[0])
            unloaded = await http.post("/v1/unload_lora_adapter", json={"lora_name": "late"})
        return loaded, late, unloaded, await asyncio.gather(*streams)

    loaded, late, unloaded, outputs = asyncio.run(scenario())
    assert loaded.status_code == 200 and "late" in loaded.text, loaded.text
    assert unloaded.status_code == 200, unloaded.text
    assert late == _expected(folders, "late", prompts[0])
    for model, prompt, words in zip(models, prompts, outputs):
        assert words == _expected(folders, None if model == BASE_NAME else model, prompt)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="'late' does not exist"):
        client.completions.create(model="late", prompt=[1, 2], max_tokens=2)


def _post(server, path: str, body: dict, key: str | None = API_KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60)


@pytest.mark.parametrize("body, status, fragment", [
    ({"lora_name": "nowhere", "lora_path": "/no/such/folder"}, 400, "no folder"),
    ({"lora_name": "sql", "lora_path": "/x"}, 400, "already been loaded"),
    ({"lora_name": BASE_NAME, "lora_path": "/x"}, 400, "base model's name"),
    ({"lora_name": "", "lora_path": "/x"}, 400, "lora_name"),
    ({"lora_name": "x"}, 400, "lora_path"),
])
def test_bad_loads_are_400s(server, client, body, status, fragment):
    answer = _post(server, "/v1/load_lora_adapter", body)
    assert answer.status_code == status and fragment in answer.text, answer.text
    assert client.completions.create(model="sql", prompt=[1, 2], max_tokens=2).choices[0].text  # still serving


def test_rank_above_the_maximum_is_a_400(server, folders):
    answer = _post(server, "/v1/load_lora_adapter", {"lora_name": "big", "lora_path": str(folders[1]["big"])})
    assert answer.status_code == 400 and "--max-lora-rank 32" in answer.json()["error"]["message"]


def test_unknown_names_are_404s(server, client):
    assert _post(server, "/v1/unload_lora_adapter", {"lora_name": "nobody"}).status_code == 404
    with pytest.raises(openai.NotFoundError, match="LoRA adapters 'chat', 'sql'"):
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "t1"}])


def test_loading_needs_the_api_key(server):
    assert _post(server, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/x"}, key=None).status_code == 401


def test_runtime_updates_are_off_without_the_flag(folders):
    base, adapters = folders
    running = start_lora_server(str(base), [("sql", str(adapters["sql"]))], runtime_updates=False)
    try:
        answer = _post(running, "/v1/load_lora_adapter", {"lora_name": "chat", "lora_path": str(adapters["chat"])})
        assert answer.status_code == 404 and "--allow-runtime-lora-updating" in answer.text
        assert _post(running, "/v1/unload_lora_adapter", {"lora_name": "sql"}).status_code == 404
    finally:
        running.stop()
