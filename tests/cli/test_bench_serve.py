"""`pagoda bench serve` against a fake OpenAI-style server with known timings: the metric math."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import FakeServer, FakeTimings  # noqa: E402
from pagoda.bench.serve import benchmark  # noqa: E402
from pagoda.bench.serve_load import LoadShape, arrival_gaps  # noqa: E402
from pagoda.bench.serve_metrics import percentile, summarize  # noqa: E402
from pagoda.bench.serve_prompts import load_prompts_file  # noqa: E402
from pagoda.bench.serve_requests import RequestInput, RequestResult, RequestSettings  # noqa: E402
from pagoda.cli.main import main  # noqa: E402

FIRST, GAP = 0.2, 0.05


@pytest.fixture(scope="module")
def fake():
    timings = FakeTimings(first_delay=FIRST, token_delay=GAP)
    with FakeServer(timings) as server:
        yield server, timings


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_metrics_match_the_servers_known_timings(fake, endpoint):
    server, _ = fake
    inputs = [RequestInput(" ".join(["w"] * (3 + i)), output_len=5) for i in range(6)]
    results, duration = benchmark(RequestSettings(server.url, "fake-model", endpoint), inputs, LoadShape())
    summary = summarize(results, duration)
    assert summary["completed"] == 6 and summary["failed"] == 0
    assert summary["total_output_tokens"] == 30
    assert summary["total_input_tokens"] == sum(3 + i for i in range(6))  # the server's usage
    assert summary["token_counts"] == "server usage"
    for r in results:
        assert r.generated_text == " tok0 tok1 tok2 tok3 tok4"
        assert FIRST <= r.ttft < FIRST + 0.5  # the chat role-only chunk is not the first token
        assert len(r.itl) == 4 and all(GAP * 0.8 <= gap < GAP + 0.3 for gap in r.itl)
        assert r.latency >= FIRST + 4 * GAP
    assert GAP * 0.8 <= summary["mean_tpot_ms"] / 1000 < GAP + 0.3
    assert summary["p50_ttft_ms"] <= summary["p90_ttft_ms"] <= summary["p99_ttft_ms"]
    assert duration < FIRST + 4 * GAP + 1.5  # all six at once, not one after another
    assert summary["request_throughput"] == pytest.approx(6 / duration)


def test_cli_writes_table_and_json(fake, tmp_path, capsys):
    server, timings = fake
    timings.bodies.clear()
    timings.max_in_flight = 0
    result_file = tmp_path / "result.json"
    rc = main(["bench", "serve", "--base-url", server.url + "/v1", "--num-prompts", "4", "--input-len", "12",
               "--output-len", "3", "--max-concurrency", "2", "--ignore-eos", "--no-progress",
               "--result-file", str(result_file), "--save-detailed"])
    assert rc == 0
    table = capsys.readouterr().out
    for label in ("Successful requests", "Request throughput", "Output token throughput", "Total token throughput",
                  "TTFT", "TPOT", "ITL", "E2E latency", "p50", "p90", "p99", "mean"):
        assert label in table
    record = json.loads(result_file.read_text())
    assert record["completed"] == 4 and record["model"] == "fake-model"
    assert record["input_lens"] == [12] * 4  # cut to exactly 12 tokens through /tokenize + /detokenize
    assert record["output_lens"] == [3] * 4 and record["total_output_tokens"] == 12
    assert all(len(gaps) == 2 for gaps in record["itls"])
    starts = record["start_times"]  # on the clock of the core's traces: later starts wait for a free slot
    assert len(starts) == 4 and max(starts) - min(starts) >= min(record["e2els"]) * 0.5
    assert timings.max_in_flight <= 2
    assert all(b["ignore_eos"] and b["stream"] and b["max_tokens"] == 3 for b in timings.bodies)


def test_without_tokenize_prompts_are_random_words(fake, tmp_path, capsys):
    server, timings = fake
    timings.tokenize = False
    try:
        rc = main(["bench", "serve", "--base-url", server.url, "--num-prompts", "3", "--input-len", "7",
                   "--output-len", "2", "--endpoint", "chat", "--no-progress", "--result-file", str(tmp_path / "r.json"),
                   "--save-detailed"])
    finally:
        timings.tokenize = True
    assert rc == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["input_lens"] == [7] * 3  # words, counted by the fake server's usage
    assert len(set(b["messages"][0]["content"] for b in timings.bodies[-3:])) == 3  # distinct prompts


def test_result_file_holds_the_summary_unless_detailed(fake, tmp_path):
    server, _ = fake
    rc = main(["bench", "serve", "--base-url", server.url, "--num-prompts", "3", "--input-len", "7",
               "--output-len", "2", "--no-progress", "--result-file", str(tmp_path / "r.json")])
    record = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0 and record["completed"] == 3 and record["total_output_tokens"] == 6 and "p99_ttft_ms" in record
    assert not {"input_lens", "output_lens", "start_times", "ttfts", "itls", "e2els", "generated_texts", "errors"} & set(record)


def test_failed_requests_are_counted_not_raised(fake, capsys):
    server, _ = fake
    rc = main(["bench", "serve", "--base-url", server.url, "--model", "missing", "--num-prompts", "2",
               "--input-len", "4", "--output-len", "2", "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "HTTP 404" in captured.err and "Failed requests" in captured.out


def test_prompts_file_strings_objects_and_cycling(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('"hello there"\n{"prompt": "abc", "output_len": 9}\n\n')
    items = load_prompts_file(str(path), 5, output_len=4)
    assert [i.prompt for i in items] == ["hello there", "abc", "hello there", "abc", "hello there"]
    assert [i.output_len for i in items] == [4, 9, 4, 9, 4]
    path.write_text('{"text": 1}\n')
    with pytest.raises(ValueError, match="p.jsonl:1"):
        load_prompts_file(str(path), None, 4)


def test_arrival_gaps_follow_rate_and_burstiness():
    assert arrival_gaps(LoadShape(), 3) == [0.0, 0.0, 0.0]
    poisson = arrival_gaps(LoadShape(request_rate=10.0, seed=1), 4000)
    assert statistics.mean(poisson) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(poisson) / statistics.mean(poisson) == pytest.approx(1.0, rel=0.08)  # exponential
    even = arrival_gaps(LoadShape(request_rate=10.0, burstiness=4.0, seed=1), 4000)
    assert statistics.mean(even) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(even) / statistics.mean(even) == pytest.approx(0.5, rel=0.08)  # CV = 1/sqrt(shape)


def test_percentiles_and_tpot_definitions():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([float(v) for v in range(1, 12)], 90) == pytest.approx(10.0)
    assert percentile([5.0], 99) == 5.0
    one = RequestResult(success=True, prompt_len=3, output_tokens=5, ttft=0.5, latency=1.3, itl=[0.2] * 4)
    single = RequestResult(success=True, prompt_len=2, output_tokens=1, ttft=0.4, latency=0.4)
    summary = summarize([one, single, RequestResult(error="x")], duration=2.0)
    assert summary["mean_tpot_ms"] == pytest.approx(200.0)  # (1.3 - 0.5) / 4; the 1-token request has none
    assert summary["mean_ttft_ms"] == pytest.approx(450.0)
    assert summary["completed"] == 2 and summary["failed"] == 1
    assert summary["total_token_throughput"] == pytest.approx((5 + 6) / 2.0)


@pytest.mark.parametrize("flags, reason", [
    (["--request-rate", "0"], "--request-rate must be > 0"),
    (["--num-prompts", "0"], "--num-prompts must be >= 1"),
    (["--burstiness", "-1"], "--burstiness must be > 0"),
    (["--base-url", "localhost:8000"], "--base-url must start with http"),
    (["--extra-body", "[1]"], "--extra-body must be a JSON object"),
])
def test_bad_flags_exit_2_before_any_request(flags, reason, capsys):
    assert main(["bench", "serve", *flags]) == 2
    assert reason in capsys.readouterr().err


def test_help_mentions_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "serve", "--help"])
    text = capsys.readouterr().out
    for flag in ("--base-url", "--model", "--endpoint", "--num-prompts", "--request-rate", "--burstiness",
                 "--max-concurrency", "--input-len", "--output-len", "--prompts-file", "--seed", "--ignore-eos",
                 "--temperature", "--extra-body", "--result-file", "--save-detailed", "--no-progress"):
        assert flag in text
