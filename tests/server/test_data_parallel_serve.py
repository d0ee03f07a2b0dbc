"""`pagoda serve --data-parallel-size 2` (a real subprocess, steps slowed down): requests spread over both engine
cores, /metrics reports each core's gauges under the label ``engine``, and a core killed mid-generation fails
only its own requests while the other core finishes its own and keeps serving."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import httpx

from serve_process import start_serve, stop
from server_helpers import metric, read_metrics


def test_dp2_spreads_requests_reports_each_core_and_survives_one_dying(tiny_chat_model, tmp_path):
    proc, url, log = start_serve(tiny_chat_model, tmp_path, "--data-parallel-size", "2")
    try:
        pids = [int(p) for p in re.search(r"engine core pid (\d+), (\d+)", "".join(log)).groups()]
        results: dict[int, httpx.Response] = {}

        def ask(i: int) -> None:
            body = {"model": "tiny", "prompt": f"t{i + 5} t{i + 9} t{i + 20}", "max_tokens": 150, "temperature": 0}
            results[i] = httpx.post(url + "/v1/completions", json=body, timeout=120)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while True:  # both cores run two requests each (routed by load)
            values = read_metrics(url)
            running = [metric(values, "pagoda:num_requests_running", engine=str(d)) for d in (0, 1)]
            if running == [2, 2]:
                break
            assert time.monotonic() < deadline, running
            time.sleep(0.05)
        os.kill(pids[1], signal.SIGKILL)
        for thread in threads:
            thread.join(120)
        codes = sorted(r.status_code for r in results.values())
        assert codes[:2] == [200, 200] and all(code >= 500 for code in codes[2:]), codes
        finished = [r.json()["choices"][0] for r in results.values() if r.status_code == 200]
        assert all(c["finish_reason"] == "length" and len(c["text"].split()) == 150 for c in finished)
        body = {"model": "tiny", "prompt": "t1 t2", "max_tokens": 3, "temperature": 0}
        assert all(httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200 for _ in range(3))
        values = read_metrics(url)
        assert metric(values, "pagoda:num_requests_running", engine="0") == 0
        gauges = [key for key in values if key.startswith(("pagoda:num_requests_", "pagoda:kv_cache_usage_perc"))]
        assert not any('engine="1"' in key for key in gauges), "a dead core's gauges are gone"
        assert metric(values, "pagoda:request_success_total", engine="1", finished_reason="error") == 2  # its requests
    finally:
        stop(proc, log)
