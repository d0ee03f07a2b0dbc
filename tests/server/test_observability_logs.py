"""Request logs and JSON log lines, and the observability flags of `pagoda serve`: each in --help and in the
docs, each bad value refused before anything loads with a one-line reason."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from pagoda import envs
from pagoda.cli.main import main
from pagoda.logs import JsonFormatter, formatter
from pagoda.outputs import RequestMetrics
from pagoda.sampling_params import SamplingParams
from pagoda.server.request_log import RequestLog
from pagoda.server.request_record import RequestRecord
from test_serve_cli import test_bad_flag_values_exit_before_loading as exits_before_loading

DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGS = ("--metrics-name-prefix", "--otlp-traces-endpoint", "--log-requests", "--log-request-prompts", "--log-format")


def _record(message: str, fields: dict | None = None, exc_info=None) -> logging.LogRecord:
    record = logging.LogRecord("pagoda.test", logging.WARNING, __file__, 1, message, (), exc_info)
    if fields is not None:
        record.fields = fields
    return record


def test_json_lines_carry_the_message_fields_and_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        line = JsonFormatter("api1").format(_record("a %s", {"request_id": "r1", "level": "ignored"}, sys.exc_info()))
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "pagoda.test" and entry["source"] == "api1"
    assert entry["message"] == "a %s" and entry["request_id"] == "r1"  # a field never overrides a core key
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    assert "ValueError: boom" in entry["exception"] and "\n" not in line


def test_the_format_follows_the_environment(monkeypatch):
    monkeypatch.setenv(envs.LOG_FORMAT.name, "json")
    assert isinstance(formatter(), JsonFormatter)
    monkeypatch.setenv(envs.LOG_FORMAT.name, "text")
    assert formatter("api0").format(_record("hello")).endswith(" api0 pagoda.test: hello")
    monkeypatch.setenv(envs.LOG_FORMAT.name, "xml")
    with pytest.raises(envs.EnvVarError, match="PAGODA_LOG_FORMAT='xml'"):
        formatter()


def _finished_record() -> RequestRecord:
    times = RequestMetrics(arrival_time=10.0, first_scheduled_time=10.2, first_token_time=10.5, last_token_time=11.5,
                           queued_time=10.1)
    return RequestRecord("cmpl-1-0", "tiny", 1, SamplingParams(max_tokens=4), 3, 4, ["length"], times, 11.6)


@pytest.mark.parametrize("prompts", [False, True])
def test_request_lines_leave_prompts_out_unless_asked(caplog, prompts):
    log = RequestLog(prompts=prompts)
    with caplog.at_level(logging.INFO, logger="pagoda.requests"):
        log.received("cmpl-1-0", "tiny", "t1 t2 secret", [1, 2, 99], SamplingParams(max_tokens=4, temperature=0.5))
        log.finished(_finished_record())
    received, finished = (r.fields for r in caplog.records)
    assert received["params"] == {"n": 1, "max_tokens": 4, "temperature": 0.5, "top_p": 1.0}
    assert ("secret" in caplog.records[0].getMessage()) == prompts
    assert ("prompt" in received and received["prompt_token_ids"] == [1, 2, 99]) == prompts
    assert finished == {"event": "finished", "request_id": "cmpl-1-0", "model": "tiny", "engine": 1,
                        "finish_reasons": ["length"], "prompt_tokens": 3, "output_tokens": 4,
                        "time_to_first_token_s": 0.5, "time_in_queue_s": 0.1, "e2e_s": 1.6,
                        "time_in_model_prefill_s": 0.3, "time_in_model_decode_s": 1.0, "time_in_model_inference_s": 1.3}


def test_every_flag_is_in_help_and_in_the_docs(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = capsys.readouterr().out
    for page in ("cli.md", "observability.md"):
        text = (DOCS / page).read_text()
        assert [f for f in FLAGS if f not in text] == [], page
    assert [f for f in FLAGS if f not in help_text] == []


@pytest.mark.parametrize("flags, needle", [
    (["--metrics-name-prefix", "9lives"], "--metrics-name-prefix '9lives' is not a Prometheus name"),
    (["--log-request-prompts"], "--log-request-prompts needs --log-requests"),
    (["--otlp-traces-endpoint", "grpc://collector:4317"], "is not an OTLP/HTTP URL"),
])
def test_bad_observability_flags_exit_before_loading(monkeypatch, capsys, tiny_chat_model, flags, needle):
    exits_before_loading(monkeypatch, capsys, tiny_chat_model, flags, needle)
