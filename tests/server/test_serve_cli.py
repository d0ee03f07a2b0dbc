"""`pagoda serve`: flag validation before loading, startup report, SIGTERM drain (a real subprocess)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import time

import httpx
import pytest

from pagoda.cli.main import main
from pagoda.engine_core.client import CoreProcess
from serve_process import start_serve


@pytest.mark.parametrize("flags, needle", [
    (["--block-size", "3"], "block_size must be a power of two"),
    (["--max-num-seqs", "0"], "max_num_seqs must be >= 1"),
    (["--port", "70000"], "--port must be in [0, 65535]"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout must be >= 0"),
    (["--max-n-per-request", "0"], "--max-n-per-request must be >= 1"),
    (["--request-timeout", "0"], "--request-timeout must be > 0 seconds"),
])
def test_bad_flag_values_exit_before_loading(monkeypatch, capsys, tiny_chat_model, flags, needle):
    monkeypatch.setattr(CoreProcess, "__init__", lambda *a, **k: pytest.fail("loaded the model"))
    assert main(["serve", tiny_chat_model, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pagoda serve: ") and needle in err and len(err.splitlines()) == 1


def test_port_in_use_exits_2_before_loading(monkeypatch, capsys, tiny_chat_model):
    monkeypatch.setattr(CoreProcess, "__init__", lambda *a, **k: pytest.fail("loaded the model"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", tiny_chat_model, "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pagoda serve: cannot listen on 127.0.0.1:") and len(err.splitlines()) == 1


def _cut_safetensors(model: str, tmp_path) -> tuple[str, str]:
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:200])  # cut short: header promises more than there is
    return str(broken), weights.name


def _cut_gguf(_model: str, tmp_path) -> tuple[str, str]:
    from pagoda.loader import resolve_model

    source = resolve_model(None)  # the embedded SmolLM2 GGUF
    if source.gguf_path is None:
        pytest.skip("the embedded model is not a GGUF file")
    broken = tmp_path / "cut-short.gguf"
    with open(source.gguf_path, "rb") as whole:
        broken.write_bytes(whole.read(8 << 20))  # header and tokenizer intact, most tensor data missing
    return str(broken), broken.name


@pytest.mark.parametrize("cut", [_cut_safetensors, _cut_gguf], ids=["safetensors", "gguf"])
def test_corrupt_checkpoint_exits_1_naming_the_file(capsys, tiny_chat_model, tmp_path, cut):
    model, file_name = cut(tiny_chat_model, tmp_path)
    assert main(["serve", model, "--port", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("pagoda serve: ") and file_name in err and "Traceback" not in err


def test_unknown_choice_and_missing_model_exit_nonzero(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(CoreProcess, "__init__", lambda *a, **k: pytest.fail("loaded the model"))
    with pytest.raises(SystemExit) as info:
        main(["serve", "--attention-backend", "nope"])
    assert info.value.code == 2 and "Unknown attention backend 'nope'" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "is not a local file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("api_servers, sig", [(1, signal.SIGTERM), (2, signal.SIGTERM), (1, signal.SIGINT)])
def test_sigterm_drains_in_flight_request_refuses_new_and_exits_0(tiny_chat_model, tmp_path, api_servers, sig):
    proc, url, log = start_serve(tiny_chat_model, tmp_path, "--api-server-count", str(api_servers))
    try:
        startup = "".join(log)
        assert re.search(r"Pagoda engine: platform \S+.*attention \S+.*quantization none.*KV cache \d+ blocks x 8 = \d+ tokens",
                         startup), startup
        body = {"model": "tiny", "prompt": "t1 t2", "max_tokens": 120, "temperature": 0, "stream": True}
        text, finish = [], None
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
            lines = (line for line in response.iter_lines() if line.startswith("data: {"))
            first = next(lines)
            proc.send_signal(sig)  # Ctrl-C drains the same way
            time.sleep(0.5)
            try:
                refused = httpx.post(url + "/v1/completions", json={"prompt": "t1"}, timeout=5).status_code
            except httpx.TransportError:
                refused = "connection refused"
            assert refused in (503, "connection refused")
            try:
                rest = list(lines)
            except httpx.HTTPError as exc:  # the drain cut the stream: show the server's side
                raise AssertionError(f"{exc}\n{''.join(log)}") from exc
            for line in [first, *rest]:
                choice = json.loads(line[len("data: "):])["choices"][0]
                text.append(choice["text"])
                finish = choice["finish_reason"] or finish
        assert finish == "length" and len("".join(text).split()) == 120
        assert proc.wait(timeout=120) == 0, "".join(log)
        assert "draining 1 running request" in "".join(log)
        core_pid = int(re.search(r"engine core pid (\d+)", "".join(log)).group(1))
        assert not _process_exists(core_pid), "the engine core process outlived the server"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_engine_core_exits_when_the_server_process_is_killed(tiny_chat_model, tmp_path):
    """A server killed outright (no chance to shut the core down) leaves no engine core behind."""
    proc, url, log = start_serve(tiny_chat_model, tmp_path)
    core_pid = int(re.search(r"engine core pid (\d+)", "".join(log)).group(1))
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while _process_exists(core_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _process_exists(core_pid), "the engine core outlived its killed parent"


def test_metrics_count_the_requests_of_every_api_server(tiny_chat_model, tmp_path):
    """Each scrape lands on one of two API server processes; every one counts all requests."""
    proc, url, log = start_serve(tiny_chat_model, tmp_path, "--api-server-count", "2")
    try:
        body = {"model": "tiny", "prompt": "t1 t2", "max_tokens": 3, "temperature": 0}
        for _ in range(6):  # a connection each: the kernel hands them to either process
            assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
        seen: list[float] = []
        deadline = time.monotonic() + 20  # reports reach the other process within a second or two
        while seen[-6:] != [6] * 6 and time.monotonic() < deadline:
            seen.append(_finished_by_length(url))
            time.sleep(0.2)
        assert seen[-6:] == [6] * 6, seen
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "".join(log)


def _finished_by_length(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return float(re.search(r'pagoda:request_success_total\{[^}]*finished_reason="length"\} (\S+)', text).group(1))
