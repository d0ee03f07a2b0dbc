"""The examples of docs/api_responses.md, docs/api_anthropic.md, docs/server.md (its first example and
"Other APIs") and docs/batch.md, run as written against a tiny model over SmolLM2's vocabulary served
under the embedded model's name."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from tool_helpers import make_tool_chat_model, start_tool_server

from pagoda.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs"
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory):
    running = start_tool_server(tmp_path_factory.mktemp("tiny-docs"), api_key=None, name=NAME)
    yield running
    running.stop()


def run_blocks(page: str, url: str, monkeypatch, keep=lambda block: True) -> types.ModuleType:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S) if keep(b)]
    assert blocks
    module = types.ModuleType(f"docs_{page.replace('.', '_')}")  # a real module: pydantic resolves annotations
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in blocks:
        code = block.replace("http://127.0.0.1:8000", url)
        exec(compile(code, str(DOCS / page), "exec"), module.__dict__)  # noqa: S102 - our own docs
    return module


def test_the_responses_page_examples(docs_server, monkeypatch, capsys) -> None:
    module = run_blocks("api_responses.md", docs_server.url, monkeypatch)
    assert module.follow_up.previous_response_id == module.response.id
    assert isinstance(module.parsed.output_parsed, module.City)
    assert module.call.name == "get_weather" and json.loads(module.call.arguments)["city"]
    assert module.answer.previous_response_id == module.first.id
    printed = capsys.readouterr().out
    assert printed.startswith(module.response.status + " ") and "\nCity\nget_weather " in printed


def test_the_anthropic_page_examples(docs_server, monkeypatch, capsys) -> None:
    module = run_blocks("api_anthropic.md", docs_server.url, monkeypatch)
    assert module.first.stop_reason == "tool_use" and module.use.name == "get_weather"
    assert module.use.input["city"] and module.reply.content[0].type == "text"
    assert "tool_use get_weather " in capsys.readouterr().out


def test_the_server_page_examples(docs_server, monkeypatch) -> None:
    module = run_blocks("server.md", docs_server.url, monkeypatch,
                        keep=lambda block: "from openai import OpenAI" in block or "responses.create" in block)
    assert module.response.output_text and module.claude.api_key == "EMPTY"


def test_the_batch_page_example(tmp_path) -> None:
    page = (DOCS / "batch.md").read_text()
    requests = tmp_path / "requests.jsonl"
    requests.write_text(re.findall(r"```jsonl\n(.*?)```", page, flags=re.S)[0])
    command = re.search(r"^pagoda run-batch (.*)$", page, flags=re.M).group(1).split()
    assert command[:4] == ["-i", "requests.jsonl", "-o", "results.jsonl"] and command[-2] == "--served-model-name"
    results = tmp_path / "results.jsonl"
    model = make_tool_chat_model(tmp_path / "model")
    assert main(["run-batch", "-i", str(requests), "-o", str(results), model, *command[-2:], "--max-model-len", "512",
                 "--kv-cache-memory", str(64 << 20)]) == 0
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["custom_id"] for r in records] == ["q1", "q2", "q3"]
    assert [r["response"]["status_code"] for r in records[:2]] == [200, 200]
    assert records[2]["response"] is None and records[2]["error"]["code"] == "invalid_url"
