"""`pagoda run-batch`: 500 mixed lines (chat, completions, embeddings on a generative model, malformed
JSON, unknown urls, missing custom_ids, bad bodies, duplicates, streams) on a tiny model give one record
a line in input order, errors recorded, each greedy text the offline engine's; a run killed mid-way and
run again ends with the same records; a pooling model's embeddings lines succeed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_process import SLOW_STEPS
from server_helpers import make_chat_model

from pagoda import LLM, SamplingParams
from pagoda.cli.main import main
from pagoda.server.batch.records import read_done

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pooling_models import make_tiny_bert  # noqa: E402

PROMPTS = [f"t{i} t{i + 1}" for i in range(5, 25)]
FLAGS = ["--served-model-name", "tiny", "--block-size", "8"]


def _line(custom_id: str | None, url: str, body: dict, **extra) -> str:
    item = {"custom_id": custom_id, "method": "POST", "url": url, "body": body, **extra}
    return json.dumps({k: v for k, v in item.items() if v is not None})


def mixed_lines() -> tuple[list[str], dict[str, str]]:
    """500 lines and, for each, what its record must be: "chat:PROMPT", "completion:PROMPT", or an error kind."""
    kinds = (["chat"] * 200 + ["completion"] * 200 + ["embedding"] * 25 + ["malformed"] * 25 + ["url"] * 10
             + ["no_id"] * 10 + ["bad_body"] * 10 + ["duplicate"] * 10 + ["stream"] * 10)
    random.Random(0).shuffle(kinds)
    first = kinds.index("chat")
    kinds[0], kinds[first] = kinds[first], kinds[0]  # line 0 is a request the duplicates repeat the custom_id of
    lines, expected = [], {}
    for number, kind in enumerate(kinds):
        cid, prompt = f"req-{number}", PROMPTS[number % len(PROMPTS)]
        chat = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 3, "temperature": 0}
        line = {
            "chat": lambda: _line(cid, "/v1/chat/completions", chat),
            "completion": lambda: _line(cid, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 3,
                                                                 "temperature": 0}),
            "embedding": lambda: _line(cid, "/v1/embeddings", {"model": "tiny", "input": prompt}),
            "malformed": lambda: '{"custom_id": "' + cid + '", "method": "POST", "url": ',
            "url": lambda: _line(cid, "/v1/images/generations", {"prompt": prompt}),
            "no_id": lambda: _line(None, "/v1/chat/completions", chat),
            "bad_body": lambda: _line(cid, "/v1/chat/completions", {"model": "tiny", "messages": []}),
            "duplicate": lambda: _line("req-0", "/v1/completions", {"model": "tiny", "prompt": prompt}),
            "stream": lambda: _line(cid, "/v1/chat/completions", {**chat, "stream": True}),
        }[kind]()
        lines.append(line)
        expected[number] = f"{kind}:{prompt}"
    return lines, expected


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("run-batch")
    model = make_chat_model(root / "model")
    lines, expected = mixed_lines()
    requests = root / "requests.jsonl"
    requests.write_text("\n".join(lines) + "\n")
    results = root / "results.jsonl"
    assert main(["run-batch", "-i", str(requests), "-o", str(results), model, *FLAGS]) == 0
    return root, model, requests, results, expected


def _offline_texts(model: str) -> dict[str, tuple[str, str]]:
    llm = LLM(model, block_size=8)
    params = SamplingParams(temperature=0, max_tokens=3)
    chats = llm.chat([[{"role": "user", "content": p}] for p in PROMPTS], params, use_tqdm=False)
    completions = llm.generate(PROMPTS, params, use_tqdm=False)
    return {p: (c.outputs[0].text, g.outputs[0].text) for p, c, g in zip(PROMPTS, chats, completions)}


def test_every_line_has_its_record_in_order(batch) -> None:
    _, model, _, results, expected = batch
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(records) == 500
    offline = _offline_texts(model)
    for number, record in enumerate(records):
        kind, prompt = expected[number].split(":", 1)
        check_record(record, kind, number, offline.get(prompt))


def check_record(record: dict, kind: str, number: int, texts: tuple[str, str] | None) -> None:
    response, error = record["response"], record["error"]
    if kind in ("chat", "completion"):
        assert record["custom_id"] == f"req-{number}" and error is None and response["status_code"] == 200
        choice = response["body"]["choices"][0]
        text = choice["message"]["content"] if kind == "chat" else choice["text"]
        assert text == texts[0 if kind == "chat" else 1]
    elif kind in ("embedding", "bad_body"):  # the API answered with its own 400
        assert record["custom_id"] == f"req-{number}" and response["status_code"] == 400
        assert response["body"]["error"]["code"] == ("wrong_runner" if kind == "embedding" else 400)
    else:
        codes = {"malformed": "invalid_json", "url": "invalid_url", "no_id": "missing_custom_id",
                 "duplicate": "duplicate_custom_id", "stream": "invalid_body"}
        assert response is None and error["code"] == codes[kind] and error["line"] == number + 1, record


def test_a_killed_run_resumes_to_the_same_records(batch, tmp_path) -> None:
    _, model, requests, reference, _ = batch
    (tmp_path / "sitecustomize.py").write_text(SLOW_STEPS)  # every engine step 20 ms slower: time to kill it
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([sys.executable, "-m", "pagoda.cli.main", "run-batch", "-i", str(requests), "-o",
                             str(results), model, *FLAGS, "--max-in-flight", "4"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _lines(results) < 60:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with open(results, "ab") as cut:  # as if the kill had come in the middle of a write
        cut.write(b'{"id": "batch_req_x", "custom_id": "req-')
    done_before = _lines(results)
    assert 60 <= done_before < 500
    assert main(["run-batch", "-i", str(requests), "-o", str(results), model, *FLAGS]) == 0
    resumed = [json.loads(line) for line in results.read_text().splitlines()]
    expected = [json.loads(line) for line in reference.read_text().splitlines()]
    assert len(resumed) == 500 and [_key(r) for r in resumed] == [_key(r) for r in expected]
    assert [_content(r) for r in resumed] == [_content(r) for r in expected]
    counts, _ = read_done(str(results))
    assert counts["req-0"] == 11  # its own line and the 10 duplicates: each answered once


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _key(record: dict):
    return record["custom_id"], (record["error"] or {}).get("line")


def _content(record: dict):
    """What a record says, without its fresh ids and timestamps."""
    if record["response"] is None:
        return record["error"]["code"]
    body = record["response"]["body"]
    choices = body.get("choices") or [{}]
    return record["response"]["status_code"], choices[0].get("text"), (choices[0].get("message") or {}).get("content")


def test_embeddings_lines_on_a_pooling_model(tmp_path) -> None:
    make_tiny_bert(tmp_path / "bert")
    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    lines = [_line(f"e{i}", "/v1/embeddings", {"model": "bert", "input": ["t1 t2", f"t{i}"]}) for i in range(6)]
    lines.append(_line("chat", "/v1/chat/completions", {"model": "bert", "messages": [{"role": "user",
                                                                                       "content": "t1"}]}))
    requests.write_text("\n".join(lines) + "\n")
    assert main(["run-batch", "-i", str(requests), "-o", str(results), str(tmp_path / "bert"),
                 "--served-model-name", "bert"]) == 0
    records = [json.loads(line) for line in results.read_text().splitlines()]
    vectors = [[item["embedding"] for item in r["response"]["body"]["data"]] for r in records[:6]]
    assert all(r["response"]["status_code"] == 200 for r in records[:6])
    assert all(v[0] == vectors[0][0] and len(v[1]) == 48 for v in vectors)  # the same text, the same embedding
    assert records[6]["response"]["status_code"] == 400
    assert records[6]["response"]["body"]["error"]["code"] == "wrong_runner"


def test_bad_files_exit_2_before_loading(tmp_path, capsys) -> None:
    assert main(["run-batch", "-i", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "out.jsonl")]) == 2
    assert "is not a file" in capsys.readouterr().err
    requests = tmp_path / "requests.jsonl"
    requests.write_text(_line("a", "/v1/completions", {"prompt": "t1"}) + "\n")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"not": "a record"}\n')
    assert main(["run-batch", "-i", str(requests), "-o", str(foreign)]) == 2
    assert "line 1 is not a batch result record" in capsys.readouterr().err
