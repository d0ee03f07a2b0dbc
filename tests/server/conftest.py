"""Fixtures of the server tests: one tiny-model server (loopback, free port) shared by every module."""

from __future__ import annotations

import pytest

from server_helpers import API_KEY, engine_config, make_chat_model, start_server


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory) -> str:
    return make_chat_model(tmp_path_factory.mktemp("tiny-chat-llama"))


@pytest.fixture(scope="session")
def server(tiny_chat_model):
    running = start_server(engine_config(tiny_chat_model))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def async_client_factory(server):
    import openai

    return lambda: openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
