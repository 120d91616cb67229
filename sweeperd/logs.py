"""Structured logging: JSON lines or console, the stdlib loggers alike, credentials never shown."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog

from sweeperd.constants import LogFormat
from sweeperd.keyspace import job_id_text

LEVELS = ("debug", "info", "warning", "error", "critical")
# Job ids and queue names listed in one log event at the most (the count says how many).
ID_CAP = 20
NAMES_CAP = 10
# The libraries' loggers log WARNING and up whatever the level: at debug APScheduler says two
# lines per job run, redis-py one per connection, and sweeperd's own debug lines would drown.
QUIET_LOGGERS = ("apscheduler", "redis", "tzlocal")

# A URL: scheme://... up to a space or a quote; redacted when it holds a credential.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
_USERINFO = re.compile(r"(://)[^\s/@'\"<>]*@")
_SECRET_MARKS = ("@", "password=")
# A URL's query keys whose value is a secret.
SECRET_QUERY_KEYS = ("password",)


class _OurHandler(logging.StreamHandler[TextIO]):
    """The root handler configure_logging installs, so that a second call replaces it."""


def redact(url: str) -> str:
    """Return the URL with any user and password removed, the query's too, fit for logs and
    labels."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
    head, question, query = path.partition("?")
    if question:
        pairs = [pair.partition("=") for pair in query.split("&")]
        query = "&".join(
            f"{k}{eq}{'<redacted>' if k in SECRET_QUERY_KEYS and v else v}" for k, eq, v in pairs
        )
    return f"{scheme}{sep}{netloc}{slash}{head}{question}{query}"


def _redact_url(match: re.Match[str]) -> str:
    url = match.group(0)
    try:
        return redact(url)
    except ValueError:
        # A URL urllib cannot parse (a bad port): drop the userinfo by hand.
        return _USERINFO.sub(r"\1", url)


def redact_text(text: str) -> str:
    """Return the text with the user and password removed from every URL in it, the query's too."""
    if not any(mark in text for mark in _SECRET_MARKS):
        return text
    return _URL.sub(_redact_url, text)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    return value


def redact_credentials(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Return a processor: credentials removed from any URL found in the event's string values."""
    for key, value in event_dict.items():
        event_dict[key] = _redact_value(value)
    return event_dict


def cap_ids(ids: Iterable[bytes | str], limit: int = ID_CAP) -> list[str]:
    """Job ids as text, at most `limit` of them and a marker saying how many were left out."""
    shown: list[str] = []
    more = 0
    for job_id in ids:
        if len(shown) >= limit:
            more += 1
        else:
            shown.append(job_id_text(job_id))
    if more:
        shown.append(f"…(+{more} more)")
    return shown


def wants_colour(stream: TextIO) -> bool:
    """Colours on a terminal, unless NO_COLOR is set to anything (no-color.org)."""
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")


def _renderer(fmt: LogFormat, stream: TextIO) -> structlog.types.Processor:
    if fmt is LogFormat.JSON:
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=wants_colour(stream))


def configure_logging(fmt: str, level: str, stream: TextIO | None = None) -> None:
    """Route structlog and the stdlib loggers to `stream` (stderr) in one format; callable again."""
    log_format = LogFormat(fmt)
    if log_format is LogFormat.AUTO:
        raise ValueError("resolve the log format auto to json or console before configuring")
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: one of {', '.join(LEVELS)}")
    out = stream if stream is not None else sys.stderr
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if log_format is LogFormat.JSON:
        shared.append(structlog.processors.format_exc_info)
    shared.append(redact_credentials)

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _renderer(log_format, out),
        ],
    )
    handler = _OurHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # A second call (SIGHUP) must reach existing loggers.
        cache_logger_on_first_use=False,
    )
