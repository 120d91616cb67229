"""Logging: JSON and console output, the libraries' records at their own levels, redaction,
capped id lists."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from sweeperd.logs import (
    QUIET_LOGGERS,
    _OurHandler,
    cap_ids,
    configure_logging,
    redact_credentials,
    redact_text,
)

THEIRS = QUIET_LOGGERS  # the loggers of the libraries sweeperd runs on


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Each test starts from and leaves behind the logging setup it found."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in THEIRS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class TestJson:
    def test_shape(self) -> None:
        """A structlog event is one JSON line: event, level, ISO UTC timestamp, its keys."""
        out = io.StringIO()
        configure_logging("json", "info", stream=out)
        structlog.get_logger("sweeperd.tick").info("lease_recovered", queue="q", count=2)
        [entry] = lines(out)
        assert entry["event"] == "lease_recovered"
        assert entry["level"] == "info"
        assert entry["queue"] == "q"
        assert entry["count"] == 2
        assert entry["logger"] == "sweeperd.tick"
        assert entry["timestamp"].endswith("Z")
        assert entry["timestamp"][10] == "T"

    def test_exception(self) -> None:
        """An exception is rendered into the line as text."""
        out = io.StringIO()
        configure_logging("json", "info", stream=out)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            structlog.get_logger().exception("tick_failed")
        [entry] = lines(out)
        assert "RuntimeError: boom" in entry["exception"]

    def test_level_filters(self) -> None:
        """Events below the level are dropped, from structlog and stdlib alike."""
        out = io.StringIO()
        configure_logging("json", "warning", stream=out)
        structlog.get_logger().info("not_shown")
        logging.getLogger("redis").info("not shown either")
        structlog.get_logger().warning("shown")
        assert [e["event"] for e in lines(out)] == ["shown"]


class TestConsole:
    def test_console(self) -> None:
        """The console format is not JSON and names the event and its keys."""
        out = io.StringIO()
        configure_logging("console", "info", stream=out)
        structlog.get_logger().info("sweep_done", queue="orders")
        text = out.getvalue()
        assert "sweep_done" in text
        assert "queue=orders" in text
        assert not text.startswith("{")

    def test_colours_on_a_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """On a terminal the console lines are coloured."""
        monkeypatch.delenv("NO_COLOR", raising=False)
        out = Terminal()
        configure_logging("console", "info", stream=out)
        structlog.get_logger().info("sweep_done", queue="orders")
        assert "\x1b[" in out.getvalue()

    def test_no_color(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """NO_COLOR set: no escape codes, even on a terminal."""
        monkeypatch.setenv("NO_COLOR", "1")
        out = Terminal()
        configure_logging("console", "info", stream=out)
        structlog.get_logger().info("sweep_done", queue="orders")
        assert "\x1b[" not in out.getvalue()
        assert "sweep_done" in out.getvalue()

    def test_auto_refused(self) -> None:
        """auto must be resolved by the settings first."""
        with pytest.raises(ValueError, match="resolve the log format auto"):
            configure_logging("auto", "info", stream=io.StringIO())

    def test_unknown_level_refused(self) -> None:
        """An unknown level is refused."""
        with pytest.raises(ValueError, match="unknown log level"):
            configure_logging("json", "loud", stream=io.StringIO())


class TestIdempotent:
    def test_second_call_replaces(self) -> None:
        """Calling again (SIGHUP) keeps one handler and applies the new level."""
        first, second = io.StringIO(), io.StringIO()
        configure_logging("json", "info", stream=first)
        log = structlog.get_logger()
        log.debug("hidden")
        configure_logging("json", "debug", stream=second)
        log.debug("visible")
        assert first.getvalue() == ""
        assert [e["event"] for e in lines(second)] == ["visible"]
        assert sum(isinstance(h, _OurHandler) for h in logging.getLogger().handlers) == 1

    def test_the_libraries_follow_a_level_above_warning(self) -> None:
        """At error, the libraries' warnings go too: their floor is the level asked, or
        warning, whichever is higher."""
        out = io.StringIO()
        configure_logging("json", "error", stream=out)
        for name in THEIRS:
            logging.getLogger(f"{name}.x").warning("dropped")
            logging.getLogger(f"{name}.x").error("kept")
        assert [e["event"] for e in lines(out)] == ["kept"] * len(THEIRS)


class TestTheirLevels:
    @pytest.mark.parametrize("fmt", ["json", "console"])
    def test_a_record_keeps_its_level(self, fmt: str) -> None:
        """A stdlib record (apscheduler, redis) is rendered as sweeperd's lines are, its message
        formatted, at its own level: a warning as warning, an error as error (APScheduler's job
        stores': the daemon keeps its scheduler's and executors' to errors)."""
        out = io.StringIO()
        configure_logging(fmt, "info", stream=out)
        logging.getLogger("apscheduler.jobstores.default").warning("job %s missed", "x")
        logging.getLogger("redis.connection").error("connection reset")
        got = out.getvalue().splitlines()
        if fmt == "json":
            entries = [json.loads(line) for line in got]
            assert [(e["logger"], e["level"], e["event"]) for e in entries] == [
                ("apscheduler.jobstores.default", "warning", "job x missed"),
                ("redis.connection", "error", "connection reset"),
            ]
            assert all(e["timestamp"].endswith("Z") for e in entries)
        else:
            assert "[warning  ] job x missed" in got[0] and "[error    ] connection" in got[1]

    def test_debug_is_sweeperds_own(self) -> None:
        """At debug, sweeperd's debug lines show; the libraries still log warnings and up."""
        out = io.StringIO()
        configure_logging("json", "debug", stream=out)
        structlog.get_logger("sweeperd.ledger").debug("sweep", queue="q")
        for name in THEIRS:
            logging.getLogger(f"{name}.x").info("chatter")
            logging.getLogger(f"{name}.x").warning("heard")
        seen = [(e["event"], e["level"]) for e in lines(out)]
        assert seen == [("sweep", "debug"), *[("heard", "warning")] * len(THEIRS)]


class TestRedaction:
    def test_structlog_values(self) -> None:
        """Credentials in any string value, nested or not, never reach the output."""
        out = io.StringIO()
        configure_logging("json", "info", stream=out)
        structlog.get_logger().info(
            "connecting",
            url="redis://user:hunter2@h:6379/0",
            urls=["rediss://:hunter2@[::1]:6380"],
            detail={"why": "cannot reach redis://a:hunter2@x:1 now"},
        )
        assert "hunter2" not in out.getvalue()
        [entry] = lines(out)
        assert entry["url"] == "redis://h:6379/0"
        assert entry["detail"]["why"] == "cannot reach redis://x:1 now"

    def test_stdlib_message(self) -> None:
        """Credentials in a stdlib logger's message are removed too."""
        out = io.StringIO()
        configure_logging("json", "info", stream=out)
        logging.getLogger("redis").error("failed for redis://u:hunter2@h:1/0")
        assert "hunter2" not in out.getvalue()
        assert lines(out)[0]["event"] == "failed for redis://h:1/0"

    def test_processor_alone(self) -> None:
        """The processor rewrites string values and leaves others alone."""
        event = {"event": "x", "url": "unix://u:pw@/run/r.sock", "n": 3, "b": b"raw"}
        out = redact_credentials(None, "info", event)
        assert "pw" not in str(out["url"])
        assert (out["n"], out["b"]) == (3, b"raw")

    def test_capture_logs_sees_raw_events(self) -> None:
        """Under capture_logs the events keep their structure (tests assert on dicts)."""
        with structlog.testing.capture_logs() as captured:
            structlog.get_logger().info("lease_recovered", queue="q", ids=cap_ids([b"1"]))
        assert captured == [
            {"event": "lease_recovered", "queue": "q", "ids": ["1"], "log_level": "info"}
        ]

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("redis://u:p@h:6379/0", "redis://h:6379/0"),
            ("redis://:p@h", "redis://h"),
            ("see rediss://u:p@h:1/2 and redis://v:q@k:2", "see rediss://h:1/2 and redis://k:2"),
            ("redis://u:p@h:port/0", "redis://h:port/0"),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("user@example.com", "user@example.com"),
            ("redis://h:1/0?password=p&db=2", "redis://h:1/0?password=<redacted>&db=2"),
            ("cannot reach redis://h:1/0?password=<redacted>: x", None),
            ("no url", "no url"),
        ],
    )
    def test_redact_text(self, text: str, expected: str | None) -> None:
        """Every URL's user and password (the query's too) are removed, once; None: unchanged."""
        assert redact_text(text) == (text if expected is None else expected)


class TestCapIds:
    def test_bytes_to_text(self) -> None:
        """Bytes ids become text; invalid UTF-8 is shown with backslash escapes."""
        assert cap_ids([b"job-1", b"\xff2", "str-3"]) == ["job-1", "\\xff2", "str-3"]

    def test_capped(self) -> None:
        """More than the limit: the first ones, then a marker with how many were left out."""
        ids = [str(i).encode() for i in range(25)]
        capped = cap_ids(ids)
        assert capped[:20] == [str(i) for i in range(20)]
        assert capped[20:] == ["…(+5 more)"]
        assert cap_ids(ids, limit=2) == ["0", "1", "…(+23 more)"]

    def test_exactly_the_limit(self) -> None:
        """At the limit, no marker."""
        assert cap_ids([b"a", b"b"], limit=2) == ["a", "b"]
        assert cap_ids([]) == []
