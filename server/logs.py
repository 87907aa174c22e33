"""Logging set-up: plain or JSON lines, each carrying the current request id."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO

from tiermem.server.api.interceptor import request_id


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str, json_format: bool, stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record to ``stream`` (stderr by default) as plain or JSON
    lines, each with the current request id; returns the installed handler."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.addFilter(_RequestIdFilter())
    if json_format:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return handler
