"""POST /start_profile and /stop_profile (vLLM's): served only with PAGODA_TORCH_PROFILER_DIR set; the
trace of the steps between them is written before /stop_profile answers; misuse is a 400 naming it."""

from __future__ import annotations

import gzip
import json

import httpx

from pagoda.envs import TORCH_PROFILER_DIR
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server

HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def test_profile_routes_write_a_trace_of_the_steps_between_them(tiny_chat_model, tmp_path, monkeypatch):
    monkeypatch.setenv(TORCH_PROFILER_DIR.name, str(tmp_path / "traces"))
    running = start_server(engine_config(tiny_chat_model))
    try:
        post = lambda route, **kw: httpx.post(running.url + route, headers=HEADERS, timeout=60, **kw)  # noqa: E731
        assert post("/stop_profile").json()["error"]["message"].endswith("the profiler is not running: start it first")
        assert post("/start_profile").status_code == 200
        again = post("/start_profile")
        assert again.status_code == 400 and "the profiler is already running" in again.json()["error"]["message"]
        done = post("/v1/completions", json={"model": MODEL_NAME, "prompt": "t5 t6 t7", "max_tokens": 4})
        assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 4
        assert post("/stop_profile").status_code == 200
        (trace,) = (tmp_path / "traces").glob("rank0.*.pt.trace.json.gz")
        with gzip.open(trace, "rt") as f:
            ops = {e.get("name", "") for e in json.load(f)["traceEvents"]}
        assert {"aten::mm", "aten::addmm", "aten::linear", "mkldnn::_linear_pointwise"} & ops
    finally:
        running.stop()


def test_without_the_folder_the_routes_are_not_served(server):
    assert httpx.post(server.url + "/start_profile", headers=HEADERS, timeout=10).status_code == 404
