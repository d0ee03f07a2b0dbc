"""How Pagoda's processes log: text lines (the default) or one JSON object a line (``--log-format json``,
env ``PAGODA_LOG_FORMAT``). The CLI, the engine core, the API server and the worker processes all set up
logging here, so one switch covers every process of a command."""

from __future__ import annotations

import json
import logging
import time

from pagoda import envs

LOG_FORMATS = ("text", "json")
CORE_FIELDS = ("time", "level", "logger", "message", "process")


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "process", ...}``: a record's ``fields`` (``extra={"fields":
    {...}}``) are added as they are, ``tag`` (e.g. ``api0``) as ``"source"``, a traceback as ``"exception"``."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = tag

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry = {"time": f"{stamp}.{int(record.msecs):03d}Z", "level": record.levelname, "logger": record.name,
                 "message": record.getMessage(), "process": record.process}
        if self.tag:
            entry["source"] = self.tag
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update({k: v for k, v in fields.items() if k not in CORE_FIELDS})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def formatter(tag: str = "", log_format: str | None = None) -> logging.Formatter:
    """The formatter of ``log_format`` (default: ``PAGODA_LOG_FORMAT``); ``tag`` names the process (``api0``)."""
    if (log_format or envs.LOG_FORMAT.get()) == "json":
        return JsonFormatter(tag)
    prefix = f"{tag} " if tag else ""
    return logging.Formatter(f"%(levelname)s %(asctime)s {prefix}%(name)s: %(message)s", datefmt="%H:%M:%S")


def configure_logging(level: str | int, tag: str = "", log_format: str | None = None) -> None:
    """``logging.basicConfig`` at ``level`` with :func:`formatter` (a no-op where the root logger has handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(tag, log_format))
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level, handlers=[handler])
