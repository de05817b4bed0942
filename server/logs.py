"""One logging configuration owns stderr: the root logger's one handler writes every record (the
service's, uvicorn's, the MCP SDK's, FAISS's loader's, LlamaIndex's, httpx's, Python's warnings)
as one JSON object a line: time, level, logger, message, the request id (X-Request-ID) of the
request being served, and the record's own fields. RAG_LOG_FORMAT=text writes readable lines.

`rag serve` hands the same configuration to uvicorn, which applies it in its process and in each
worker before either logs; `create_app` applies it too (uvicorn started by hand). Libraries that
set up handlers of their own (the mcp SDK calls logging.basicConfig with a rich handler) lose
them to the root's: `claim_handlers` runs after they are made.
"""

from __future__ import annotations

import logging
import logging.config
import os
import sys
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS

# Fields a record carries that are not worth a line: uvicorn's ANSI-coloured copy of its message,
# the request id under its library name (written as request_id), the task name.
_NOT_SHOWN = [*RESERVED_ATTRS, "color_message", "correlation_id", "taskName"]


class TextFormatter(logging.Formatter):
    """Readable lines for people: time, level, logger, message, then the record's fields as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {k: v for k, v in record.__dict__.items() if k not in _NOT_SHOWN and not k.startswith("_")}
        request_id = getattr(record, "correlation_id", "-")
        if request_id and request_id != "-":
            fields["request_id"] = request_id
        return line + "".join(f" {key}={value}" for key, value in fields.items())


def logging_config(log_format: str, library_level: str = "WARNING") -> dict[str, Any]:
    """The dictConfig of the whole process: one stderr handler on the root, every logger into it."""
    formatters: dict[str, dict[str, Any]] = {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "{asctime}{levelname}{name}{message}{correlation_id}",
            "style": "{",
            "rename_fields": {
                "asctime": "time",
                "levelname": "level",
                "name": "logger",
                "correlation_id": "request_id",
            },
            "reserved_attrs": [a for a in _NOT_SHOWN if a != "correlation_id"],
            "json_ensure_ascii": False,
        },
        "text": {"()": "server.logs.TextFormatter"},
    }
    passes = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "asgi_correlation_id.CorrelationIdFilter", "name": "", "default_value": "-"}},
        "formatters": {log_format: formatters[log_format]},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": log_format,
                "filters": ["request_id"],
            }
        },
        "root": {"level": library_level, "handlers": ["stderr"]},
        "loggers": {
            "rag": {"level": "INFO", **passes},
            "uvicorn": {"level": "INFO", **passes},
            "uvicorn.error": {"level": "INFO", **passes},
            "uvicorn.access": {"level": "WARNING", **passes},
            # At INFO, sentence-transformers draws progress bars on stderr while it embeds.
            "sentence_transformers": {"level": "WARNING", **passes},
        },
    }


def configure_logging(log_format: str = "json", library_level: str = "WARNING") -> None:
    logging.config.dictConfig(logging_config(log_format, library_level))
    logging.captureWarnings(True)  # warnings.warn() lines become records too
    claim_handlers()


def claim_handlers() -> None:
    """Every record goes to the root's one handler: drop the handlers libraries add that write to
    the terminal (stream handlers, the mcp SDK's rich handler), here and on the root."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "name", None) == "stderr"]
    for handler in [h for h in root.handlers if h not in ours]:
        root.removeHandler(handler)
    for logger in logging.Logger.manager.loggerDict.values():
        if not isinstance(logger, logging.Logger):
            continue
        for handler in list(logger.handlers):
            if not isinstance(handler, logging.NullHandler | logging.FileHandler):
                logger.removeHandler(handler)
                logger.propagate = True


def fatal(message: str) -> None:
    """A start-up that cannot go on, in the format of the lines that would have followed (the
    settings are what failed, so the format is read from the environment as given)."""
    log_format = "text" if os.environ.get("RAG_LOG_FORMAT", "").strip().lower() == "text" else "json"
    configure_logging(log_format)
    logging.getLogger("rag.settings").critical(message)
    sys.stderr.flush()
