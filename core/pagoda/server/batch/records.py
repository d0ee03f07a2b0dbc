"""The lines of a batch file (OpenAI's Batch API JSONL) and the records of its results file.

A request line: ``{"custom_id": "...", "method": "POST", "url": "/v1/chat/completions", "body": {...}}``.
A result record: ``{"id": "batch_req_...", "custom_id": ..., "response": {"status_code", "request_id",
"body"}, "error": null}``; a line that never reached the API (not JSON, no ``custom_id``, an unknown
``url``, ...) gets ``"response": null`` and ``"error": {"code", "message", "line"}``.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Union

URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")


class ResultsFileError(ValueError):
    """A results file this run cannot continue (it holds something other than result records)."""


@dataclass(frozen=True)
class BatchRequest:
    line: int  # 1-based line number in the input file
    custom_id: str
    url: str
    body: dict


@dataclass(frozen=True)
class LineError:
    line: int
    custom_id: Optional[str]
    code: str
    message: str


def parse_line(number: int, text: str, seen: set[str]) -> Union[BatchRequest, LineError]:
    """One input line as a request, or the error that keeps it from the API (``seen``: custom_ids so far)."""
    try:
        item = json.loads(text)
    except ValueError as exc:
        return LineError(number, None, "invalid_json", f"line {number} is not valid JSON: {exc}")
    if not isinstance(item, dict):
        return LineError(number, None, "invalid_request", f"line {number} must be a JSON object")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(number, None, "missing_custom_id", f"line {number} needs a custom_id (a non-empty string)")
    problem = _problem(item, custom_id, seen)
    seen.add(custom_id)
    if problem is not None:
        return LineError(number, custom_id, problem[0], f"line {number} ({custom_id}): {problem[1]}")
    return BatchRequest(number, custom_id, item["url"], item["body"])


def _problem(item: dict, custom_id: str, seen: set[str]) -> Optional[tuple[str, str]]:
    if custom_id in seen:
        return "duplicate_custom_id", "this custom_id is already used by an earlier line; give each line its own"
    if item.get("method") != "POST":
        return "invalid_method", f"method must be \"POST\", got {item.get('method')!r}"
    if item.get("url") not in URLS:
        return "invalid_url", f"url must be one of {', '.join(URLS)}, got {item.get('url')!r}"
    body = item.get("body")
    if not isinstance(body, dict):
        return "invalid_body", "body must be a JSON object (the request of that url)"
    if body.get("stream"):
        return "invalid_body", "stream is not available in a batch (each result is written whole); remove it"
    extra = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if extra:
        return "invalid_request", f"unknown field {extra[0]!r} (a line holds custom_id, method, url and body)"
    return None


def result_record(custom_id: str, status_code: int, body: Any) -> dict:
    return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": custom_id,
            "response": {"status_code": status_code, "request_id": secrets.token_hex(16), "body": body},
            "error": None}


def error_record(error: LineError) -> dict:
    return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": error.custom_id, "response": None,
            "error": {"code": error.code, "message": error.message, "line": error.line}}


def encode(record: dict) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def plan(lines: list[tuple[int, str]], done: "Counter[str]", done_lines: set[int],
         ) -> tuple[list[Union[BatchRequest, LineError]], int]:
    """The lines still to run (parsed), and how many the results file already answers: a custom_id
    with k records there skips its first k lines; a line without one is known by its number."""
    seen: set[str] = set()
    occurrences: Counter[str] = Counter()
    work: list[Union[BatchRequest, LineError]] = []
    skipped = 0
    for number, text in lines:
        if not text.strip():
            continue  # a blank line holds no request
        item = parse_line(number, text, seen)
        if item.custom_id is not None:
            occurrences[item.custom_id] += 1
            answered = occurrences[item.custom_id] <= done[item.custom_id]
        else:
            answered = number in done_lines
        if answered:
            skipped += 1
        else:
            work.append(item)
    return work, skipped


def read_done(path: str) -> tuple["Counter[str]", set[int]]:
    """The records per custom_id (and, for lines without one, the line numbers) the results file at ``path``
    already holds; a last line cut short by a kill is removed from the file first."""
    if not os.path.exists(path):
        return Counter(), set()
    with open(path, "rb") as results:
        data = results.read()
    whole = data.rfind(b"\n") + 1
    if whole < len(data):  # a record cut short: the run was killed while writing it
        os.truncate(path, whole)
    ids: Counter[str] = Counter()
    lines: set[int] = set()
    for number, line in enumerate(data[:whole].splitlines(), 1):
        record = _record(line)
        if record is None:
            raise ResultsFileError(f"{path} line {number} is not a batch result record; give another --output-file, "
                                   "or remove that line")
        if record["custom_id"] is not None:
            ids[record["custom_id"]] += 1
        elif isinstance(record.get("error"), dict) and isinstance(record["error"].get("line"), int):
            lines.add(record["error"]["line"])
    return ids, lines


def _record(line: bytes) -> Optional[dict]:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or "custom_id" not in record or not {"response", "error"} <= set(record):
        return None
    return record
