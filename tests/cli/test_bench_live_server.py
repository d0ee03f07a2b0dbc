"""`pagoda bench serve` against a live `pagoda serve` of a tiny model (a subprocess on a free port)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import httpx
import pytest
from conftest import SEQS, cli_env
from fake_openai_server import free_port

from pagoda.cli.main import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pagoda.server") is None, reason="no pagoda.server")


@pytest.fixture(scope="module")
def live_server(chat_model):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pagoda.cli.main", "serve", chat_model, "--port", str(port), "--max-num-seqs",
         str(SEQS), "--max-model-len", "256", "--log-level", "warning"],
        env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, url)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_until_up(proc: subprocess.Popen, url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pagoda serve exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise TimeoutError("pagoda serve did not come up")


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_bench_serve_against_pagoda_serve(live_server, endpoint, tmp_path, capsys):
    result_file = tmp_path / "result.json"
    rc = main(["bench", "serve", "--base-url", live_server, "--endpoint", endpoint, "--num-prompts", "6",
               "--input-len", "24", "--output-len", "10", "--max-concurrency", "3", "--ignore-eos", "--no-progress",
               "--result-file", str(result_file), "--save-detailed"])
    assert rc == 0, capsys.readouterr().err
    record = json.loads(result_file.read_text())
    assert record["completed"] == 6 and record["failed"] == 0
    assert record["token_counts"] == "server usage" and record["output_lens"] == [10] * 6
    if endpoint == "completions":  # exact prompt length through the server's /tokenize and /detokenize
        assert all(n in (24, 25) for n in record["input_lens"])  # 25 with a BOS token
    else:  # the chat template adds its own tokens
        assert all(n > 24 for n in record["input_lens"])
    assert all(len(text.split()) == 10 for text in record["generated_texts"])  # one word per token
    assert sum(len(gaps) for gaps in record["itls"]) >= 6  # several chunks per request were timed
    assert 0 < record["p50_ttft_ms"] <= record["p50_e2el_ms"]
