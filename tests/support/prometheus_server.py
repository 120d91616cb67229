"""A real Prometheus and sweeperd as processes of the tests, Prometheus's HTTP API polled."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.servers import terminate

WAIT_S = 45.0
POLL_S = 0.25
STOP_TIMEOUT_S = 10.0

T = TypeVar("T")


def prometheus_binary() -> str:
    """Debian's prometheus; a missing one fails the test, it never skips."""
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("prometheus is not installed: apt-get install -y prometheus")
    return found


def poll(probe: Callable[[], T | None], processes: list[Process]) -> T | None:
    """Poll probe until it returns a value or time runs out; fail if a process dies."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for process in processes:
            process.check_alive()
        value = probe()
        if value is not None or time.monotonic() > deadline:
            return value
        time.sleep(POLL_S)


@dataclass
class Process:
    """A subprocess with its output in a log file, stopped by SIGTERM."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, argv: list[str], log: Path) -> Process:
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        return cls(name, popen, log)

    def tail(self) -> str:
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-3000:]

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.popen.returncode}\n{self.tail()}")

    def stop(self) -> None:
        terminate(self.popen, STOP_TIMEOUT_S)


@dataclass
class Stack:
    """sweeperd and Prometheus running against the session's module server."""

    prometheus_url: str
    good_queue: str
    lane_queue: str
    processes: list[Process]

    def api(self, path: str, **params: str) -> Any:
        """The `data` of a Prometheus HTTP API answer, or None while it cannot answer."""
        url = f"{self.prometheus_url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except (urllib.error.URLError, ConnectionError):
            return None
        assert body["status"] == "success", body
        return body["data"]

    def value(self, query: str) -> float | None:
        """The single value of an instant query, or None while it has no result."""
        data = self.api("/api/v1/query", query=query)
        if not data or not data["result"]:
            return None
        (sample,) = data["result"]
        return float(sample["value"][1])

    def wait_for(self, what: str, probe: Callable[[], T | None]) -> T:
        """Poll probe until it returns a value; fail with the logs when time runs out."""
        value = poll(probe, self.processes)
        if value is None:
            logs = "\n".join(process.tail() for process in self.processes)
            pytest.fail(f"timed out waiting for {what}\n{logs}")
        return value
