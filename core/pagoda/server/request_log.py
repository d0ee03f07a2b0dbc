"""Request logs (``--log-requests``): a line when a request reaches the engine and one when it ends, on the
``pagoda.requests`` logger. Prompts are left out unless ``--log-request-prompts``; with ``--log-format json``
each line is a JSON object whose fields (``event``, ``request_id``, ...) are the ones of the text line."""

from __future__ import annotations

import logging

from pagoda.sampling_params import SamplingParams
from pagoda.server.request_record import RequestRecord

logger = logging.getLogger("pagoda.requests")
LOGGED_PARAMS = ("n", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop")


class RequestLog:
    """Writes the request lines; ``prompts``: include the prompt text and token ids."""

    def __init__(self, prompts: bool = False) -> None:
        self.prompts = prompts

    def received(self, request_id: str, model: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams) -> None:
        fields = {"event": "received", "request_id": request_id, "model": model,
                  "prompt_tokens": len(prompt_token_ids),
                  "params": {name: getattr(params, name) for name in LOGGED_PARAMS if getattr(params, name)}}
        if self.prompts:
            fields.update(prompt=prompt, prompt_token_ids=list(prompt_token_ids))
        _write(fields)

    def finished(self, record: RequestRecord) -> None:
        _write({"event": "finished", "request_id": record.request_id, "model": record.model, "engine": record.engine,
                "finish_reasons": record.finish_reasons, "prompt_tokens": record.prompt_tokens,
                "output_tokens": record.output_tokens,
                **{f"{name}_s": round(value, 6) for name, value in record.latencies().items()}})


def _write(fields: dict) -> None:
    """One INFO line: ``Request EVENT ID: key=value ...``, with ``fields`` kept on the record for JSON logs."""
    text = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items()
                    if k not in ("event", "request_id"))
    logger.info("Request %s %s: %s", fields["event"], fields["request_id"], text, extra={"fields": fields})
